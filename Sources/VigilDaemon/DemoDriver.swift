import Foundation
import VigilLifecycle
import VigilProtocol

/// The built-in demo for machines with no accessory attached: runs the sample
/// app, sends it to the background, and wakes it with a test event now and
/// then, so the whole lifecycle can be watched in the log and in `vigilctl`.
enum DemoDriver {
    static let appID = "org.vigil.demo"

    static func manifests() -> [String: AppManifest] {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("vigil-demo-app").path
        return [
            appID: AppManifest(
                id: appID, exec: [executable], backgroundModes: [.externalAccessory],
                environment: ["VIGIL_DEMO_TASK_SECONDS": "2"], path: "<built-in demo>"),
        ]
    }

    /// Launch, background after a few seconds, then a wake every `interval`.
    static func run(core: DaemonCore, interval: Duration = .seconds(15)) async {
        do {
            try await core.demoAction(.launch)
            try await Task.sleep(for: .seconds(3))
            try await core.demoAction(.background)
            var tick = 1
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                try await core.demoWake(tick)
                tick += 1
            }
        } catch is CancellationError {
        } catch {
            core.logger.error("demo stopped: \(error)")
        }
    }
}

extension DaemonCore {
    func demoAction(_ action: UserAction) throws {
        try withEngine { engine, now throws(ProtocolError) in
            switch action {
            case .launch: try engine.launch(DemoDriver.appID, now: now)
            case .background: try engine.moveToBackground(DemoDriver.appID, now: now)
            default: break
            }
        }
    }

    func demoWake(_ tick: Int) throws {
        let event = QueuedEvent(kind: "demo.tick", attributes: ["tick": .number(Double(tick))], payload: Array("tick \(tick)".utf8))
        _ = try withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: DemoDriver.appID, now: now) }
    }
}

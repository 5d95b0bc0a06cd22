import FoundationEssentials
import Glibc
import VigilLifecycle
import VigilProtocol

/// The built-in demo for machines with no accessory attached: runs the sample
/// app, sends it to the background, and wakes it with a test event now and
/// then, so the whole lifecycle can be watched in the log and in `vigilctl`.
/// When the sensor logger example is built beside vigild it runs too, logging
/// whatever sensor speaks `org.vigil.sensor` (scripts/run-demo attaches a
/// virtual one) while suspended between bursts. The heart-rate bridge runs
/// too when built beside vigild: it finds a heart-rate monitor through BlueZ
/// (scripts/run-demo provides a virtual one) and is woken per measurement.
enum DemoDriver {
    static let appID = "org.vigil.demo"
    static let loggerID = "org.vigil.sensor-logger"
    static let bridgeID = "org.vigil.example.hrm-bridge"
    static var appIDs: [String] { [appID, loggerID, bridgeID] }

    static func manifests(stateDirectory: String) -> [String: AppManifest] {
        let binaries = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        var manifests = [
            appID: AppManifest(
                id: appID, exec: [binaries.appendingPathComponent("vigil-demo-app").path], backgroundModes: [.externalAccessory],
                environment: ["VIGIL_DEMO_TASK_SECONDS": "2"], path: "<built-in demo>"),
        ]
        let logger = binaries.appendingPathComponent("vigil-sensor-logger").path
        if FileManager.default.isExecutableFile(atPath: logger) {
            manifests[loggerID] = AppManifest(
                id: loggerID, exec: [logger], backgroundModes: [.externalAccessory], accessoryProtocols: ["org.vigil.sensor"],
                environment: ["VIGIL_LOGGER_DB": stateDirectory + "/demo-sensor-records.sqlite"], path: "<built-in demo>")
        }
        let bridge = binaries.appendingPathComponent("vigil-hrm-bridge").path
        if FileManager.default.isExecutableFile(atPath: bridge) {
            manifests[bridgeID] = AppManifest(
                id: bridgeID, exec: [bridge, "--output", stateDirectory + "/demo-heart-rate.jsonl"],
                backgroundModes: [.bluetoothCentral], path: "<built-in demo>")
        }
        // Compiled in: as trusted as the daemon, and run as its user.
        for id in manifests.keys { manifests[id]?.isBuiltIn = true }
        return manifests
    }

    /// Launch, background after a few seconds, then a wake every `interval`:
    /// on loop timers, so the demo too stays off the global executor.
    static func start(core: isolated DaemonCore, interval: Duration = .seconds(15)) {
        do {
            try core.demoAction(.launch)
        } catch {
            core.logger.error("demo stopped: \(error)")
            return
        }
        core.demoTimer = core.loop.schedule(after: .seconds(3)) { [unowned core] in
            core.assumeIsolated { core in
                do {
                    try core.demoAction(.background)
                } catch {
                    core.logger.error("demo stopped: \(error)")
                    core.demoTimer = nil
                    return
                }
                scheduleWake(core: core, tick: 1, interval: interval)
            }
        }
    }

    private static func scheduleWake(core: isolated DaemonCore, tick: Int, interval: Duration) {
        core.demoTimer = core.loop.schedule(after: interval) { [unowned core] in
            core.assumeIsolated { core in
                do {
                    try core.demoWake(tick)
                } catch {
                    core.logger.error("demo stopped: \(error)")
                    core.demoTimer = nil
                    return
                }
                scheduleWake(core: core, tick: tick + 1, interval: interval)
            }
        }
    }
}

extension DaemonCore {
    /// Applies `action` to every demo app.
    func demoAction(_ action: UserAction) throws {
        try withEngine { engine, now throws(ProtocolError) in
            for app in DemoDriver.appIDs where engine.apps[app] != nil {
                switch action {
                case .launch: try engine.launch(app, now: now)
                case .background: try engine.moveToBackground(app, now: now)
                default: break
                }
            }
        }
    }

    func demoWake(_ tick: Int) throws {
        let event = QueuedEvent(kind: "demo.tick", attributes: ["tick": .number(Double(tick))], payload: Array("tick \(tick)".utf8))
        _ = try withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: DemoDriver.appID, now: now) }
    }
}

import FoundationEssentials
import Glibc
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The built-in demo for machines with no accessory attached: runs the sample
/// app, sends it to the background, and wakes it with a test event now and
/// then, so the whole lifecycle can be watched in the log and in `vigilctl`.
/// When the sensor logger example is built beside vigild it runs too, logging
/// whatever sensor speaks `org.vigil.sensor` (scripts/run-demo attaches a
/// virtual one) while suspended between bursts. The heart-rate bridge runs
/// too when built beside vigild: it finds a heart-rate monitor through BlueZ
/// (scripts/run-demo provides a virtual one) and is woken per measurement.
final class DemoComponent: DaemonComponent {
    let name = "demo"
    /// The next step's timer, while the demo runs (`vigild --demo`).
    private var timer: TimerID?
    private var interval: Duration = .seconds(15)

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
    func run<S: DaemonServices>(interval: Duration = .seconds(15), services: isolated S) {
        self.interval = interval
        step(0, services: services)
    }

    /// Tick 0 launches the demo apps, tick 1 sends them to the background
    /// (3 s later), every later tick wakes the sample app.
    private func step<S: DaemonServices>(_ tick: Int, services: isolated S) {
        do {
            switch tick {
            case 0: try act(.launch, services: services)
            case 1: try act(.background, services: services)
            default: try wake(tick - 1, services: services)
            }
        } catch {
            services.logger.error("demo stopped: \(error)")
            timer = nil
            return
        }
        timer = services.loop.schedule(after: tick == 0 ? .seconds(3) : interval, services.callback(DemoComponent.self) { demo, services in
            demo.step(tick + 1, services: services)
        })
    }

    /// Applies `action` to every demo app.
    private func act<S: DaemonServices>(_ action: UserAction, services: isolated S) throws(ProtocolError) {
        try services.withEngine { engine, now throws(ProtocolError) in
            for app in Self.appIDs where engine.apps[app] != nil {
                switch action {
                case .launch: try engine.launch(app, now: now)
                case .background: try engine.moveToBackground(app, now: now)
                default: break
                }
            }
        }
    }

    private func wake<S: DaemonServices>(_ tick: Int, services: isolated S) throws(ProtocolError) {
        let event = QueuedEvent(kind: "demo.tick", attributes: ["tick": .number(Double(tick))], payload: Array("tick \(tick)".utf8))
        _ = try services.withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: Self.appID, now: now) }
    }

    /// The daemon's stop begins: no more steps.
    func stopIntake<S: DaemonServices>(services: isolated S) {
        if let timer { services.loop.cancelTimer(timer) }
        timer = nil
    }
}

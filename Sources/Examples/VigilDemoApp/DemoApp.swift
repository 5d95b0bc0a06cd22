import FoundationEssentials
import Glibc
import VigilKit

/// `vigil-demo-app`: a sample app on VigilKit that reports everything it is
/// given, and whose behaviour the environment scripts (see `DemoConfiguration`).
/// The README demo, the integration tests and the wake-latency benchmark run it.
@main
struct DemoApp {
    static func main() async {
        let configuration = DemoConfiguration()
        let recorder = Recorder(path: configuration.recordPath)
        let app: Application
        do {
            app = try await Application.connect()
        } catch {
            let line = Array("vigil-demo-app: \(error)\n".utf8)
            _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
            exit(1)
        }

        var launch = Record(kind: "launch")
        launch.reason = app.launchOptions.reason.rawValue
        launch.eventKind = app.launchOptions.eventKind
        launch.state = app.state.rawValue
        recorder.record(launch, "\(app.id) launched (\(launch.reason!)), state \(launch.state!)")

        let handler = DemoHandler(app: app, configuration: configuration, recorder: recorder)
        for await item in app.events {
            // Taken first, before any other work: the benchmark's end of a wake.
            let handled = MonotonicClock.now
            switch item {
            case let .lifecycle(notification): await handler.handle(notification, at: handled)
            case let .event(event): await handler.handle(event, at: handled)
            case .connectionRestored: handler.reconnected(at: handled)
            }
        }
        // VigilKit reconnects after a daemon restart: the stream ends only when vigild refuses the app.
        recorder.say("vigild no longer accepts this app, exiting")
    }
}

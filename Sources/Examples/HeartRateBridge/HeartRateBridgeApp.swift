import Glibc
import VigilKit

/// `vigil-hrm-bridge`: a Bluetooth LE heart-rate monitor (Heart Rate Service
/// 0x180D) bridged to JSON lines, one per measurement, by an app that is
/// suspended (frozen) nearly all the time.
///
/// vigild holds the connection and the subscription while the app is frozen,
/// wakes it for each notification (the manifest declares
/// `background-modes = ["bluetooth-central"]`: see
/// `org.vigil.example.hrm-bridge.toml` next to this file), and the app writes
/// the line and says it has finished, to be frozen again at once. After a
/// link loss the daemon reconnects and renews the subscription by itself: the
/// bridge only logs the disconnection and goes on appending to the same
/// output. Killed by the system, it is relaunched by the next event and gets
/// its monitor back through the central manager's restore identifier
/// (`willRestoreState`), without scanning again.
///
/// Two more ways to run (docs/bluetooth.md, "The heart-rate bridge"):
/// `--republish` makes the bridge a heart-rate monitor itself: it publishes a
/// Heart Rate Service through vigild's peripheral role (`Republisher`) and
/// notifies each measurement it receives, byte for byte; `--serial-protocol
/// PROTO` takes the measurements from a serial sensor's lines
/// (`SerialSource`) instead of a BLE monitor.
///
/// Output: JSON lines (`OutputLine` lists every kind), appended to `--output`
/// or written to standard output, one `write(2)` each. Diagnostics go to
/// standard error (vigild's app log).
enum HeartRateBridgeApp {
    /// How long to wait, after the manager exists, for a `willRestoreState`
    /// before starting afresh (it is already queued when there is one: this
    /// only orders two tasks).
    static let restoreGrace: Duration = .milliseconds(250)

    static func run(_ options: BridgeOptions) async -> Never {
        let output: Output
        do {
            output = try Output(path: options.output)
        } catch {
            say("\(error)")
            exit(1)
        }
        let app: Application
        do {
            app = try await Application.connect()
        } catch {
            output.write(OutputLine(.error(operation: "connect to vigild", message: "\(error)", address: nil, raw: nil)))
            say("cannot connect to vigild: \(error)")
            exit(1)
        }
        output.write(OutputLine(.started(
            pid: Int(getpid()), app: app.id, launchReason: app.launchOptions.reason.rawValue, state: app.state.rawValue,
            restoreIdentifier: options.restoreIdentifier, address: options.address)))
        say("\(app.id) launched (\(app.launchOptions.reason.rawValue)), state \(app.state.rawValue), output "
            + "\(options.output ?? "standard output"), restore identifier \(options.restoreIdentifier)")

        // Launched into the background (a central subscribed, data came), the
        // app must not be suspended before its set-up is done: an event handled
        // meanwhile says it has finished.
        let launch = await app.beginBackgroundTask(name: "launch")
        // The peripheral manager first: its events (and a restored state) wait for it.
        let republisher: Republisher? = options.republish ? await makeRepublisher(app, options, output) : nil
        let export = options.mqttTopic.map { MeasurementExport(app: app, topic: $0, output: output) }
        if let serialProtocol = options.serialProtocol {
            await runSerial(app, serialProtocol, output, republisher, export, launch: launch)
        }
        followLifecycle(app, output, serial: nil)
        let central = await makeCentral(app, options, output)
        await app.endBackgroundTask(launch)
        let bridge = Bridge(app: app, central: central, output: output, options: options, republisher: republisher, export: export)
        await republisher?.setEnergyReset { try await bridge.resetEnergyExpended() }
        Task {
            try? await Task.sleep(for: restoreGrace)
            await bridge.begin()
            await finishIfBackground(app)
        }
        // One event at a time: each is acknowledged when the loop asks for the
        // next, after its line is written; the app is frozen once it is.
        for await event in central.events {
            await bridge.handle(event)
            await finishIfBackground(app)
        }
        say("the central manager's events ended (vigild no longer accepts this app), exiting")
        exit(0)
    }

    /// `--serial-protocol`: sessions with the sensor instead of a central manager.
    private static func runSerial(
        _ app: Application, _ protocolString: String, _ output: Output, _ republisher: Republisher?,
        _ export: MeasurementExport?, launch: BackgroundTaskIdentifier
    ) async -> Never {
        let source = SerialSource(app: app, protocolString: protocolString, output: output, republisher: republisher, export: export)
        await republisher?.setEnergyReset { await source.resetEnergy() }
        followLifecycle(app, output, serial: source)
        do {
            try await app.accessoryManager.registerForNotifications()
        } catch {
            output.write(OutputLine(.error(operation: "register for accessory notifications", message: "\(error)", address: nil, raw: nil)))
            say("cannot register for accessory notifications: \(error)")
        }
        await source.rescan("launch")
        await app.endBackgroundTask(launch)  // the session is open
        await finishIfBackground(app)
        for await notification in app.accessoryManager.notifications {
            if case let .connected(accessory) = notification {
                await source.attach(accessory, "connected")
            }
            await finishIfBackground(app)
        }
        say("the accessory notifications ended (vigild no longer accepts this app), exiting")
        exit(0)
    }

    /// `--republish`: the peripheral manager (same restore identifier), its
    /// event loop, and the service published unless the daemon restored it.
    private static func makeRepublisher(_ app: Application, _ options: BridgeOptions, _ output: Output) async -> Republisher {
        var delay = 1.0
        let manager: PeripheralManager
        while true {
            do {
                manager = try await PeripheralManager(application: app, restoreIdentifier: options.restoreIdentifier)
                break
            } catch {
                output.write(OutputLine(.error(operation: "register the peripheral manager", message: "\(error)", address: nil, raw: nil)))
                say("cannot register the peripheral manager: \(error); again in \(Int(delay)) s")
                try? await Task.sleep(for: .seconds(delay))
                delay = min(delay * 2, 60)
            }
        }
        let republisher = Republisher(app: app, manager: manager, output: output, location: options.location)
        await republisher.begin()
        Task {
            for await event in manager.events {
                await republisher.handle(event)
                await finishIfBackground(app)
            }
            say("the peripheral manager's events ended")
        }
        return republisher
    }

    /// The central manager, registered early (Bluetooth events wait for it).
    /// Registration failures are logged and retried, never a crash loop.
    private static func makeCentral(_ app: Application, _ options: BridgeOptions, _ output: Output) async -> CentralManager {
        var delay = 1.0
        while true {
            do {
                return try await CentralManager(application: app, restoreIdentifier: options.restoreIdentifier)
            } catch {
                output.write(OutputLine(.error(operation: "register the central manager", message: "\(error)", address: nil, raw: nil)))
                say("cannot register the central manager: \(error); again in \(Int(delay)) s")
                try? await Task.sleep(for: .seconds(delay))
                delay = min(delay * 2, 60)
            }
        }
    }

    /// Lifecycle changes (logged as lines) and any event that is not Bluetooth's.
    private static func followLifecycle(_ app: Application, _ output: Output, serial: SerialSource?) {
        Task {
            for await item in app.events {
                switch item {
                case let .lifecycle(notification):
                    output.write(OutputLine(.lifecycle(notification: notification.rawValue, state: app.state.rawValue)))
                    switch notification {
                    case .didEnterBackground:
                        await app.finishedProcessing()
                    case .willTerminate:
                        exit(0)  // every line is written when it is made: nothing to save
                    default:
                        break
                    }
                case let .event(event) where serial != nil && event.accessoryContent != nil:
                    // Before this process registered, or a session of an earlier
                    // process (its data redelivered): handled like our own.
                    if let serial, let content = event.accessoryContent {
                        switch content {
                        case let .data(session): await serial.data(event.payload, session: session)
                        case let .connected(accessory): await serial.attach(accessory, "connected")
                        case let .closed(session, reason, willReopen):
                            await serial.broke(session: session, event: willReopen ? "interrupted" : "closed", reason)
                            if !willReopen { await serial.earlierSessionEnded(session) }
                        default: break
                        }
                    }
                    app.acknowledge(event)
                    await finishIfBackground(app)
                case let .event(event):
                    say("event \(event.seq) '\(event.kind)' is not for the bridge: acknowledged, ignored")
                    app.acknowledge(event)
                    await finishIfBackground(app)
                case .connectionRestored:
                    say("reconnected to vigild, state \(app.state.rawValue) (the central manager registers again by itself)")
                }
            }
            say("vigild no longer accepts this app, exiting")
            exit(0)
        }
    }
}

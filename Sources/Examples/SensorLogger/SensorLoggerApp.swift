import Foundation
import VigilKit

/// `vigil-sensor-logger`: the background sensor logger. It keeps a session
/// with each serial sensor that speaks its protocol, stores the sensor's line
/// records in SQLite (GRDB), and is suspended almost all the time: vigild
/// keeps the port open and reads while the app is frozen, wakes it once per
/// burst, and the app commits the burst inside a "flush" background task,
/// then says it has finished. Data is acknowledged only once committed, so a
/// crash means the burst comes again (stored once: `INSERT OR IGNORE`).
///
/// Environment: `VIGIL_LOGGER_PROTOCOL`, `VIGIL_LOGGER_DB`, `VIGIL_LOGGER_STATS`,
/// `VIGIL_LOGGER_LINE_SETTINGS`, `VIGIL_LOGGER_CRASH_AFTER_BATCH`, `VIGIL_LOGGER_RUUVI` (see `LoggerConfiguration`).
/// With `VIGIL_LOGGER_RUUVI=1` it logs RuuviTag broadcasts too (`Broadcasts`).
@main
struct SensorLoggerApp {
    static func main() async {
        let configuration = LoggerConfiguration()
        let store: RecordStore
        let app: Application
        do {
            store = try RecordStore(path: configuration.databasePath)
            app = try await Application.connect()
        } catch {
            FileHandle.standardError.write(Data("vigil-sensor-logger: \(error)\n".utf8))
            exit(1)
        }
        say("\(app.id) launched (\(app.launchOptions.reason.rawValue)), state \(app.state.rawValue); "
            + "protocol \(configuration.protocolString), database \(configuration.databasePath)")

        let stats = StatsFile(path: configuration.statsPath)
        let ingest = Ingest(
            app: app, store: store, stats: stats, crashAfterBatch: configuration.crashAfterBatch, mqttTopic: configuration.mqttTopic,
            trace: TraceFile(path: configuration.tracePath))
        let attachments = Attachments(app: app, configuration: configuration, ingest: ingest)
        stats.update { _ in }

        do {
            try await app.accessoryManager.registerForNotifications()
        } catch {
            say("cannot register for accessory notifications: \(error)")
        }
        Task {
            for await notification in app.accessoryManager.notifications {
                switch notification {
                case let .connected(accessory):
                    say("connected: \(Attachments.describe(accessory))")
                    await attachments.attach(accessory, "connected")
                case let .disconnected(accessory):
                    say("disconnected: \(Attachments.describe(accessory))")
                }
                await app.finishedProcessing()
            }
        }
        if configuration.ruuvi {
            let broadcasts = Broadcasts(app: app, store: store, mqttTopic: configuration.mqttTopic)
            Task { await broadcasts.run() }
        }
        await attachments.rescan("launch")
        await app.finishedProcessing()

        var main = MainEvents(app: app, ingest: ingest, attachments: attachments)
        for await item in app.events {
            switch item {
            case let .lifecycle(notification): await main.handle(notification)
            case let .event(event): await main.handle(event)
            case .connectionRestored:
                say("reconnected to vigild, state \(app.state.rawValue)")
                await attachments.rescan("reconnected")
                await app.finishedProcessing()
            }
        }
        say("vigild no longer accepts this app, exiting")
    }
}

/// What comes in `Application.events`: lifecycle changes, and accessory events
/// that no session of this process waits for, above all the data of sessions
/// of a crashed process, redelivered because it was never acknowledged.
struct MainEvents {
    let app: Application
    let ingest: Ingest
    let attachments: Attachments
    /// Sessions of earlier processes or connections whose events come here.
    private var streams: [Int: StreamState] = [:]

    init(app: Application, ingest: Ingest, attachments: Attachments) {
        self.app = app
        self.ingest = ingest
        self.attachments = attachments
    }

    func handle(_ notification: LifecycleNotification) async {
        say("\(notification.rawValue) -> \(app.state.rawValue)")
        switch notification {
        case .didEnterBackground:
            await app.finishedProcessing()
        case .willTerminate:
            exit(0)  // every batch is committed when it is handled: nothing to save
        default:
            break
        }
    }

    mutating func handle(_ event: AppEvent) async {
        switch event.accessoryContent {
        case let .data(session)?:
            var stream = await stream(session)
            await ingest.data(event.payload, on: &stream, redelivered: event.redelivered)
            streams[session] = stream
        case let .loss(session, loss)?:
            await ingest.loss(loss, on: await stream(session))
        case let .closed(session, reason, willReopen)?:
            var stream = await stream(session)
            if willReopen {
                await ingest.interrupted(reason, on: &stream)
                streams[session] = stream
            } else {
                await ingest.closed(reason, on: &stream)
                streams[session] = nil
                // Its accessory may still be there: open a session of our own.
                await attachments.rescan("a session of an earlier process ended")
            }
        case let .reopened(session, accessory)?:
            var stream = await stream(session)
            await ingest.reopened(accessory, on: &stream)
            streams[session] = stream
        case let .connected(accessory)?:
            say("connected: \(Attachments.describe(accessory))")
            await attachments.attach(accessory, "connected")
        case let .disconnected(accessory)?:
            say("disconnected: \(Attachments.describe(accessory))")
        case nil, .lines?:
            say("event \(event.seq) '\(event.kind)' ignored")
        }
        await app.finishedProcessing(acknowledging: event)
    }

    /// The stream of a session this process did not open: its accessory as
    /// recorded when it was opened, its line state from the database.
    private func stream(_ session: Int) async -> StreamState {
        if let stream = streams[session] { return stream }
        let origin = try? await ingest.store.origin(ofSession: session)
        return StreamState(
            session: session, accessorySerial: origin?.accessorySerial ?? "unknown (session \(session))",
            connectionID: origin?.connectionID ?? 0, isResumed: false)
    }
}

import Foundation
import VigilProtocol

/// An app's link to vigild: its lifecycle, its events and its background time,
/// in the shape of `UIApplication`.
///
/// ```swift
/// let app = try await Application.connect()
/// for await item in app.events {
///     guard case let .event(event) = item else { continue }
///     handle(event)
///     app.acknowledge(event)
///     await app.finishedProcessing()
/// }
/// ```
///
/// The daemon identifies the app by the cgroup it launched it into; a process
/// it did not launch is refused with `unauthorized`.
public final class Application: Sendable {
    /// The app id from its manifest, as the daemon identified it.
    public let id: String
    /// Why this process was started (by the user, or in the background by an event).
    public let launchOptions: LaunchOptions
    /// Everything the daemon delivers, in order. Iterate it from one task only:
    /// each item goes to a single consumer. It finishes when the connection drops.
    public let events: AsyncStream<ApplicationEvent>

    private let connection: Connection
    private let inbox: ApplicationInbox

    private init(welcome: Welcome, connection: Connection, inbox: ApplicationInbox, events: AsyncStream<ApplicationEvent>) {
        self.id = welcome.app ?? ""
        self.launchOptions = welcome.launch ?? LaunchOptions(reason: .user)
        self.connection = connection
        self.inbox = inbox
        self.events = events
    }

    deinit { connection.close() }

    /// Connects to the daemon as an app; the socket is resolved by `DaemonSocket.path(explicit:)`.
    public static func connect(socketPath: String? = nil) async throws -> Application {
        let (events, continuation) = AsyncStream.makeStream(of: ApplicationEvent.self)
        let inbox = ApplicationInbox(continuation: continuation)
        let (connection, welcome) = try await Connection.establish(
            path: DaemonSocket.path(explicit: socketPath),
            hello: Hello(role: .app, client: "VigilKit/\(ProtocolVersion.current)"),
            onEvent: inbox.receive
        )
        return Application(welcome: welcome, connection: connection, inbox: inbox, events: events)
    }

    /// The current state; updated before the `.lifecycle` item announcing it is yielded.
    public var state: AppState { inbox.state }

    /// Seconds of background time left: `.infinity` while unlimited (in the
    /// foreground), counting down to 0 in the background. Computed locally from
    /// the daemon's CLOCK_MONOTONIC deadline, so reading it costs no round trip.
    public var backgroundTimeRemaining: TimeInterval {
        guard let deadline = inbox.deadline else { return .infinity }
        let now = MonotonicClock.now
        return deadline > now ? TimeInterval(deadline - now) / 1e9 : 0
    }

    /// Marks `event`, and every earlier one, as handled: the daemon drops them
    /// from its queue. Call it after handling, not on receipt; an ack lost to a
    /// dropped connection only means the event comes again.
    public func acknowledge(_ event: AppEvent) {
        try? connection.send(Acknowledge(seq: event.seq))
    }

    /// Asks for time to finish work in the background. Until the task is ended
    /// the app is not suspended, up to the background time limit; shortly before
    /// it, `expirationHandler` is called and should end the task at once. A task
    /// still held at the limit gets the app terminated.
    ///
    /// - Returns: the task, or `.invalid` when no background time can be granted.
    public func beginBackgroundTask(
        name: String? = nil, expirationHandler: (@Sendable () -> Void)? = nil
    ) async -> BackgroundTaskIdentifier {
        let request = BeginBackgroundTask(name: name ?? "unnamed")
        guard let granted = try? await connection.request(request, expecting: BackgroundTaskGranted.self),
              granted.task != BackgroundTaskIdentifier.invalid.rawValue
        else { return .invalid }
        let task = BackgroundTaskIdentifier(rawValue: granted.task)
        if let expirationHandler { inbox.register(expirationHandler, for: task) }
        return task
    }

    /// Balances `beginBackgroundTask`. Ending `.invalid` or an already ended task does nothing.
    public func endBackgroundTask(_ task: BackgroundTaskIdentifier) async {
        guard task != .invalid else { return }
        inbox.unregister(task)
        _ = try? await connection.request(EndBackgroundTask(task: task.rawValue), expecting: Done.self)
    }

    /// Tells the daemon the app has handled what woke it. With no task held it
    /// is suspended right away, which is what a well-behaved app does instead of
    /// running out its wake budget.
    public func finishedProcessing() async {
        _ = try? await connection.request(FinishedProcessing(), expecting: Done.self)
    }

    /// Closes the connection; `events` finishes.
    public func disconnect() {
        connection.close()
    }
}

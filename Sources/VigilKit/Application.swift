import FoundationEssentials
import Glibc
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
///
/// ## Daemon restarts
///
/// A graceful stop of vigild leaves apps running, and the next daemon adopts
/// them. When the connection drops while the process runs on, `Application`
/// connects again in the background (after 50 ms, doubling up to 2 s between
/// attempts, for as long as it takes) and carries on with the same `events`:
/// `.connectionRestored` marks the seam, then every unacknowledged event comes
/// again with `redelivered` set. Meanwhile:
/// - requests pending at the drop fail with `disconnected`, and so do those made
///   before the new handshake: `beginBackgroundTask` returns `.invalid`,
///   `finishedProcessing()` does nothing, an `acknowledge` is lost (the event
///   only comes again);
/// - background tasks begun on the lost connection are gone with it (the new
///   daemon never granted them, their expiration handlers are never called):
///   `endBackgroundTask` on them does nothing;
/// - `state` and `backgroundTimeRemaining` keep their last values until the new
///   `welcome` replaces them, before `.connectionRestored` is yielded;
///   `launchOptions` keeps saying why this process was started.
/// If the new daemon refuses the process (`unauthorized`: it no longer belongs
/// to this app, e.g. after a configuration change), `events` finishes.
public final class Application: Sendable {
    /// The app id from its manifest, as the daemon identified it.
    public let id: String
    /// Why this process was started (by the user, or in the background by an event).
    public let launchOptions: LaunchOptions
    /// Everything the daemon delivers, in order, across reconnections (see
    /// "Daemon restarts"). Iterate it from one task only: each item goes to a
    /// single consumer. It finishes on `disconnect()`, or when a reconnection is
    /// refused (`unauthorized`, `unsupportedVersion`).
    ///
    /// Accessory events the app is waiting for elsewhere do not come here: the
    /// data and notices of an open `AccessorySession` go to that session, and
    /// connects and disconnects to `accessoryManager.notifications` once the
    /// app registered for them. Those that nothing in this process waits for
    /// (redelivered ones above all: see `AccessorySession`) come here;
    /// `AppEvent.accessoryContent` reads them.
    ///
    /// Bluetooth events (`ble.*`) go to the app's `CentralManager`, those of
    /// the peripheral role (`ble.peripheral.*`) to its `PeripheralManager`, and
    /// `ble.state` to both; until the manager an event is for is created in
    /// this process it is held back (not acknowledged), then handed to it.
    /// Only `ble.*` kinds this version does not know come here.
    public let events: AsyncStream<ApplicationEvent>
    /// Accessories and sessions with them, as `EAAccessoryManager`.
    public let accessoryManager: AccessoryManager

    let session: ApplicationSession

    private init(welcome: Welcome, session: ApplicationSession, events: AsyncStream<ApplicationEvent>) {
        self.id = welcome.app ?? ""
        self.launchOptions = welcome.launch ?? LaunchOptions(reason: .user)
        self.session = session
        self.events = events
        self.accessoryManager = AccessoryManager(session: session)
    }

    deinit { session.end() }

    /// Connects to the daemon as an app; the socket is resolved by
    /// `DaemonSocket.path(explicit:)`. A failure of this first connection is
    /// thrown (nothing is retried); later drops are reconnected.
    public static func connect(socketPath: String? = nil) async throws -> Application {
        let (events, continuation) = AsyncStream.makeStream(of: ApplicationEvent.self)
        let (session, welcome) = try await ApplicationSession.connect(
            path: DaemonSocket.path(explicit: socketPath), continuation: continuation)
        return Application(welcome: welcome, session: session, events: events)
    }

    private var inbox: ApplicationInbox { session.inbox }

    /// The current state; updated before the `.lifecycle` item announcing it is
    /// yielded, and from the daemon's `welcome` after a reconnection.
    public var state: AppState { inbox.state }

    /// Seconds of background time left: `.infinity` while unlimited (in the
    /// foreground), counting down to 0 in the background. Computed locally from
    /// the daemon's CLOCK_MONOTONIC deadline, so reading it costs no round trip.
    public var backgroundTimeRemaining: TimeInterval {
        guard let deadline = inbox.deadline else { return .infinity }
        let now = MonotonicClock.now
        return deadline > now ? TimeInterval(deadline - now) / 1e9 : 0
    }

    /// Marks `event`, and every earlier one of `events`, as handled: the daemon
    /// drops them from its queue. Call it after handling, not on receipt; an ack
    /// lost to a dropped connection only means the event comes again.
    ///
    /// `ack` is cumulative on the wire, so it goes out only up to the oldest
    /// event another consumer (an `AccessorySession`, the accessory
    /// notifications) has not finished yet, and follows once that one has.
    public func acknowledge(_ event: AppEvent) {
        session.router.acknowledgeEvents(upTo: event.seq)
    }

    /// Asks for time to finish work in the background. Until the task is ended
    /// the app is not suspended, up to the background time limit; shortly before
    /// it, `expirationHandler` is called and should end the task at once. A task
    /// still held at the limit gets the app terminated.
    ///
    /// - Returns: the task, or `.invalid` when no background time can be granted
    ///   (or vigild is unreachable, as while reconnecting).
    public func beginBackgroundTask(
        name: String? = nil, expirationHandler: (@Sendable () -> Void)? = nil
    ) async -> BackgroundTaskIdentifier {
        guard let task = try? await session.beginBackgroundTask(name: name ?? "unnamed"), task != .invalid
        else { return .invalid }
        if let expirationHandler { inbox.register(expirationHandler, for: task) }
        return task
    }

    /// Balances `beginBackgroundTask`. Ending `.invalid`, an already ended task,
    /// or a task begun before a reconnection (the daemon no longer knows it) does nothing.
    public func endBackgroundTask(_ task: BackgroundTaskIdentifier) async {
        guard task != .invalid else { return }
        try? await session.endBackgroundTask(task)
    }

    /// Tells the daemon the app has handled what woke it. With no task held it
    /// is suspended right away, which is what a well-behaved app does instead of
    /// running out its wake budget.
    ///
    /// Called while an event is still held (a session's chunk in the body of
    /// a `for await` loop, acknowledged when the loop asks for the next), it
    /// returns at once and the finish goes out with that acknowledgement, as
    /// one message: the daemon suspends a finished app only once everything it
    /// was sent is acknowledged anyway. An event that arrives in between
    /// cancels it, as new work after a finish does in the daemon. A daemon
    /// that does not name `Welcome.Feature.finishAcknowledges` gets the
    /// request at once, as before.
    public func finishedProcessing() async {
        if session.inbox.daemonSupports(Welcome.Feature.finishAcknowledges), session.router.deferFinish() { return }
        _ = try? await session.request(FinishedProcessing(), expecting: Done.self)
    }

    /// `acknowledge(event)` and then `finishedProcessing()`, in one message:
    /// the daemon handles both in one pass (one wake-up of vigild fewer per wake).
    /// A daemon that does not name `Welcome.Feature.finishAcknowledges` (an
    /// older vigild) gets the two messages instead.
    public func finishedProcessing(acknowledging event: AppEvent) async {
        guard session.inbox.daemonSupports(Welcome.Feature.finishAcknowledges) else {
            acknowledge(event)
            await finishedProcessing()
            return
        }
        let ack = session.router.takeAcknowledgement(upTo: event.seq)
        _ = try? await session.request(FinishedProcessing(ack: ack), expecting: Done.self)
    }

    /// Closes the connection for good: nothing reconnects, requests still waiting
    /// fail with `disconnected`, and `events` finishes.
    public func disconnect() {
        session.end()
    }
}

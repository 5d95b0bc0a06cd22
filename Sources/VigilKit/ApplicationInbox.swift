import VigilProtocol
import VigilSystem

/// The app's local view of its lifecycle, kept current on the connection's
/// reader thread: state and deadline change before the event that announces
/// them is yielded, and expiration handlers run as soon as the warning arrives.
///
/// It outlives connections: `ApplicationSession` feeds it the `welcome` and
/// messages of whichever connection is current, and finishes it at the end.
final class ApplicationInbox: Sendable {
    private let continuation: AsyncStream<ApplicationEvent>.Continuation
    /// Takes every event: accessory events may go to other consumers than `events`.
    private let router: EventRouter
    /// Fills in the bytes of data events from their session logs.
    private let sessionLogs = SessionLogReader()
    private let local = Locked(Local())

    private struct Local {
        var state: AppState = .notRunning
        /// Background-time deadline, CLOCK_MONOTONIC ns; nil while unlimited.
        var deadline: UInt64?
        /// The current daemon's `welcome.features`.
        var features: Set<String> = []
        /// Which connection the messages come from (0 = the first); tasks are numbered per connection.
        var generation = 0
        /// `didFinishLaunching` was yielded: a daemon that adopts the running
        /// app after a restart sends it again, and this process launched once.
        var didFinishLaunching = false
        var expirationHandlers: [BackgroundTaskIdentifier: @Sendable () -> Void] = [:]
        /// Warnings that arrived before `beginBackgroundTask` could register the handler.
        var expiredEarly: Set<BackgroundTaskIdentifier> = []
    }

    init(continuation: AsyncStream<ApplicationEvent>.Continuation, router: EventRouter) {
        self.continuation = continuation
        self.router = router
    }

    var state: AppState { local.withLock { $0.state } }
    var deadline: UInt64? { local.withLock { $0.deadline } }
    /// Whether the daemon of the current connection named `feature` in its welcome.
    func daemonSupports(_ feature: String) -> Bool { local.withLock { $0.features.contains(feature) } }

    func register(_ handler: @escaping @Sendable () -> Void, for task: BackgroundTaskIdentifier) {
        let expired = local.withLock { local in
            // A task of a connection already replaced gets no warning any more.
            guard task.generation == local.generation else { return false }
            if local.expiredEarly.remove(task) != nil { return true }
            local.expirationHandlers[task] = handler
            return false
        }
        if expired { Self.run(handler) }
    }

    func unregister(_ task: BackgroundTaskIdentifier) {
        local.withLock { local in
            local.expirationHandlers[task] = nil
            local.expiredEarly.remove(task)
        }
    }

    /// A connection was greeted: called on its reader thread before any of its messages.
    /// For a connection after the first, the tasks of the earlier ones are forgotten
    /// and `.connectionRestored` is yielded.
    func connected(_ welcome: Welcome, generation: Int) {
        local.withLock { local in
            local.state = welcome.state ?? .background
            local.deadline = welcome.deadline
            local.features = Set(welcome.features ?? [])
            local.generation = generation
            local.expirationHandlers = local.expirationHandlers.filter { $0.key.generation == generation }
            local.expiredEarly = local.expiredEarly.filter { $0.generation == generation }
        }
        if generation > 0 { continuation.yield(.connectionRestored) }
    }

    /// A message of the current connection, on its reader thread, in wire order.
    func receive(_ message: IncomingMessage) {
        // A message this client cannot decode is skipped: later versions add kinds.
        try? decode(message)
    }

    /// Nothing more comes: `events` finishes.
    func finish() {
        continuation.finish()
    }

    private func decode(_ message: IncomingMessage) throws(ProtocolError) {
        switch message.type {
        case LifecycleMessage.type:
            let lifecycle = try message.decode(LifecycleMessage.self)
            let isRepeat = local.withLock { local in
                local.state = lifecycle.state
                guard lifecycle.event == .didFinishLaunching else { return false }
                defer { local.didFinishLaunching = true }
                return local.didFinishLaunching
            }
            if !isRepeat { continuation.yield(.lifecycle(lifecycle.event)) }
        case EventMessage.type:
            router.receive(sessionLogs.resolve(AppEvent(try message.decode(EventMessage.self), payload: message.body)))
        case DeadlineChanged.type:
            let deadline = try message.decode(DeadlineChanged.self).deadline
            local.withLock { $0.deadline = deadline }
        case TaskExpiring.type:
            let daemonTask = try message.decode(TaskExpiring.self).task
            let handler = local.withLock { local in
                let task = BackgroundTaskIdentifier(daemonTask: daemonTask, generation: local.generation)
                let handler = local.expirationHandlers.removeValue(forKey: task)
                if handler == nil { local.expiredEarly.insert(task) }
                return handler
            }
            if let handler { Self.run(handler) }
        default:
            break
        }
    }

    /// Off the reader thread: a slow handler must not hold up replies and events.
    private static func run(_ handler: @escaping @Sendable () -> Void) {
        Task { handler() }
    }
}

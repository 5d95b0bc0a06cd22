import VigilProtocol
import VigilSystem

/// The app's local view of its lifecycle, kept current on the connection's
/// reader thread: state and deadline change before the event that announces
/// them is yielded, and expiration handlers run as soon as the warning arrives.
final class ApplicationInbox: Sendable {
    private let continuation: AsyncStream<ApplicationEvent>.Continuation
    private let local = Locked(Local())

    private struct Local {
        var state: AppState = .notRunning
        /// Background-time deadline, CLOCK_MONOTONIC ns; nil while unlimited.
        var deadline: UInt64?
        var expirationHandlers: [BackgroundTaskIdentifier: @Sendable () -> Void] = [:]
        /// Warnings that arrived before `beginBackgroundTask` could register the handler.
        var expiredEarly: Set<BackgroundTaskIdentifier> = []
    }

    init(continuation: AsyncStream<ApplicationEvent>.Continuation) {
        self.continuation = continuation
    }

    var state: AppState { local.withLock { $0.state } }
    var deadline: UInt64? { local.withLock { $0.deadline } }

    func register(_ handler: @escaping @Sendable () -> Void, for task: BackgroundTaskIdentifier) {
        let expired = local.withLock { local in
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

    /// Called by the connection on its reader thread, in wire order.
    func receive(_ event: ConnectionEvent) {
        switch event {
        case let .welcome(welcome):
            local.withLock { local in
                local.state = welcome.state ?? .background
                local.deadline = welcome.deadline
            }
        case let .message(message):
            // A message this client cannot decode is skipped: later versions add kinds.
            try? receive(message)
        case .closed:
            continuation.finish()
        }
    }

    private func receive(_ message: IncomingMessage) throws(ProtocolError) {
        switch message.type {
        case LifecycleMessage.type:
            let lifecycle = try message.decode(LifecycleMessage.self)
            local.withLock { $0.state = lifecycle.state }
            continuation.yield(.lifecycle(lifecycle.event))
        case EventMessage.type:
            continuation.yield(.event(AppEvent(try message.decode(EventMessage.self), payload: message.body)))
        case DeadlineChanged.type:
            let deadline = try message.decode(DeadlineChanged.self).deadline
            local.withLock { $0.deadline = deadline }
        case TaskExpiring.type:
            let task = BackgroundTaskIdentifier(rawValue: try message.decode(TaskExpiring.self).task)
            let handler = local.withLock { local in
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

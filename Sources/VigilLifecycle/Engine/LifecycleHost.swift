import VigilProtocol

/// What the lifecycle engine asks of the world. The daemon implements it with
/// real processes, cgroups and sockets; unit tests with a recording fake.
///
/// The engine calls these synchronously, on its own executor, and never while
/// it is half-way through a transition: each call sees a consistent record.
public protocol LifecycleHost: AnyObject {
    /// Starts the app's process (in its own cgroup or session) and returns its pid.
    func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32
    /// Stops every process of the app from running, without notice.
    func freeze(_ app: String)
    /// Lets the app's processes run again.
    func thaw(_ app: String)
    /// Ends every process of the app (the whole tree).
    func kill(_ app: String)
    /// Sends a message to the app's connection. Only called while it is connected.
    func send(_ message: OutboundMessage, to app: String)
    /// Records a decision: the log the daemon keeps, and `vigilctl log`.
    func record(_ decision: Decision)
    /// The app's state changed; event sources that treat foreground and
    /// background differently (accessory sessions) act on it.
    func stateChanged(_ app: String, from old: AppState, to new: AppState)
}

/// A message the engine wants delivered to an app.
public enum OutboundMessage: Sendable, Equatable {
    case lifecycle(LifecycleMessage)
    case event(QueuedEvent, redelivered: Bool)
    case taskExpiring(TaskExpiring)
    case deadline(UInt64?)
}

/// One decision of the engine, with its reason.
public struct Decision: Sendable, Equatable {
    public var app: String
    public var action: Action
    public var reason: String
    public var state: AppState

    public enum Action: String, Sendable {
        case launch, relaunch, adopt, enterForeground, enterBackground, suspend, wake, deliver, queue
        case extend, expire, terminate, forceQuit, exit, crash, refuse, drop
        /// A background refresh was scheduled, stretched, cancelled or came due.
        case refresh
    }

    public init(app: String, action: Action, reason: String, state: AppState) {
        self.app = app
        self.action = action
        self.reason = reason
        self.state = state
    }
}

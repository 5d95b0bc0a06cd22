/// Names a background task, as `UIBackgroundTaskIdentifier` does: returned by
/// `beginBackgroundTask`, handed back to `endBackgroundTask`.
///
/// An identifier is unique for the life of its `Application`. On the first
/// connection it equals the daemon's task id (as `vigilctl apps` lists it);
/// after `Application` reconnects (see `ApplicationEvent.connectionRestored`)
/// the low 32 bits are the daemon's id and the bits above count the
/// connection, because a restarted daemon numbers tasks from 1 again.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int

    public init(rawValue: Int) { self.rawValue = rawValue }

    /// No task: background time could not be granted (or the daemon is unreachable).
    /// Ending it does nothing, so callers need not special-case it.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String {
        if self == .invalid { return "invalid" }
        return generation == 0 ? "#\(daemonTask)" : "#\(daemonTask) (reconnection \(generation))"
    }

    // MARK: Connection generations

    private static let daemonTaskBits = 32
    private static let daemonTaskMask = (1 << daemonTaskBits) - 1

    /// The task `daemonTask` granted on connection number `generation` (0 = the first).
    init(daemonTask: Int, generation: Int) {
        self.init(rawValue: generation << Self.daemonTaskBits | (daemonTask & Self.daemonTaskMask))
    }

    /// The id the daemon knows the task by.
    var daemonTask: Int { rawValue & Self.daemonTaskMask }

    /// Which of the app's successive connections granted the task.
    var generation: Int { rawValue >> Self.daemonTaskBits }
}

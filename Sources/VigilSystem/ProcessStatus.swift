/// How a process ended.
public enum ProcessStatus: Sendable, Hashable {
    /// It called exit() with this status.
    case exited(Int32)
    /// A signal ended it.
    case signaled(Int32)
    /// It ended, but it was not our child (adopted after a daemon restart),
    /// so its exit status went to its real parent.
    case unknown
}

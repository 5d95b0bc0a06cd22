/// Names a background task, as `UIBackgroundTaskIdentifier` does: returned by
/// `beginBackgroundTask`, handed back to `endBackgroundTask`.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int

    public init(rawValue: Int) { self.rawValue = rawValue }

    /// No task: background time could not be granted (or the daemon is unreachable).
    /// Ending it does nothing, so callers need not special-case it.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { self == .invalid ? "invalid" : "#\(rawValue)" }
}

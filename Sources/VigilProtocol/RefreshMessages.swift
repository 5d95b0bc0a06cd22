/// Background refresh (the `fetch` background mode): an app asks to be woken
/// now and then to pull a little new data; vigild decides when, batching the
/// wakes of many apps, and stretches the interval of an app that keeps
/// finding nothing. docs/lifecycle.md, "Background refresh".

/// Request (app role, `fetch` mode): wake me for a refresh every `interval`
/// seconds at the least, the first not before `earliestBegin` seconds from
/// now (default: one interval). Replaces an earlier schedule. Reply:
/// `RefreshScheduled`.
public struct ScheduleRefresh: Message, Equatable {
    public static let type = "refresh.schedule"
    public var interval: Double
    public var earliestBegin: Double?

    public init(interval: Double, earliestBegin: Double? = nil) {
        self.interval = interval
        self.earliestBegin = earliestBegin
    }
}

/// Reply to `ScheduleRefresh`: what vigild will do, in seconds from now and
/// the interval it applies (the app's, raised to the configured minimum).
public struct RefreshScheduled: Message, Equatable {
    public static let type = "reply"
    public var next: Double
    public var interval: Double

    public init(next: Double, interval: Double) {
        self.next = next
        self.interval = interval
    }
}

/// Request (app role): no more refresh wakes. Reply: `Done`.
public struct CancelRefresh: Message, Equatable {
    public static let type = "refresh.cancel"
    public init() {}
}

/// How a refresh went, as the app reports it.
public enum RefreshResult: String, Sendable, Codable, CaseIterable {
    case newData
    case noData
    case failed
}

/// Request (app role): the refresh that woke the app is done, with its
/// result. It ends the processing window (as `finishedProcessing` does) and
/// sets the next refresh. Reply: `Done`, sent before the app may be
/// suspended.
public struct CompleteRefresh: Message, Equatable {
    public static let type = "refresh.complete"
    public var result: RefreshResult

    public init(result: RefreshResult) { self.result = result }
}

public enum RefreshEventKind {
    /// A refresh is due: pull what is new, then send `refresh.complete`.
    /// Attributes: `interval` (seconds, as stretched now) and `stretch` (the
    /// factor applied to the app's interval, 1 to 8).
    public static let refresh = "app.refresh"
}

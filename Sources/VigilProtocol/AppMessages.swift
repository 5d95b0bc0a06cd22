// Messages between an app and the daemon.

// MARK: App → daemon

/// Request: begin a background task. Reply: `BackgroundTaskGranted`.
public struct BeginBackgroundTask: Message, Equatable {
    public static let type = "beginBackgroundTask"
    public var name: String
    public init(name: String) { self.name = name }
}

public struct BackgroundTaskGranted: Message, Equatable {
    public static let type = "reply"
    /// The task identifier; `0` (invalid) when no background time can be granted.
    public var task: Int
    public init(task: Int) { self.task = task }
}

/// Request: end a task begun with `beginBackgroundTask`. Reply: `Done`.
public struct EndBackgroundTask: Message, Equatable {
    public static let type = "endBackgroundTask"
    public var task: Int
    public init(task: Int) { self.task = task }
}

/// Request: the app has processed what woke it; suspend it now if nothing holds it. Reply: `Done`.
public struct FinishedProcessing: Message, Equatable {
    public static let type = "finishedProcessing"
    /// Acknowledges every event up to and including this seq first, as `ack`
    /// does: one frame and one daemon loop turn instead of two at the end of a wake.
    public var ack: UInt64?
    public init(ack: UInt64? = nil) { self.ack = ack }
}

/// Request: how much background time is left. Reply: `BackgroundTimeRemaining`.
public struct QueryBackgroundTime: Message, Equatable {
    public static let type = "backgroundTimeRemaining"
    public init() {}
}

public struct BackgroundTimeRemaining: Message, Equatable {
    public static let type = "reply"
    /// Seconds left; nil means unlimited (the app is in the foreground).
    public var seconds: Double?
    public init(seconds: Double?) { self.seconds = seconds }

    enum CodingKeys: String, CodingKey { case seconds }

    /// `seconds` is always there: `null` when unlimited, as documented.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(seconds, forKey: .seconds)
    }
}

/// Notification (no reply): every event up to and including `seq` has been handled.
public struct Acknowledge: Message, Equatable {
    public static let type = "ack"
    public var seq: UInt64
    public init(seq: UInt64) { self.seq = seq }
}

// MARK: Daemon → app

/// A state transition, delivered only while the app runs (suspension comes without notice).
public struct LifecycleMessage: Message, Equatable {
    public static let type = "lifecycle"
    public var event: LifecycleNotification
    public var state: AppState
    public init(event: LifecycleNotification, state: AppState) {
        self.event = event
        self.state = state
    }
}

/// An event for the app: queued while it is suspended or not running, delivered in
/// `seq` order, kept until acknowledged, redelivered after a crash or relaunch.
/// The body carries the event's binary payload.
public struct EventMessage: Message, Equatable {
    public static let type = "event"
    public var seq: UInt64
    /// What happened, e.g. `test`, `overflow`, `accessory.connected`.
    public var kind: String
    public var attributes: [String: JSONValue]
    /// True when this event was sent before to an earlier process of the app.
    public var redelivered: Bool

    public init(seq: UInt64, kind: String, attributes: [String: JSONValue] = [:], redelivered: Bool = false) {
        self.seq = seq
        self.kind = kind
        self.attributes = attributes
        self.redelivered = redelivered
    }
}

/// The expiration handler of a background task must run now: the background
/// time limit is near and the task is still held.
public struct TaskExpiring: Message, Equatable {
    public static let type = "backgroundTaskExpiring"
    public var task: Int
    public var name: String
    public init(task: Int, name: String) {
        self.task = task
        self.name = name
    }
}

/// The background-time deadline changed (CLOCK_MONOTONIC nanoseconds; nil = unlimited).
public struct DeadlineChanged: Message, Equatable {
    public static let type = "deadline"
    public var deadline: UInt64?
    public init(deadline: UInt64?) { self.deadline = deadline }
}

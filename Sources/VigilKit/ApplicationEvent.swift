import VigilProtocol

/// What the daemon delivers to a running app, in the order it was sent.
public enum ApplicationEvent: Sendable, Equatable {
    /// A state transition. `Application.state` already reflects it when this is seen.
    case lifecycle(LifecycleNotification)
    /// Something happened for the app: acknowledge it once it is fully handled.
    case event(AppEvent)
    /// The connection to vigild dropped while the app kept running (typically
    /// a daemon restart, which adopts running apps) and `Application` has
    /// connected again. `state` and `backgroundTimeRemaining` already reflect the
    /// new connection; background tasks begun before it are gone; every event
    /// not acknowledged yet comes again (`redelivered`) right after this item.
    case connectionRestored
}

/// An event from the daemon's per-app queue (a wake, accessory data, a BLE
/// notification…). It stays queued until acknowledged, so an app that dies
/// while handling it gets it again, with `redelivered` set.
public struct AppEvent: Sendable, Equatable {
    /// Position in the daemon's queue; acknowledgement is cumulative up to it.
    public var seq: UInt64
    /// What happened, e.g. `test` or `overflow`.
    public var kind: String
    public var attributes: [String: JSONValue]
    /// The binary payload, exactly as the source sent it.
    public var payload: [UInt8]
    /// True when an earlier process of the app was sent this event and did not acknowledge it.
    public var redelivered: Bool

    public init(
        seq: UInt64, kind: String, attributes: [String: JSONValue] = [:], payload: [UInt8] = [], redelivered: Bool = false
    ) {
        self.seq = seq
        self.kind = kind
        self.attributes = attributes
        self.payload = payload
        self.redelivered = redelivered
    }

    init(_ message: EventMessage, payload: [UInt8]) {
        self.init(
            seq: message.seq, kind: message.kind, attributes: message.attributes,
            payload: payload, redelivered: message.redelivered
        )
    }
}

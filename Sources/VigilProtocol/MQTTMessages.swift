/// MQTT through vigild's one broker connection (docs/fleet.md): push wakes
/// (`mqtt.message` events for the `remote-notification` mode) and
/// store-and-forward export (`mqtt.publish`).

/// Request (app role): publish the frame's body to `topic` with QoS 1. vigild
/// stores it durably in its outbox before it replies, and sends it, in order,
/// whenever the broker is reachable; it leaves the outbox on the broker's
/// PUBACK. Reply: `MQTTPublishQueued`. Errors: `unavailable` (no broker
/// configured), `invalidArgument` (a bad topic, or a `qos` other than 1),
/// `queueFull` (the outbox is at its bound: nothing was stored).
public struct MQTTPublish: Message, Equatable {
    public static let type = "mqtt.publish"
    public var topic: String
    /// Only 1 is accepted (absent: 1).
    public var qos: Int?

    public init(topic: String, qos: Int? = nil) {
        self.topic = topic
        self.qos = qos
    }
}

/// Reply to `MQTTPublish`: the message's outbox number (increasing, never
/// reused), and what the outbox holds now.
public struct MQTTPublishQueued: Message, Equatable {
    public static let type = "reply"
    public var seq: UInt64
    public var queued: Int
    public var connected: Bool

    public init(seq: UInt64, queued: Int, connected: Bool) {
        self.seq = seq
        self.queued = queued
        self.connected = connected
    }
}

public enum MQTTEventKind {
    /// An MQTT message on one of the app's `mqtt-topics`; the body is its
    /// payload. Attributes: `topic`, `retained` and `duplicate` (the broker
    /// may have sent it before: QoS 1 redelivery, which comes with a new seq).
    /// Redelivered by vigild with the same seq after an app crash or a daemon
    /// restart until the app acknowledges it.
    public static let message = "mqtt.message"
}

/// The broker connection in `status` (absent when vigild has no `[mqtt]`
/// broker, and from older daemons). Counts are since vigild started.
public struct MQTTHealth: Sendable, Codable, Equatable {
    public var broker: String
    public var connected: Bool
    /// The last connection problem, or "" while connected.
    public var detail: String
    /// Messages (and their bytes) waiting in the outbox for the broker.
    public var outbox: Int
    public var outboxBytes: Int
    /// Messages from the broker waiting for room in an app's event queue.
    public var held: Int
    /// Messages from the broker routed to apps; exports the broker acknowledged;
    /// exports refused at the outbox bound; messages that matched no app (dropped).
    public var received: Int
    public var published: Int
    public var refused: Int
    public var unrouted: Int

    public init(
        broker: String, connected: Bool, detail: String, outbox: Int, outboxBytes: Int, held: Int, received: Int,
        published: Int, refused: Int, unrouted: Int
    ) {
        self.broker = broker
        self.connected = connected
        self.detail = detail
        self.outbox = outbox
        self.outboxBytes = outboxBytes
        self.held = held
        self.received = received
        self.published = published
        self.refused = refused
        self.unrouted = unrouted
    }
}

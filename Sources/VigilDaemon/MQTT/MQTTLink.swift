import VigilMQTT

/// The broker connection (docs/fleet.md): push wakes for apps with the
/// `remote-notification` mode, and store-and-forward export (`mqtt.publish`).
///
/// A message from the broker is in Paho's store (fdatasync'd with
/// `durability = "power"`) before Paho sends PUBACK; the receive thread
/// (`vigild-mqtt`) hands it to the loop and waits until the engine has queued
/// it for every app whose `mqtt-topics` match and the event journal has it
/// (or, for an app whose event queue is full, the held spool has it), and
/// only then lets the store delete its copy. From there on it is an ordinary event: it wakes or
/// relaunches the app and stays queued until the app acknowledges it.
final class MQTTLink {
    let connection: MQTTConnection
    let outbox: MQTTSpool
    /// Messages for apps whose event queue was full, in order; moved into the
    /// queue as the app acknowledges (the receive thread cannot hold them:
    /// while a refused message waits, it takes no newer one, for any app).
    let held: MQTTSpool
    var connected = false
    /// Outbox messages published on this connection and not yet acknowledged: token -> seq.
    var inFlight: [Int32: UInt64] = [:]
    /// The highest outbox seq published on this connection.
    var sentUpTo: UInt64 = 0
    var received = 0
    var unrouted = 0
    var published = 0
    var lastProblem: String?
    var lastSubscribeProblem: String?
    /// Messages published at once before waiting for PUBACKs (Paho's own limit is 10).
    static let window = 10

    init(connection: MQTTConnection, outbox: MQTTSpool, held: MQTTSpool) {
        self.connection = connection
        self.outbox = outbox
        self.held = held
    }
}

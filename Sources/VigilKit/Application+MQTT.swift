import VigilProtocol

/// MQTT through vigild's one broker connection (docs/fleet.md). Push wakes
/// need no call: with the `remote-notification` mode and `mqtt-topics` in the
/// manifest, each message arrives as an `mqtt.message` event
/// (`MQTTEventKind.message`; attributes `topic`, `retained`, `duplicate`;
/// the payload as the event's bytes) that wakes or launches the app.
extension Application {
    /// Store-and-forward export: returns once vigild holds the message durably
    /// in its outbox; vigild publishes it with QoS 1, in order, whenever the
    /// broker is reachable. Throws `queueFull` when the outbox is at its bound
    /// (nothing was stored: keep the data and try later) and `unavailable`
    /// when vigild has no broker configured.
    @discardableResult
    public func publish(_ payload: [UInt8], toTopic topic: String) async throws -> MQTTPublishQueued {
        try await session.request(MQTTPublish(topic: topic), body: payload, expecting: MQTTPublishQueued.self)
    }
}

import VigilMQTT
import VigilProtocol

/// Store-and-forward export (docs/fleet.md): `mqtt.publish` appends to the
/// durable outbox before it replies; the outbox is published in order as the
/// connection's events (also handled here) allow.
extension MQTTComponent {
    /// `mqtt.publish`, of the app role.
    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        let app = try requester.app(sending: message)
        let request: MQTTPublish = try message.decode()
        guard let mqtt = link else {
            throw ProtocolError(.unavailable, "MQTT is not configured (vigild.toml has no [mqtt] broker)", id: message.id)
        }
        if let qos = request.qos, qos != 1 {
            throw ProtocolError(.invalidArgument, "qos \(qos): vigild publishes with QoS 1 only", id: message.id)
        }
        if let problem = MQTTTopic.problem(topic: request.topic) {
            throw ProtocolError(.invalidArgument, "topic '\(request.topic)' \(problem)", id: message.id)
        }
        let entry: MQTTSpool.Entry
        do {
            entry = try mqtt.outbox.append(app: app, topic: request.topic, payload: message.body)
        } catch {
            switch error {
            case .full(let text): throw ProtocolError(.queueFull, text, id: message.id)
            case .io(let text):
                services.logger.error("MQTT: \(text)")
                throw ProtocolError(.internalError, text, id: message.id)
            }
        }
        // On the wire before the reply: the reply wakes the app, which would
        // otherwise compete with this publish for the CPU (the message is in
        // the outbox already, so the order costs no durability).
        let queued = MQTTPublishQueued(seq: entry.seq, queued: mqtt.outbox.entries.count, connected: mqtt.connected)
        pumpOutbox(services: services)
        services.send(queued, id: message.id, to: connection)
    }

    /// Publishes outbox messages in order, up to the window.
    func pumpOutbox<S: DaemonServices>(services: isolated S) {
        guard let mqtt = link, mqtt.connected else { return }
        while mqtt.inFlight.count < MQTTLink.window,
              let next = mqtt.outbox.entries.first(where: { $0.seq > mqtt.sentUpTo }) {
            switch mqtt.connection.publish(topic: next.topic, payload: next.payload) {
            case .success(let token):
                mqtt.inFlight[token] = next.seq
                mqtt.sentUpTo = next.seq
            case .failure(let error):
                if mqtt.lastProblem != error.description {
                    services.logger.warning("MQTT: publishing waits: \(error)")
                    mqtt.lastProblem = error.description
                }
                return
            }
        }
    }

    func linkEvent<S: DaemonServices>(_ event: MQTTEvent, services: isolated S) {
        guard let mqtt = link else { return }
        let logger = services.logger
        switch event {
        case .connected(let sessionPresent):
            mqtt.connected = true
            mqtt.inFlight = [:]
            mqtt.sentUpTo = 0
            mqtt.lastProblem = nil
            logger.notice("MQTT: connected", metadata: [
                "broker": "\(mqtt.connection.options.serverURI)", "session": "\(sessionPresent ? "resumed" : "new")",
                "outbox": "\(mqtt.outbox.entries.count)",
            ])
            pumpOutbox(services: services)
        case .connectFailed(let reason):
            if mqtt.lastProblem != reason { logger.warning("MQTT: \(reason); retrying") }
            mqtt.lastProblem = reason
        case .connectionLost(let reason):
            mqtt.connected = false
            // Paho resends what was in flight when it reconnects; the outbox
            // starts again from its oldest message too (QoS 1: duplicates, never gaps).
            mqtt.inFlight = [:]
            mqtt.sentUpTo = 0
            logger.warning("MQTT: connection lost (\(reason)); \(mqtt.outbox.entries.count) messages wait in the outbox")
        case .delivered(let token):
            guard let seq = mqtt.inFlight.removeValue(forKey: token) else { return }
            mqtt.outbox.remove(seq)
            mqtt.published += 1
            pumpOutbox(services: services)
        case .subscribeFailed(let reason):
            if mqtt.lastSubscribeProblem != reason { logger.error("MQTT: \(reason); retrying every 10 s") }
            mqtt.lastSubscribeProblem = reason
        }
    }
}

// MARK: Status and metrics

extension MQTTComponent {
    func addStatus<S: DaemonServices>(to status: inout DaemonStatus, services: isolated S) {
        status.mqtt = health
    }

    var health: MQTTHealth? {
        guard let mqtt = link else { return nil }
        return MQTTHealth(
            broker: mqtt.connection.options.serverURI, connected: mqtt.connected,
            detail: mqtt.connected ? "" : (mqtt.lastProblem ?? "connecting"), outbox: mqtt.outbox.entries.count,
            outboxBytes: mqtt.outbox.bytes, held: mqtt.held.entries.count, received: mqtt.received, published: mqtt.published,
            refused: mqtt.outbox.refused, unrouted: mqtt.unrouted)
    }

    /// Series in docs/observability.md (only with `[mqtt] broker`).
    func addMetrics<S: DaemonServices>(to metrics: DaemonMetrics, services: isolated S) {
        guard let health else { return }
        metrics.gauge("vigil_mqtt_connected", [], health.connected ? 1 : 0)
        metrics.gauge("vigil_mqtt_outbox_messages", [], Double(health.outbox))
        metrics.gauge("vigil_mqtt_outbox_bytes", [], Double(health.outboxBytes))
        metrics.gauge("vigil_mqtt_held_messages", [], Double(health.held))
        metrics.total("vigil_mqtt_received_total", [], UInt64(health.received))
        metrics.total("vigil_mqtt_published_total", [], UInt64(health.published))
        metrics.total("vigil_mqtt_refused_total", [], UInt64(health.refused))
        metrics.total("vigil_mqtt_unrouted_total", [], UInt64(health.unrouted))
    }
}

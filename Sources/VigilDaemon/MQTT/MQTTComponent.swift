import FoundationEssentials
import Glibc
import VigilLifecycle
import VigilMQTT
import VigilProtocol
import VigilSystem

/// The MQTT receive thread (`vigild-mqtt`) waits here until the loop has the
/// message safe (or gives up: the store then keeps its copy and the thread
/// offers the message again).
private final class Handoff: @unchecked Sendable {
    private let condition = ConditionLock()
    private var result: Bool?

    func finish(_ value: Bool) {
        condition.lock()
        result = value
        condition.signal()
        condition.unlock()
    }

    func wait(seconds: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = MonotonicInstant.now().advanced(by: .seconds(seconds))
        while result == nil {
            if !condition.wait(until: deadline) { break }
        }
        return result ?? false
    }
}

/// The broker connection (docs/fleet.md): push wakes for apps with the
/// `remote-notification` mode, the held spool for apps whose queue is full,
/// and (`MQTTComponent+Export`) the outbox of `mqtt.publish`. Runs only with
/// `[mqtt] broker` configured.
final class MQTTComponent: DaemonComponent {
    let name = "mqtt"
    let requestTypes: Set<String> = [MQTTPublish.type]
    /// nil until started, and when the broker cannot be used.
    var link: MQTTLink?

    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        let config = services.config
        let logger = services.logger
        let settings = config.mqtt
        guard let broker = settings.broker else { return }
        var password: String?
        if let file = settings.passwordFile {
            guard let data = FileManager.default.contents(atPath: file), let text = String(data: data, encoding: .utf8) else {
                logger.error("MQTT: cannot read the password file \(file); not connecting to \(broker)")
                return
            }
            password = trimmed(text, \.isNewline)
        }
        let folder = config.stateDirectory + "/mqtt"
        let options = MQTTClientOptions(
            serverURI: broker, clientID: settings.clientID ?? Self.defaultClientID(), username: settings.username,
            password: password, caFile: settings.caFile, certificateFile: settings.certificateFile, keyFile: settings.keyFile,
            keepAlive: settings.keepAlive, storeDirectory: folder + "/received", sync: config.durability == .power)
        let loop = services.loop
        let core = services
        do {
            let outbox = try MQTTSpool(
                name: "outbox", crashPoint: "mqtt.outbox", directory: folder + "/outbox", sync: config.durability == .power,
                messageLimit: settings.outboxLimit, byteLimit: settings.outboxSize)
            let held = try MQTTSpool(
                name: "held messages", crashPoint: "mqtt.held", directory: folder + "/held", sync: config.durability == .power,
                messageLimit: settings.outboxLimit, byteLimit: settings.outboxSize)
            for spool in [outbox, held] {
                for name in spool.unreadable { logger.error("MQTT: \(spool.directory)/\(name) is unreadable; moved aside") }
            }
            let connection = try MQTTConnection(
                options: options,
                onEvent: { event in
                    loop.execute(core.callback(MQTTComponent.self) { mqtt, services in mqtt.linkEvent(event, services: services) })
                },
                onMessage: { message in
                    let handoff = Handoff()
                    loop.execute(core.callback(MQTTComponent.self) { mqtt, services in
                        handoff.finish(mqtt.arrived(message, services: services))
                    })
                    return handoff.wait(seconds: 30)
                })
            link = MQTTLink(connection: connection, outbox: outbox, held: held)
        } catch {
            logger.error("MQTT: \(error); not connecting to \(broker)")
            return
        }
        updateSubscriptions(services: services)
        for app in Set(link?.held.entries.map(\.app) ?? []) { drainHeld(for: app, services: services) }
        link?.connection.start()
        logger.notice("MQTT: connecting", metadata: [
            "broker": "\(broker)", "client-id": "\(options.clientID)", "tls": "\(options.usesTLS)",
            "outbox": "\(link?.outbox.entries.count ?? 0)",
        ])
    }

    func stopIntake<S: DaemonServices>(services: isolated S) {
        link?.connection.stop()
    }

    func manifestsReloaded<S: DaemonServices>(services: isolated S) {
        updateSubscriptions(services: services)
    }

    func didAcknowledge<S: DaemonServices>(by app: String, services: isolated S) {
        drainHeld(for: app, services: services)
    }

    /// "vigil-" and the machine id's first 12 digits, else the host name.
    static func defaultClientID() -> String {
        if let text = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8), case let id = trimmed(text, \.isWhitespace),
           id.count >= 12 {
            return "vigil-" + id.prefix(12)
        }
        return "vigil-" + ProcessInfo.processInfo.hostName
    }

    /// Subscribes to every filter of every app with the mode (after a reload too).
    func updateSubscriptions<S: DaemonServices>(services: isolated S) {
        guard let link, let engine = services.engine else { return }
        let filters = engine.apps.values.filter { $0.manifest.backgroundModes.contains(.remoteNotification) }
            .flatMap(\.manifest.mqttTopics)
        link.connection.subscribe(to: Set(filters))
    }

    // MARK: Push wakes

    /// A message from the MQTT receive thread: true once it is queued for its
    /// apps and journaled (or held); false to have the store keep it.
    func arrived<S: DaemonServices>(_ message: MQTTIncoming, services: isolated S) -> Bool {
        guard let link, !services.stopping else { return false }
        let logger = services.logger
        let engine = services.engine!
        let targets = engine.apps.values.filter { app in
            app.manifest.backgroundModes.contains(.remoteNotification)
                && app.manifest.mqttTopics.contains { MQTTTopic.matches(filter: $0, topic: message.topic) }
        }.map(\.id).sorted()
        guard !targets.isEmpty else {
            link.unrouted += 1
            logger.warning("MQTT: a message on \(message.topic) matches no app's mqtt-topics; dropped (\(link.unrouted) so far)")
            return true
        }
        link.received += 1
        let flags: UInt8 = (message.retained ? 1 : 0) | (message.duplicate ? 2 : 0)
        var direct: [String] = []
        for app in targets {
            // Behind a full queue, or behind messages held before: held, in order.
            if engine.apps[app]?.queue.isFull == true || link.held.entries.contains(where: { $0.app == app }) {
                do {
                    _ = try link.held.append(app: app, topic: message.topic, payload: message.payload, flags: flags)
                    continue
                } catch {
                    switch error {
                    case .full(let text):
                        // Past the bound the engine drops it, counts it and tells the app (an overflow event).
                        logger.error("MQTT: \(text)")
                    case .io(let text):
                        logger.error("MQTT: \(text); Paho keeps the message")
                        return false
                    }
                }
            }
            direct.append(app)
        }
        let event = Self.event(topic: message.topic, payload: message.payload, flags: flags)
        services.withEngine { engine, now in
            for app in direct { _ = try? engine.deliver(event, to: app, now: now) }
        }  // withEngine journals the queued events before it returns
        return true
    }

    static func event(topic: String, payload: [UInt8], flags: UInt8) -> QueuedEvent {
        QueuedEvent(
            kind: MQTTEventKind.message,
            attributes: ["topic": .string(topic), "retained": .bool(flags & 1 != 0), "duplicate": .bool(flags & 2 != 0)],
            payload: payload, wakeMode: .remoteNotification)
    }

    /// Moves the app's held messages into its event queue while it has room
    /// (after an acknowledgement). Each leaves the spool once journaled; a
    /// crash in between delivers it twice, as QoS 1 may.
    func drainHeld<S: DaemonServices>(for app: String, services: isolated S) {
        guard let link, link.held.entries.contains(where: { $0.app == app }) else { return }
        var moved: [UInt64] = []
        services.withEngine { engine, now in
            for entry in link.held.entries where entry.app == app {
                guard let record = engine.apps[app] else {
                    moved.append(entry.seq)  // the app is gone (its manifest removed)
                    link.unrouted += 1
                    continue
                }
                if record.queue.isFull { break }
                _ = try? engine.deliver(Self.event(topic: entry.topic, payload: entry.payload, flags: entry.flags), to: app, now: now)
                moved.append(entry.seq)
            }
        }
        for seq in moved { link.held.remove(seq) }
    }
}

/// `text` without the leading and trailing characters `drop` matches (as
/// Foundation's `trimmingCharacters(in:)`, absent from FoundationEssentials:
/// `isNewline` is `.newlines`, `isWhitespace` is `.whitespacesAndNewlines`).
private func trimmed(_ text: String, _ drop: (Character) -> Bool) -> String {
    guard let first = text.firstIndex(where: { !drop($0) }), let last = text.lastIndex(where: { !drop($0) }) else { return "" }
    return String(text[first...last])
}

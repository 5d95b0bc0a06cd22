import CPaho
import Foundation

/// One connection to an MQTT broker through Eclipse Paho's synchronous
/// MQTTClient API, kept up for as long as it runs (docs/fleet.md).
///
/// Threads: Paho's own receive thread (started by `MQTTClient_connect` once
/// callbacks are set) calls `onMessage` and reports deliveries; a connector
/// thread of ours makes the blocking connect and subscribe calls and retries
/// with backoff, and otherwise sleeps on a condition (no wake-ups). Neither
/// touches the caller's state: events go out through `onEvent`, and
/// `onMessage` must return only once the message is safe elsewhere, because
/// Paho then deletes its own persisted copy (the broker already has its
/// PUBACK: Paho persists the message before sending it).
///
/// `publish` may be called from any thread.
public final class MQTTConnection: @unchecked Sendable {
    public let options: MQTTClientOptions
    private let onEvent: @Sendable (MQTTEvent) -> Void
    private let onMessage: @Sendable (MQTTIncoming) -> Bool
    private var client: MQTTClient?
    private let store: UnsafeMutablePointer<vigil_mqtt_store>
    private let persistence: UnsafeMutablePointer<MQTTClient_persistence>

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var wanted: Set<String> = []
    private var subscribed: Set<String> = []
    private var connected = false
    private var stopping = false
    private var started = false

    /// Creates the client; Paho restores the messages its store kept (they
    /// reach `onMessage` once connected).
    public init(
        options: MQTTClientOptions, onEvent: @escaping @Sendable (MQTTEvent) -> Void,
        onMessage: @escaping @Sendable (MQTTIncoming) -> Bool
    ) throws(MQTTError) {
        self.options = options
        self.onEvent = onEvent
        self.onMessage = onMessage
        do {
            try FileManager.default.createDirectory(atPath: options.storeDirectory, withIntermediateDirectories: true)
        } catch {
            throw MQTTError(code: -2, "cannot create \(options.storeDirectory): \(error)")
        }
        store = .allocate(capacity: 1)
        store.initialize(to: vigil_mqtt_store())
        withUnsafeMutableBytes(of: &store.pointee.directory) { buffer in
            let bytes = Array(options.storeDirectory.utf8.prefix(buffer.count - 1)) + [0]
            buffer.copyBytes(from: bytes)
        }
        store.pointee.sync = options.sync ? 1 : 0
        persistence = .allocate(capacity: 1)
        persistence.initialize(to: vigil_mqtt_persistence(store))
        var handle: MQTTClient?
        let rc = MQTTClient_create(&handle, options.serverURI, options.clientID, MQTTCLIENT_PERSISTENCE_USER, persistence)
        guard rc == MQTTCLIENT_SUCCESS, let handle else {
            throw MQTTError(code: rc, "cannot create an MQTT client for \(options.serverURI): \(Self.describe(rc))")
        }
        client = handle
        let context = Unmanaged.passUnretained(self).toOpaque()
        let callbacks = MQTTClient_setCallbacks(handle, context, mqttConnectionLost, mqttMessageArrived, mqttDeliveryComplete)
        guard callbacks == MQTTCLIENT_SUCCESS else {
            throw MQTTError(code: callbacks, "cannot set the MQTT callbacks: \(Self.describe(callbacks))")
        }
    }

    /// Starts connecting (and reconnecting) on a thread of its own.
    public func start() {
        condition.lock()
        defer { condition.unlock() }
        guard !started else { return }
        started = true
        let thread = Thread { [self] in
            vigil_mqtt_name_thread("vigild-mqtt")
            connector()
        }
        thread.start()
    }

    /// The filters to be subscribed to (QoS 1); applied now when connected,
    /// else on the next connection.
    public func subscribe(to filters: Set<String>) {
        condition.lock()
        wanted = filters
        condition.signal()
        condition.unlock()
    }

    public var isConnected: Bool {
        condition.lock()
        defer { condition.unlock() }
        return connected
    }

    /// Publishes with QoS 1; `onEvent(.delivered(token))` follows the broker's
    /// PUBACK. Fails at once when not connected.
    public func publish(topic: String, payload: [UInt8]) -> Result<Int32, MQTTError> {
        guard let client, isConnected else { return .failure(MQTTError(code: MQTTCLIENT_DISCONNECTED, "not connected to the broker")) }
        var token: MQTTClient_deliveryToken = 0
        let rc = payload.withUnsafeBytes { bytes in
            var message = vigil_mqtt_message()
            message.payload = UnsafeMutableRawPointer(mutating: bytes.baseAddress)
            message.payloadlen = Int32(bytes.count)
            message.qos = 1
            return MQTTClient_publishMessage(client, topic, &message, &token)
        }
        guard rc == MQTTCLIENT_SUCCESS else { return .failure(MQTTError(code: rc, Self.describe(rc))) }
        return .success(token)
    }

    /// Disconnects (the broker keeps the session: clean session off) and ends
    /// the connector; returns at once. From now on messages are refused
    /// (Paho keeps them in its store for the next start). The disconnect runs
    /// on a thread of its own: Paho waits for its receive thread, which may
    /// be waiting in `onMessage` for the caller. The Paho handle itself lives
    /// until the process ends.
    public func stop() {
        condition.lock()
        stopping = true
        connected = false
        condition.signal()
        condition.unlock()
        guard let client = UncheckedClient(handle: client) else { return }
        Thread {
            MQTTClient_disconnect(client.handle, 200)
        }.start()
    }

    static func describe(_ rc: Int32) -> String {
        if let text = MQTTClient_strerror(rc) { return String(cString: text) }
        return "error \(rc)"
    }

    // MARK: The connector thread

    private func connector() {
        var backoff = options.minimumRetry
        condition.lock()
        while !stopping {
            if !connected {
                condition.unlock()
                let result = connect()
                condition.lock()
                if stopping { break }
                switch result {
                case .success(let sessionPresent):
                    connected = true
                    subscribed = []
                    backoff = options.minimumRetry
                    condition.unlock()
                    let problem = applySubscriptions()
                    condition.lock()
                    if let problem { onEventUnlocked(.subscribeFailed(problem)) }
                    if connected { onEventUnlocked(.connected(sessionPresent: sessionPresent)) }
                case .failure(let error):
                    onEventUnlocked(.connectFailed(error.description))
                    _ = condition.wait(until: Date(timeIntervalSinceNow: backoff))
                    backoff = min(backoff * 2, options.maximumRetry)
                }
                continue
            }
            if wanted != subscribed {
                condition.unlock()
                let problem = applySubscriptions()
                condition.lock()
                if let problem {
                    // Refused (an ACL, say): tried again later, or at the next change.
                    onEventUnlocked(.subscribeFailed(problem))
                    _ = condition.wait(until: Date(timeIntervalSinceNow: options.maximumRetry))
                }
                continue
            }
            condition.wait()
        }
        condition.unlock()
    }

    /// Calls `onEvent` with the condition's lock released (callers hold it).
    private func onEventUnlocked(_ event: MQTTEvent) {
        condition.unlock()
        onEvent(event)
        condition.lock()
    }

    private func connect() -> Result<Bool, MQTTError> {
        guard let client else { return .failure(MQTTError(code: -1, "no client")) }
        var strings: [UnsafeMutablePointer<CChar>] = []
        defer { strings.forEach { free($0) } }
        func c(_ text: String?) -> UnsafePointer<CChar>? {
            guard let text, let copy = strdup(text) else { return nil }
            strings.append(copy)
            return UnsafePointer(copy)
        }
        var connectOptions = vigil_mqtt_connect_options()
        connectOptions.keepAliveInterval = Int32(options.keepAlive)
        connectOptions.cleansession = 0  // a persistent session: the broker queues QoS 1 messages while we are away
        connectOptions.reliable = 0  // several QoS 1 messages in flight, not one at a time
        connectOptions.connectTimeout = 10
        connectOptions.retryInterval = 0
        connectOptions.username = c(options.username)
        connectOptions.password = c(options.password)
        var ssl = vigil_mqtt_ssl_options()
        return withUnsafeMutablePointer(to: &ssl) { sslPointer in
            if options.usesTLS {
                sslPointer.pointee.trustStore = c(options.caFile)
                sslPointer.pointee.keyStore = c(options.certificateFile)
                sslPointer.pointee.privateKey = c(options.keyFile)
                sslPointer.pointee.enableServerCertAuth = 1
                sslPointer.pointee.verify = 1  // the certificate must name the broker's host (or IP address)
                connectOptions.ssl = sslPointer
            }
            let rc = MQTTClient_connect(client, &connectOptions)
            guard rc == MQTTCLIENT_SUCCESS else {
                return .failure(MQTTError(code: rc, "cannot connect to \(options.serverURI): \(Self.describe(rc))"))
            }
            return .success(connectOptions.returned.sessionPresent != 0)
        }
    }

    /// Brings the broker's subscriptions to `wanted`; a problem to report, or nil.
    private func applySubscriptions() -> String? {
        guard let client else { return nil }
        condition.lock()
        let target = wanted
        let current = subscribed
        condition.unlock()
        let added = Array(target.subtracting(current)).sorted()
        let removed = Array(current.subtracting(target)).sorted()
        var problem: String?
        if !added.isEmpty {
            var qos = [Int32](repeating: 1, count: added.count)
            let rc = withCStrings(added) { MQTTClient_subscribeMany(client, Int32(added.count), $0, &qos) }
            if rc != MQTTCLIENT_SUCCESS || qos.contains(where: { $0 != 1 }) {
                problem = "subscribing to \(added) failed: \(rc != MQTTCLIENT_SUCCESS ? Self.describe(rc) : "granted QoS \(qos)")"
            }
        }
        if problem == nil, !removed.isEmpty {
            let rc = withCStrings(removed) { MQTTClient_unsubscribeMany(client, Int32(removed.count), $0) }
            if rc != MQTTCLIENT_SUCCESS { problem = "unsubscribing from \(removed) failed: \(Self.describe(rc))" }
        }
        condition.lock()
        if problem == nil { subscribed = target }
        condition.unlock()
        return problem
    }

    private func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> T) -> T {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        return copies.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    // MARK: Paho's callbacks (its receive thread)

    fileprivate func lost(_ cause: String) {
        condition.lock()
        let was = connected
        connected = false
        condition.signal()
        let quitting = stopping
        condition.unlock()
        if was && !quitting { onEvent(.connectionLost(cause)) }
    }

    fileprivate func arrived(_ message: MQTTIncoming) -> Bool {
        condition.lock()
        let quitting = stopping
        condition.unlock()
        return quitting ? false : onMessage(message)
    }

    fileprivate func delivered(_ token: Int32) { onEvent(.delivered(token: token)) }
}

/// Paho's handle, to hand to another thread (Paho locks around its use).
private struct UncheckedClient: @unchecked Sendable {
    let handle: MQTTClient
    init?(handle: MQTTClient?) {
        guard let handle else { return nil }
        self.handle = handle
    }
}

private func connection(_ context: UnsafeMutableRawPointer?) -> MQTTConnection {
    Unmanaged<MQTTConnection>.fromOpaque(context!).takeUnretainedValue()
}

private let mqttConnectionLost: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<CChar>?) -> Void = { context, cause in
    connection(context).lost(cause.map { String(cString: $0) } ?? "the connection was lost")
}

private let mqttDeliveryComplete: @convention(c) (UnsafeMutableRawPointer?, MQTTClient_deliveryToken) -> Void = { context, token in
    connection(context).delivered(token)
}

/// Returns 1 once the message is safe with the caller (Paho then deletes its
/// copy and frees), 0 to have Paho keep it and offer it again shortly.
private let mqttMessageArrived: @convention(c) (
    UnsafeMutableRawPointer?, UnsafeMutablePointer<CChar>?, Int32, UnsafeMutablePointer<MQTTClient_message>?
) -> Int32 = { context, topicName, topicLength, message in
    guard let topicName, let message else { return 1 }
    let topic: String
    if topicLength > 0 {
        topic = String(decoding: UnsafeRawBufferPointer(start: topicName, count: Int(topicLength)), as: UTF8.self)
    } else {
        topic = String(cString: topicName)
    }
    let payload = message.pointee.payload.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: Int(message.pointee.payloadlen))) } ?? []
    let incoming = MQTTIncoming(
        topic: topic, payload: payload, qos: Int(message.pointee.qos), retained: message.pointee.retained != 0,
        duplicate: message.pointee.dup != 0)
    guard connection(context).arrived(incoming) else { return 0 }
    var pointer: UnsafeMutablePointer<MQTTClient_message>? = message
    MQTTClient_freeMessage(&pointer)
    MQTTClient_free(topicName)
    return 1
}

import CPaho
import FoundationEssentials
import Glibc
import VigilSystem

/// One connection to an MQTT broker through Eclipse Paho's synchronous
/// MQTTClient API, kept up for as long as it runs (docs/fleet.md).
///
/// Threads: no Paho callbacks are set, so Paho starts no thread of its own
/// (its `MQTTClient_run` thread polls every 100 ms: ten wake-ups a second).
/// One thread of ours (`vigild-mqtt`) makes every call that reads from the
/// socket: connect and subscribe (with backoff), and `MQTTClient_receive`
/// with a timeout of 0, each time `poll()` says Paho's socket has data, the
/// caller woke it (eventfd), or a keep-alive ping is due. So an idle
/// connection costs about two wake-ups per keep-alive interval (the ping
/// and its PINGRESP). `publish` may be called from any thread (Paho's
/// mutexes allow it alongside the receive thread). A message goes to
/// `onMessage`, which must return only once the message is safe elsewhere:
/// `MQTTClient_receive` has already asked the store to delete its persisted
/// copy, and the store keeps that copy until `onMessage` accepted it
/// (`vigil_mqtt_store_commit`); the broker already has its PUBACK. Events
/// (connected, lost, delivered: the store reports each PUBACK for our
/// publishes) go out through `onEvent`.
public final class MQTTConnection: @unchecked Sendable {
    public let options: MQTTClientOptions
    private let onEvent: @Sendable (MQTTEvent) -> Void
    private let onMessage: @Sendable (MQTTIncoming) -> Bool
    private var client: MQTTClient?
    private let store: UnsafeMutablePointer<vigil_mqtt_store>
    private let persistence: UnsafeMutablePointer<MQTTClient_persistence>
    /// Wakes the receive thread (subscriptions changed, a publish, stop).
    private let wakeFD: Int32
    private let brokerPort: Int32

    // Guarded by `condition` (used as a lock only: nothing waits on it).
    private let condition = ConditionLock()
    private var wanted: Set<String> = []
    private var subscribed: Set<String> = []
    private var connected = false
    private var stopping = false
    private var started = false
    /// Published and not yet acknowledged (the socket is then checked at
    /// least every `busyPoll` ms, so a partly written message goes on).
    private var inFlight: Set<Int32> = []
    /// PUBACKs the receive thread saw before `publish` had its token.
    private var early: Set<Int32> = []
    private var lastPublish: UInt64 = 0

    /// How often the receive thread looks at the socket while exports are in
    /// flight or a message waits to be accepted, in ms.
    static let busyPoll: Int32 = 500

    /// Creates the client; Paho restores the messages its store kept (they
    /// reach `onMessage` once connected).
    public init(
        options: MQTTClientOptions, onEvent: @escaping @Sendable (MQTTEvent) -> Void,
        onMessage: @escaping @Sendable (MQTTIncoming) -> Bool
    ) throws(MQTTError) {
        self.options = options
        self.onEvent = onEvent
        self.onMessage = onMessage
        self.brokerPort = Self.port(of: options.serverURI)
        try Self.loadPaho()
        do {
            try FileManager.default.createDirectory(atPath: options.storeDirectory, withIntermediateDirectories: true)
        } catch {
            throw MQTTError(code: -2, "cannot create \(options.storeDirectory): \(error)")
        }
        wakeFD = vigil_mqtt_eventfd()
        guard wakeFD >= 0 else { throw MQTTError(code: -2, "cannot create an eventfd: errno \(errno)") }
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
        let rc = vigil_paho_create(&handle, options.serverURI, options.clientID, MQTTCLIENT_PERSISTENCE_USER, persistence)
        guard rc == MQTTCLIENT_SUCCESS, let handle else {
            throw MQTTError(code: rc, "cannot create an MQTT client for \(options.serverURI): \(Self.describe(rc))")
        }
        client = handle
        store.pointee.context = Unmanaged.passUnretained(self).toOpaque()
        store.pointee.delivered = mqttDelivered
    }

    /// Starts connecting (and reconnecting) on a thread of its own.
    public func start() {
        condition.lock()
        defer { condition.unlock() }
        guard !started else { return }
        started = true
        // A detached pthread (Foundation's `Thread` is not in FoundationEssentials);
        // it holds the connection until `receiver` returns.
        let context = Unmanaged.passRetained(self).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(&handle, nil, { context in
            let connection = Unmanaged<MQTTConnection>.fromOpaque(context!).takeRetainedValue()
            vigil_mqtt_name_thread("vigild-mqtt")
            connection.receiver()
            return nil
        }, context)
        precondition(result == 0, "pthread_create: \(result)")
        pthread_detach(handle)
    }

    /// The filters to be subscribed to (QoS 1); applied now when connected,
    /// else on the next connection.
    public func subscribe(to filters: Set<String>) {
        condition.lock()
        wanted = filters
        condition.unlock()
        vigil_mqtt_wake(wakeFD)
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
            return vigil_paho_publishMessage(client, topic, &message, &token)
        }
        guard rc == MQTTCLIENT_SUCCESS else { return .failure(MQTTError(code: rc, Self.describe(rc))) }
        condition.lock()
        if early.remove(token) == nil { inFlight.insert(token) }
        lastPublish = Self.now()
        condition.unlock()
        // The receive thread picks up the PUBACK when it arrives; woken now,
        // it also goes on with a write Paho could not finish at once.
        vigil_mqtt_wake(wakeFD)
        return .success(token)
    }

    /// Disconnects (the broker keeps the session: clean session off) and ends
    /// the receive thread; returns at once. From now on messages are refused
    /// (the store keeps them for the next start). The Paho handle itself
    /// lives until the process ends.
    public func stop() {
        condition.lock()
        let running = started && !stopping
        stopping = true
        connected = false
        condition.unlock()
        if running { vigil_mqtt_wake(wakeFD) }
    }

    /// Opens Paho (once per process): it is not linked, so that a daemon
    /// without `[mqtt]` never maps it or OpenSSL (CPaho.h says why).
    static func loadPaho() throws(MQTTError) {
        var message = [CChar](repeating: 0, count: 512)
        guard vigil_paho_load(&message, message.count) != 0 else { return }
        throw MQTTError(code: -2, String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    static func describe(_ rc: Int32) -> String {
        if let text = vigil_paho_strerror(rc) { return String(cString: text) }
        return "error \(rc)"
    }

    /// The broker's port, from `scheme://host:port[/path]` (1883, or 8883
    /// with TLS, when none is given).
    public static func port(of uri: String) -> Int32 {
        let afterScheme = uri.firstRange(of: "://").map { uri[$0.upperBound...] } ?? uri[...]
        let authority = afterScheme.prefix { $0 != "/" }
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]"),
           let port = Int32(authority[authority.index(after: colon)...]) {
            return port
        }
        return uri.hasPrefix("ssl://") || uri.hasPrefix("mqtts://") ? 8883 : 1883
    }

    /// CLOCK_MONOTONIC in ms.
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1000 + UInt64(time.tv_nsec) / 1_000_000
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    // MARK: The receive thread

    private func receiver() {
        guard let client else { return }
        var backoff = options.minimumRetry
        var socket: Int32 = -1
        var subscribeRetry: UInt64 = 0  // when to try a refused subscription again (0: not waiting)
        var waiting: MQTTIncoming?  // received, not yet accepted by onMessage
        var lastCall = Self.now()  // the end of our last call into Paho
        // Connect, subscribe and yield read packets too, and Paho queues the
        // messages among them (and those restored from the store): poll()
        // would not wake for those, so they are taken at once.
        var queued = false
        while !isStopping {
            if !isConnected {
                let before = sockets()
                let result = connect()
                if isStopping { break }
                switch result {
                case .success(let sessionPresent):
                    socket = newSocket(since: before)
                    condition.lock()
                    connected = !stopping
                    subscribed = []
                    inFlight = []
                    early = []
                    condition.unlock()
                    backoff = options.minimumRetry
                    subscribeRetry = 0
                    if let problem = applySubscriptions() {
                        onEvent(.subscribeFailed(problem))
                        subscribeRetry = Self.now() + UInt64(options.maximumRetry * 1000)
                    }
                    lastCall = Self.now()
                    queued = true
                    if isConnected { onEvent(.connected(sessionPresent: sessionPresent)) }
                case .failure(let error):
                    onEvent(.connectFailed(error.description))
                    _ = vigil_mqtt_wait(wakeFD, -1, Int32(backoff * 1000))
                    backoff = min(backoff * 2, options.maximumRetry)
                }
                continue
            }
            condition.lock()
            let changed = wanted != subscribed
            let busy = !inFlight.isEmpty
            let published = lastPublish
            condition.unlock()
            if changed && (subscribeRetry == 0 || Self.now() >= subscribeRetry) {
                if let problem = applySubscriptions() {
                    // Refused (an ACL, say): tried again later, or at the next change.
                    onEvent(.subscribeFailed(problem))
                    subscribeRetry = Self.now() + UInt64(options.maximumRetry * 1000)
                } else {
                    subscribeRetry = 0
                }
                lastCall = Self.now()
                queued = true
            }

            // Sleep until the socket has data, someone wakes us, or Paho's
            // keep-alive check must run: it sends PINGREQ once nothing was
            // sent for `keepAlive` s, and it runs in a receive call at most
            // every keepAlive/10 s (5 s at most: retryLoopIntervalms). Every
            // send of ours happens in a call that ends before `lastCall` or
            // in `publish` (`published`), so sleeping until then + keepAlive
            // is late by at most a few ms.
            var timeout: Int64?  // nil: no limit
            if options.keepAlive > 0 {
                let due = max(lastCall, published) + UInt64(options.keepAlive) * 1000 + 50
                timeout = Int64(due) - Int64(Self.now())
            }
            func cap(_ ms: Int64) { timeout = min(timeout ?? ms, ms) }
            if socket < 0 { cap(100) }  // Paho's socket not found: look every 100 ms, as Paho's own thread would
            if busy || waiting != nil { cap(Int64(Self.busyPoll)) }
            if changed && subscribeRetry != 0 { cap(max(0, Int64(subscribeRetry) - Int64(Self.now()))) }
            if queued { cap(0) }
            queued = false
            // While a message waits, newer ones stay in the socket (or Paho's
            // queue): the socket is not watched then.
            _ = vigil_mqtt_wait(wakeFD, waiting == nil ? socket : -1, timeout.map { Int32(clamping: max($0, 0)) } ?? -1)
            if isStopping { break }

            if let message = waiting {
                // Refused before (the loop did not answer in time): offered
                // again, and meanwhile Paho only answers pings when one is due
                // (MQTTClient_yield: 100 ms of its polling, taking no message).
                guard deliver(message) else {
                    if options.keepAlive > 0, Self.now() >= max(lastCall, published) + UInt64(options.keepAlive) * 1000 {
                        vigil_paho_yield()
                        lastCall = Self.now()
                    }
                    continue
                }
                waiting = nil
            }
            // Everything Paho has for us now: one packet per call. With TLS a
            // packet may wait in OpenSSL's buffer, where poll() does not see
            // it (a record holding several packets; Mosquitto writes one
            // record per packet): a few more calls pick such packets up.
            var spare = options.usesTLS ? 8 : 0
            while true {
                var topicName: UnsafeMutablePointer<CChar>?
                var topicLength: Int32 = 0
                var message: UnsafeMutablePointer<MQTTClient_message>?
                let rc = vigil_paho_receive(client, &topicName, &topicLength, &message, 0)
                lastCall = Self.now()
                if let message, let topicName {
                    let incoming = Self.incoming(topicName, topicLength, message)
                    var pointer: UnsafeMutablePointer<MQTTClient_message>? = message
                    vigil_paho_freeMessage(&pointer)
                    vigil_paho_free(topicName)
                    if !deliver(incoming) {
                        waiting = incoming
                        break
                    }
                    continue
                }
                if rc != MQTTCLIENT_SUCCESS && rc != MQTTCLIENT_TOPICNAME_TRUNCATED || vigil_paho_isConnected(client) == 0 {
                    lost(rc == MQTTCLIENT_SUCCESS ? "the connection was lost" : Self.describe(rc))
                    socket = -1
                    break
                }
                if spare == 0 { break }
                spare -= 1
            }
        }
        // Stopping: the broker keeps the session; what is in the store stays there.
        if vigil_paho_isConnected(client) != 0 { vigil_paho_disconnect(client, 200) }
    }

    /// Hands a message to `onMessage`; once accepted, the store deletes its copy.
    private func deliver(_ message: MQTTIncoming) -> Bool {
        guard !isStopping, onMessage(message) else { return false }
        CrashPoint.reach("mqtt.received.commit", .before)
        vigil_mqtt_store_commit(store)
        CrashPoint.reach("mqtt.received.commit", .after)
        return true
    }

    private func lost(_ cause: String) {
        condition.lock()
        let was = connected
        connected = false
        inFlight = []
        early = []
        let quitting = stopping
        condition.unlock()
        if was && !quitting { onEvent(.connectionLost(cause)) }
    }

    fileprivate func delivered(_ token: Int32) {
        condition.lock()
        if inFlight.remove(token) == nil { early.insert(token) }
        condition.unlock()
        onEvent(.delivered(token: token))
    }

    private static func incoming(
        _ topicName: UnsafeMutablePointer<CChar>, _ topicLength: Int32, _ message: UnsafeMutablePointer<MQTTClient_message>
    ) -> MQTTIncoming {
        let topic: String
        if topicLength > 0 {
            topic = String(decoding: UnsafeRawBufferPointer(start: topicName, count: Int(topicLength)), as: UTF8.self)
        } else {
            topic = String(cString: topicName)
        }
        let payload = message.pointee.payload.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: Int(message.pointee.payloadlen))) } ?? []
        return MQTTIncoming(
            topic: topic, payload: payload, qos: Int(message.pointee.qos), retained: message.pointee.retained != 0,
            duplicate: message.pointee.dup != 0)
    }

    /// This process's TCP sockets to the broker's port (fd, inode).
    private func sockets() -> [(fd: Int32, inode: UInt)] {
        var fds = [Int32](repeating: -1, count: 16)
        var inodes = [UInt](repeating: 0, count: 16)
        let count = Int(vigil_mqtt_tcp_sockets(brokerPort, &fds, &inodes, 16))
        return (0..<count).map { (fds[$0], inodes[$0]) }
    }

    /// Paho's socket after a connect: the one socket to the broker's port that
    /// is new; -1 (look every 100 ms instead) if that is not exactly one.
    private func newSocket(since before: [(fd: Int32, inode: UInt)]) -> Int32 {
        let old = Set(before.map(\.inode))
        let new = sockets().filter { !old.contains($0.inode) }
        return new.count == 1 ? new[0].fd : -1
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
            let rc = vigil_paho_connect(client, &connectOptions)
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
            let rc = withCStrings(added) { vigil_paho_subscribeMany(client, Int32(added.count), $0, &qos) }
            if rc != MQTTCLIENT_SUCCESS || qos.contains(where: { $0 != 1 }) {
                problem = "subscribing to \(added) failed: \(rc != MQTTCLIENT_SUCCESS ? Self.describe(rc) : "granted QoS \(qos)")"
            }
        }
        if problem == nil, !removed.isEmpty {
            let rc = withCStrings(removed) { vigil_paho_unsubscribeMany(client, Int32(removed.count), $0) }
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
}

/// The store's report of a PUBACK, on the thread whose Paho call read it (`vigild-mqtt`,
/// or the loop inside a publish that had to wait), with Paho's mutex held.
private let mqttDelivered: @convention(c) (UnsafeMutableRawPointer?, Int32) -> Void = { context, messageID in
    guard let context else { return }
    Unmanaged<MQTTConnection>.fromOpaque(context).takeUnretainedValue().delivered(messageID)
}

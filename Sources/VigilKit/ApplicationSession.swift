import VigilProtocol
import VigilSystem

/// The app's link to vigild across connections. When the connection drops
/// while the app runs on (vigild stopped gracefully: a new daemon adopts the
/// app), it connects again in the background, with a backoff, until it is
/// greeted, the daemon refuses the app, or the app disconnects. Every
/// connection feeds the same `ApplicationInbox`, hence the same `events`.
final class ApplicationSession: Sendable {
    /// The wait before the first new attempt after a drop; it doubles per failed attempt…
    static let firstRetryDelay = Duration.milliseconds(50)
    /// …up to this.
    static let maxRetryDelay = Duration.seconds(2)
    /// A connection lost sooner than this after its handshake does not reset the
    /// backoff, so a connection the daemon keeps closing is not retried in a tight loop.
    static let stableConnection = Duration.seconds(2)
    static let client = "VigilKit/\(ProtocolVersion.current)"

    let path: String
    let inbox: ApplicationInbox
    /// Where events go and how they are acknowledged.
    let router: EventRouter
    private let link = Locked(Link())

    private struct Link {
        /// The connection requests go to: the current one, or the lost one while
        /// reconnecting (requests then fail at once with `disconnected`).
        var connection: Connection?
        /// The attempt that opened `connection`; messages of any other are ignored.
        var tag = 0
        /// How many connections were greeted before `connection` (0 = it is the first).
        var generation = 0
        /// The attempt waiting for its `welcome`.
        var pending: (connection: Connection, tag: Int)?
        var attempts = 0
        var appID: String?
        var connectedAt = ContinuousClock.now
        var retryDelay = ApplicationSession.firstRetryDelay
        var reconnecting: Task<Void, Never>?
        /// Disconnected by the app, or refused by the daemon: nothing reconnects any more.
        var isEnded = false
    }

    private init(path: String, continuation: AsyncStream<ApplicationEvent>.Continuation) {
        self.path = path
        router = EventRouter(main: continuation)
        inbox = ApplicationInbox(continuation: continuation, router: router)
    }

    /// The first connection. Its failure is thrown: only a connection that once
    /// worked is retried.
    static func connect(path: String, continuation: AsyncStream<ApplicationEvent>.Continuation) async throws -> (ApplicationSession, Welcome) {
        let session = ApplicationSession(path: path, continuation: continuation)
        session.router.setAcknowledger { [weak session] seq, finishing in
            // A deferred finish (`EventRouter.deferFinish`): nobody waits for its reply.
            if finishing { try? session?.connection().post(FinishedProcessing(ack: seq)) } else { try? session?.send(Acknowledge(seq: seq)) }
        }
        let welcome = try await session.attempt(Hello(role: .app, client: client))
        return (session, welcome)
    }

    // MARK: Requests

    /// The current connection and its generation, taken together.
    private var current: (connection: Connection?, generation: Int) {
        link.withLock { ($0.connection, $0.generation) }
    }

    func send(_ message: some Message) throws(ProtocolError) {
        try connection().send(message)
    }

    func request<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type = Reply.self,
        onReply: (@Sendable (IncomingMessage) -> Void)? = nil
    ) async throws -> Reply {
        try await connection().request(message, body: body, expecting: Reply.self, onReply: onReply)
    }

    func requestWithBody<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type = Reply.self
    ) async throws -> (reply: Reply, body: [UInt8]) {
        try await connection().requestWithBody(message, body: body, expecting: Reply.self)
    }

    func beginBackgroundTask(name: String) async throws -> BackgroundTaskIdentifier {
        let (connection, generation) = current
        guard let connection else { throw Self.notConnected }
        let granted = try await connection.request(BeginBackgroundTask(name: name), expecting: BackgroundTaskGranted.self)
        guard granted.task != BackgroundTaskIdentifier.invalid.rawValue else { return .invalid }
        return BackgroundTaskIdentifier(daemonTask: granted.task, generation: generation)
    }

    /// Ends `task` if the current connection granted it; one of an earlier
    /// connection is only forgotten, since the daemon there no longer knows it.
    func endBackgroundTask(_ task: BackgroundTaskIdentifier) async throws {
        inbox.unregister(task)
        let (connection, generation) = current
        guard task.generation == generation, let connection else { return }
        _ = try await connection.request(EndBackgroundTask(task: task.daemonTask), expecting: Done.self)
    }

    private func connection() throws(ProtocolError) -> Connection {
        guard let connection = link.withLock({ $0.connection }) else { throw Self.notConnected }
        return connection
    }

    private static let notConnected = ProtocolError(.disconnected, "not connected to vigild")

    // MARK: Connecting

    /// Stops for good: closes the connection, stops reconnecting, finishes `events`.
    func end() {
        let (connection, pending, reconnecting) = link.withLock { link in
            link.isEnded = true
            return (link.connection, link.pending?.connection, link.reconnecting)
        }
        reconnecting?.cancel()
        connection?.close()
        pending?.close()
        router.end()
        inbox.finish()
    }

    /// Opens a connection and greets the daemon. The connection takes over as
    /// the current one when its `welcome` arrives, on its reader thread, before
    /// any message that follows it can be seen.
    private func attempt(_ hello: Hello) async throws -> Welcome {
        let tag = try link.withLock { link throws(ProtocolError) -> Int in
            guard !link.isEnded else { throw Self.ended }
            link.attempts += 1
            return link.attempts
        }
        let connection = try Connection.open(path: path) { [weak self] event in
            self?.handle(event, from: tag)
        }
        let isEnded = link.withLock { link in
            if !link.isEnded { link.pending = (connection, tag) }
            return link.isEnded
        }
        if isEnded {
            connection.close()
            throw Self.ended
        }
        do {
            let welcome = try await connection.handshake(hello)
            // Unless the app ended it all meanwhile, `handle` took the connection on at its welcome.
            guard !link.withLock({ $0.isEnded }) else {
                connection.close()
                throw Self.ended
            }
            return welcome
        } catch {
            link.withLock { link in
                if link.pending?.tag == tag { link.pending = nil }
            }
            throw error
        }
    }

    private static let ended = ProtocolError(.disconnected, "the app disconnected from vigild")

    /// On the reader thread of the connection opened by attempt `tag`.
    private func handle(_ event: ConnectionEvent, from tag: Int) {
        switch event {
        case let .welcome(welcome):
            if let connection = link.withLock({ $0.connection != nil && $0.pending?.tag == tag ? $0.pending?.connection : nil }) {
                resynchronize(connection)
            }
            let generation = link.withLock { link -> Int? in
                guard !link.isEnded, let pending = link.pending, pending.tag == tag else { return nil }
                if link.connection != nil { link.generation += 1 }
                link.connection = pending.connection
                link.tag = tag
                link.pending = nil
                link.appID = link.appID ?? welcome.app
                link.connectedAt = .now
                return link.generation
            }
            if let generation { inbox.connected(welcome, generation: generation) }
        case let .message(message):
            guard link.withLock({ $0.tag == tag }) else { return }
            inbox.receive(message)
        case let .closed(reason):
            closed(tag, reason)
        }
    }

    /// A reconnection, greeted: before the app's requests can reach the new
    /// connection, it learns what this client still believes: sessions of the
    /// lost connection are closed (a daemon that kept them would hold the
    /// accessory for nobody), and the notification registration is renewed (a
    /// restarted daemon does not know it), and so is the central manager's,
    /// with its restore identifier, and so is the peripheral manager's, which
    /// then publishes again the services and advertisement it has out (BlueZ
    /// dropped them with the old daemon's bus connection; a daemon that kept
    /// them takes the same service again as a replacement). No `id`: their
    /// replies are ignored. The adapter state is asked for afterwards, since
    /// it may have changed meanwhile.
    private func resynchronize(_ connection: Connection) {
        let (staleSessions, register, central, peripheral) = router.reconnected()
        for session in staleSessions { try? connection.send(CloseSession(session: session)) }
        if register { try? connection.send(RegisterForAccessoryNotifications(enabled: true)) }
        if let central { try? connection.send(RegisterCentral(restoreIdentifier: central.restoreIdentifier)) }
        if let peripheral {
            try? connection.send(RegisterPeripheral(restoreIdentifier: peripheral.restoreIdentifier))
            let published = peripheral.published
            for service in published.services {
                try? connection.send(AddService(service: service, adapter: published.serviceAdapters[service.uuid]))
            }
            if let advertisement = published.advertisement {
                try? connection.send(StartAdvertising(advertisement: advertisement, adapter: published.advertisementAdapter))
            }
        }
        guard central != nil || peripheral != nil else { return }
        let router = self.router
        Task {
            _ = try? await connection.request(GetBluetoothState(), expecting: BluetoothStateReply.self) { reply in
                guard let reply = try? reply.decode(BluetoothStateReply.self) else { return }
                router.refreshed(state: reply.state)
            }
        }
    }

    /// The connection of attempt `tag` is gone. If it was the current one and
    /// the app still wants it, reconnect; a refusal of the app itself ends it all.
    private func closed(_ tag: Int, _ reason: ProtocolError) {
        let outcome = link.withLock { link -> Bool? in
            // A stale or not yet greeted connection: its attempt, if any, handles the failure.
            guard !link.isEnded, link.tag == tag else { return nil }
            if Self.isFinal(reason) {
                link.isEnded = true
                return true
            }
            if link.connectedAt.duration(to: .now) >= Self.stableConnection { link.retryDelay = Self.firstRetryDelay }
            return false
        }
        switch outcome {
        case true?:
            router.end()
            inbox.finish()
        case false?:
            // Sessions end before any new connection can be greeted (and `resynchronize` close them).
            router.connectionLost(reason)
            link.withLock { link in
                guard !link.isEnded, link.tag == tag else { return }
                link.reconnecting = Task { [weak self] in await self?.reconnect() }
            }
        case nil:
            break
        }
    }

    /// Tries again after each delay, forever, until greeted, refused or ended.
    private func reconnect() async {
        while true {
            guard let delay = link.withLock({ $0.isEnded ? nil : $0.retryDelay }) else { return }
            try? await Task.sleep(for: delay)
            let hello = link.withLock { link -> Hello? in
                guard !link.isEnded else { return nil }
                link.retryDelay = min(link.retryDelay * 2, Self.maxRetryDelay)
                return Hello(role: .app, app: link.appID, client: Self.client)
            }
            guard let hello, !Task.isCancelled else { return }
            do {
                _ = try await attempt(hello)
                return
            } catch let error as ProtocolError where Self.isFinal(error) {
                return end()
            } catch {
                continue  // no daemon yet, or it went away while greeting
            }
        }
    }

    /// Refusals that another attempt would only get again: the process is no
    /// longer part of this app (or of any), or the daemon speaks no common version.
    private static func isFinal(_ error: ProtocolError) -> Bool {
        error.code == .unauthorized || error.code == .unsupportedVersion
    }
}

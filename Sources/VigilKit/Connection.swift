import VigilProtocol
import VigilSystem

/// One connection to vigild, shared by the app and control roles.
///
/// A dedicated reader thread blocks in `read(2)` and splits frames, so no task
/// of the cooperative pool ever waits on the socket. Replies resume the
/// continuation of their request (matched by `id`); everything else goes to
/// `onEvent` on the reader thread, in wire order, which lets the owner update
/// its state before anyone sees the next message. Writes are serialised by a
/// lock so frames never interleave. (`Locked`, a pthread mutex, rather than
/// `Synchronization.Mutex`, so ThreadSanitizer sees the synchronisation.)
final class Connection: Sendable {
    let path: String
    let socket: UnixSocket
    let onEvent: @Sendable (ConnectionEvent) -> Void
    let exchange = Locked(Exchange())
    /// Whether the descriptor is still open; guards every use of it but `read`.
    let isOpen = Locked(true)

    /// Requests awaiting their answer.
    struct Exchange {
        var greeting: CheckedContinuation<Welcome, any Error>?
        var isGreeted = false
        var nextID = 1
        var pending: [Int: Waiter] = [:]
        /// Set once: why the connection ended (a fatal error from the daemon, or the drop).
        var closeReason: ProtocolError?
    }

    /// A request waiting for its answer.
    struct Waiter {
        var continuation: CheckedContinuation<IncomingMessage, any Error>
        /// Runs on the reader thread with a successful reply, before any later
        /// frame is routed: an owner that must know of, say, a new session before
        /// that session's first event can be read registers it here.
        var onReply: (@Sendable (IncomingMessage) -> Void)?
    }

    private init(path: String, socket: UnixSocket, onEvent: @escaping @Sendable (ConnectionEvent) -> Void) {
        self.path = path
        self.socket = socket
        self.onEvent = onEvent
    }

    /// Connects to `path`, says `hello` and waits for `welcome`. A refusal throws
    /// the daemon's `ProtocolError` (e.g. `unauthorized`, `unsupportedVersion`).
    static func establish(
        path: String, hello: Hello, onEvent: @escaping @Sendable (ConnectionEvent) -> Void = { _ in }
    ) async throws -> (Connection, Welcome) {
        let connection = try open(path: path, onEvent: onEvent)
        return (connection, try await connection.handshake(hello))
    }

    /// Connects to `path` and starts reading, without a handshake: the caller
    /// must `handshake` before sending anything else. For an owner that needs
    /// the connection object before its `welcome` arrives.
    static func open(
        path: String, onEvent: @escaping @Sendable (ConnectionEvent) -> Void
    ) throws(ConnectionError) -> Connection {
        let connection = Connection(path: path, socket: try UnixSocket.connect(to: path), onEvent: onEvent)
        connection.startReading()
        return connection
    }

    /// Says `hello` and waits for `welcome`; on refusal or loss the connection is closed and the error thrown.
    func handshake(_ hello: Hello) async throws -> Welcome {
        do {
            return try await greet(hello)
        } catch {
            close()
            throw error
        }
    }

    /// Ends the connection; pending requests fail with `disconnected`.
    func close() {
        exchange.withLock { $0.closeReason = $0.closeReason ?? ProtocolError(.disconnected, "the connection to vigild at \(path) was closed") }
        isOpen.withLock { if $0 { socket.shutdown() } }
    }

    /// Sends a message that gets no reply (such as `ack`).
    func send<M: Message>(_ message: M, body: [UInt8] = []) throws(ProtocolError) {
        try write(MessageCodec.frame(message, body: body))
    }

    /// Sends a request whose reply nobody waits for: it gets an `id` like any
    /// request, and its answer, finding no waiter, is dropped.
    func post<M: Message>(_ message: M, body: [UInt8] = []) throws(ProtocolError) {
        let id = exchange.withLock { exchange in
            defer { exchange.nextID += 1 }
            return exchange.nextID
        }
        try write(MessageCodec.frame(message, id: id, body: body))
    }

    /// Sends a request and waits for its reply, decoded as `Reply`. An `error`
    /// answer is thrown as `ProtocolError`; so is the loss of the connection.
    /// `onReply` sees a successful reply on the reader thread first (see `Waiter`).
    func request<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type = Reply.self,
        onReply: (@Sendable (IncomingMessage) -> Void)? = nil
    ) async throws -> Reply {
        let answer = try await roundTrip(message, body: body, onReply: onReply)
        if answer.type == ProtocolError.type { throw try answer.decode(ProtocolError.self) }
        return try answer.decode(Reply.self)
    }

    /// `request`, with the reply's body too (a characteristic's value).
    func requestWithBody<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type = Reply.self
    ) async throws -> (reply: Reply, body: [UInt8]) {
        let answer = try await roundTrip(message, body: body, onReply: nil)
        if answer.type == ProtocolError.type { throw try answer.decode(ProtocolError.self) }
        return (try answer.decode(Reply.self), answer.body)
    }

    private func greet(_ hello: Hello) async throws -> Welcome {
        try await withCheckedThrowingContinuation { continuation in
            let refusal = exchange.withLock { exchange -> ProtocolError? in
                if let reason = exchange.closeReason { return reason }
                exchange.greeting = continuation
                return nil
            }
            if let refusal { return continuation.resume(throwing: refusal) }
            do {
                try write(MessageCodec.frame(hello))
            } catch {
                exchange.withLock { $0.greeting.take() }?.resume(throwing: error)
            }
        }
    }

    private func roundTrip(
        _ message: some Message, body: [UInt8], onReply: (@Sendable (IncomingMessage) -> Void)?
    ) async throws -> IncomingMessage {
        let id = exchange.withLock { exchange in
            defer { exchange.nextID += 1 }
            return exchange.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let refusal = exchange.withLock { exchange -> (any Error)? in
                    if let reason = exchange.closeReason { return reason }
                    if Task.isCancelled { return CancellationError() }
                    exchange.pending[id] = Waiter(continuation: continuation, onReply: onReply)
                    return nil
                }
                if let refusal { return continuation.resume(throwing: refusal) }
                do {
                    try write(MessageCodec.frame(message, id: id, body: body))
                } catch {
                    exchange.withLock { $0.pending.removeValue(forKey: id) }?.continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            // The late reply, if any, finds no waiter and is dropped.
            exchange.withLock { $0.pending.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }

    private func write(_ frame: Frame) throws(ProtocolError) {
        let bytes = frame.encoded()
        try isOpen.withLock { isOpen throws(ProtocolError) in
            guard isOpen else { throw ProtocolError(.disconnected, "the connection to vigild at \(path) is closed") }
            try socket.write(bytes)
        }
    }
}

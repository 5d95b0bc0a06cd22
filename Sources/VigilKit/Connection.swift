import Foundation
import Synchronization
import VigilProtocol

/// What a connection hands to its owner, in the order the daemon sent it.
enum ConnectionEvent: Sendable {
    /// The handshake succeeded; delivered before any later message.
    case welcome(Welcome)
    /// A frame that answers no pending request: events, lifecycle, notices.
    case message(IncomingMessage)
    /// The connection is gone, for this reason; nothing follows.
    case closed(ProtocolError)
}

/// One connection to vigild, shared by the app and control roles.
///
/// A dedicated reader thread blocks in `read(2)` and splits frames, so no task
/// of the cooperative pool ever waits on the socket. Replies resume the
/// continuation of their request (matched by `id`); everything else goes to
/// `onEvent` on the reader thread, in wire order, which lets the owner update
/// its state before anyone sees the next message. Writes are serialised by a
/// mutex so frames never interleave.
final class Connection: Sendable {
    let path: String
    private let socket: UnixSocket
    private let onEvent: @Sendable (ConnectionEvent) -> Void
    private let exchange = Mutex(Exchange())
    /// Whether the descriptor is still open; guards every use of it but `read`.
    private let isOpen = Mutex(true)

    /// Requests awaiting their answer.
    private struct Exchange {
        var greeting: CheckedContinuation<Welcome, any Error>?
        var isGreeted = false
        var nextID = 1
        var pending: [Int: CheckedContinuation<IncomingMessage, any Error>] = [:]
        /// Set once: why the connection ended (a fatal error from the daemon, or the drop).
        var closeReason: ProtocolError?
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
        let connection = Connection(path: path, socket: try UnixSocket.connect(to: path), onEvent: onEvent)
        connection.startReading()
        do {
            let welcome = try await connection.greet(hello)
            return (connection, welcome)
        } catch {
            connection.close()
            throw error
        }
    }

    /// Ends the connection; pending requests fail with `disconnected`.
    func close() {
        isOpen.withLock { if $0 { socket.shutdown() } }
    }

    /// Sends a message that gets no reply (such as `ack`).
    func send<M: Message>(_ message: M, body: [UInt8] = []) throws(ProtocolError) {
        try write(MessageCodec.frame(message, body: body))
    }

    /// Sends a request and waits for its reply, decoded as `Reply`. An `error`
    /// answer is thrown as `ProtocolError`; so is the loss of the connection.
    func request<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type = Reply.self
    ) async throws -> Reply {
        let answer = try await roundTrip(message, body: body)
        if answer.type == ProtocolError.type { throw try answer.decode(ProtocolError.self) }
        return try answer.decode(Reply.self)
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

    private func roundTrip(_ message: some Message, body: [UInt8]) async throws -> IncomingMessage {
        let id = exchange.withLock { exchange in
            defer { exchange.nextID += 1 }
            return exchange.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let refusal = exchange.withLock { exchange -> (any Error)? in
                    if let reason = exchange.closeReason { return reason }
                    if Task.isCancelled { return CancellationError() }
                    exchange.pending[id] = continuation
                    return nil
                }
                if let refusal { return continuation.resume(throwing: refusal) }
                do {
                    try write(MessageCodec.frame(message, id: id, body: body))
                } catch {
                    exchange.withLock { $0.pending.removeValue(forKey: id) }?.resume(throwing: error)
                }
            }
        } onCancel: {
            // The late reply, if any, finds no waiter and is dropped.
            exchange.withLock { $0.pending.removeValue(forKey: id) }?.resume(throwing: CancellationError())
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

// MARK: - Reading

extension Connection {
    private func startReading() {
        let thread = Thread { [self] in readUntilClosed() }
        thread.name = "vigil-connection"
        thread.start()
    }

    private func readUntilClosed() {
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var reason = ProtocolError(.disconnected, "vigild closed the connection")
        reading: while true {
            let count = socket.read(into: &buffer)
            if count < 0 { reason = ProtocolError(.disconnected, "cannot read from vigild: \(String(cString: strerror(errno)))") }
            if count <= 0 { break }
            decoder.append(buffer[0..<count])
            do {
                while let frame = try decoder.next() { try route(frame) }
            } catch let error as FrameError {
                reason = ProtocolError(error == .emptyHeader ? .malformedFrame : .frameTooLarge, "from vigild: \(error)")
                break reading
            } catch {
                reason = error as? ProtocolError ?? ProtocolError(.malformedFrame, "from vigild: \(error)")
                break reading
            }
        }
        finish(reason)
    }

    /// Hands `frame` to its waiter or to `onEvent`.
    private func route(_ frame: Frame) throws(ProtocolError) {
        let message = try IncomingMessage(frame: frame)
        let greeting = exchange.withLock { exchange -> CheckedContinuation<Welcome, any Error>? in
            // The first frame answers hello; nothing else comes before it.
            guard !exchange.isGreeted else { return nil }
            exchange.isGreeted = true
            return exchange.greeting.take()
        }
        if let greeting {
            if message.type == Welcome.type {
                let welcome = try message.decode(Welcome.self)
                onEvent(.welcome(welcome))
                greeting.resume(returning: welcome)
            } else {
                greeting.resume(throwing: (try? message.decode(ProtocolError.self))
                    ?? ProtocolError(.handshakeRequired, "vigild answered hello with '\(message.type)'"))
            }
            return
        }
        if let id = message.id, message.type == "reply" || message.type == ProtocolError.type,
           let waiter = exchange.withLock({ $0.pending.removeValue(forKey: id) }) {
            return waiter.resume(returning: message)
        }
        if message.type == ProtocolError.type, let error = try? message.decode(ProtocolError.self), error.closesConnection {
            // The daemon closes next: pending requests fail with its reason, not a bare "disconnected".
            exchange.withLock { $0.closeReason = $0.closeReason ?? error }
        }
        onEvent(.message(message))
    }

    private func finish(_ reason: ProtocolError) {
        let (waiters, greeting, finalReason) = exchange.withLock { exchange in
            let finalReason = exchange.closeReason ?? reason
            exchange.closeReason = finalReason
            defer { exchange.pending.removeAll() }
            return (Array(exchange.pending.values), exchange.greeting.take(), finalReason)
        }
        isOpen.withLock { isOpen in
            if isOpen { socket.close() }
            isOpen = false
        }
        greeting?.resume(throwing: finalReason)
        for waiter in waiters { waiter.resume(throwing: finalReason) }
        onEvent(.closed(finalReason))
    }
}

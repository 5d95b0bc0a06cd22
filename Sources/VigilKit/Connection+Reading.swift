import FoundationEssentials
import CVigilShim
import Glibc
import VigilProtocol

/// The reader side: one thread per connection blocks in `read(2)`, splits
/// frames and routes each to the request waiting for it or to `onEvent`.
extension Connection {
    /// Starts the thread that reads until the connection ends.
    func startReading() {
        // A detached pthread (Foundation's `Thread` is not in FoundationEssentials);
        // it holds the connection until the reading ends.
        let context = Unmanaged.passRetained(self).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(&handle, nil, { context in
            let connection = Unmanaged<Connection>.fromOpaque(context!).takeRetainedValue()
            vigil_set_thread_name("vigil-connection")
            connection.readUntilClosed()
            return nil
        }, context)
        precondition(result == 0, "pthread_create: \(result)")
        pthread_detach(handle)
    }

    private func readUntilClosed() {
        var decoder = FrameDecoder(limits: .fromDaemon)
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
        if let greeting { return answer(greeting, with: message) }
        if let id = message.id, message.type == "reply" || message.type == ProtocolError.type,
           let waiter = exchange.withLock({ $0.pending.removeValue(forKey: id) }) {
            if message.type == "reply" { waiter.onReply?(message) }
            return waiter.continuation.resume(returning: message)
        }
        if message.type == ProtocolError.type, let error = try? message.decode(ProtocolError.self), error.closesConnection {
            // The daemon closes next: pending requests fail with its reason, not a bare "disconnected".
            exchange.withLock { $0.closeReason = $0.closeReason ?? error }
        }
        onEvent(.message(message))
    }

    private func answer(_ greeting: CheckedContinuation<Welcome, any Error>, with message: IncomingMessage) {
        guard message.type == Welcome.type else {
            let refusal = (try? message.decode(ProtocolError.self))
                ?? ProtocolError(.handshakeRequired, "vigild answered hello with '\(message.type)'")
            return greeting.resume(throwing: refusal)
        }
        do {
            let welcome = try message.decode(Welcome.self)
            onEvent(.welcome(welcome))
            greeting.resume(returning: welcome)
        } catch {
            greeting.resume(throwing: error)
        }
    }

    private func finish(_ reason: ProtocolError) {
        let (waiters, greeting, finalReason) = exchange.withLock { exchange in
            let finalReason = exchange.closeReason ?? reason
            exchange.closeReason = finalReason
            defer { exchange.pending.removeAll() }
            return (exchange.pending.values.map(\.continuation), exchange.greeting.take(), finalReason)
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

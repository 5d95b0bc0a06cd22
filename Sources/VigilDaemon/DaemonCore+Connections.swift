import Glibc
import VigilAccessories
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// Client sockets: accepting, reading frames, writing with back-pressure, and
/// closing one connection without disturbing the others.
extension DaemonCore {
    func acceptClients() {
        guard let listener else { return }
        while true {
            let stream: UnixStream
            do {
                guard let accepted = try listener.accept() else { return }
                stream = accepted
            } catch {
                logger.error("accept failed: \(error)")
                return
            }
            guard let credentials = try? stream.peerCredentials() else {
                stream.close()
                continue
            }
            let connection = ClientConnection(id: nextConnectionID, stream: stream, credentials: credentials, limits: limits)
            nextConnectionID += 1
            connections[connection.id] = connection
            let connectionID = connection.id
            do {
                connection.watch = try loop.watch(stream.fd, for: .readable) { [unowned self] events in
                    self.assumeIsolated { $0.connectionReady(connectionID, events) }
                }
            } catch {
                logger.error("cannot watch a client socket: \(error)")
                close(connection)
            }
        }
    }

    func connectionReady(_ id: Int, _ events: IOEvents) {
        guard let connection = connections[id] else { return }
        if events.contains(.writable) {
            guard connection.flushOutput() else { return close(connection) }
            if connection.isClosing && !connection.hasPendingOutput { try? connection.stream.shutdown(.write) }
            updateWritableInterest(connection)
        }
        if events.contains(.readable) || events.contains(.hangup) || events.contains(.error) {
            readFrames(from: connection)
        }
    }

    private func readFrames(from connection: ClientConnection) {
        let buffer = ClientConnection.readBuffer.bytes
        let count: Int?
        do {
            count = try connection.stream.read(into: buffer)
        } catch {
            return close(connection)
        }
        guard let count else { return }
        guard count > 0 else { return close(connection) }  // EOF
        if connection.isClosing { return }  // draining after a fatal error
        connection.decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        while connections[connection.id] != nil, !connection.isClosing {
            let frame: Frame?
            do {
                frame = try connection.decoder.next()
            } catch let error {
                let code: ProtocolError.Code = switch error {
                case .emptyHeader: .malformedFrame
                case .headerTooLarge, .bodyTooLarge: .frameTooLarge
                }
                return fail(connection, ProtocolError(code, error.description))
            }
            guard let frame else { return }
            handle(frame, from: connection)
        }
    }

    /// Sends a fatal error, then closes only this connection. Reading goes on
    /// (discarding) until the peer closes, so the error is not lost to a reset.
    func fail(_ connection: ClientConnection, _ error: ProtocolError) {
        logger.warning("closing client \(connection.id) (pid \(connection.credentials.pid)): \(error)")
        send(error, id: error.id, to: connection)
        connection.phase = .closing
        if !connection.hasPendingOutput { try? connection.stream.shutdown(.write) }
        let connectionID = connection.id
        connection.closeTimer = loop.schedule(after: .seconds(2)) { [unowned self] in
            self.assumeIsolated { core in
                if let connection = core.connections[connectionID] { core.close(connection) }
            }
        }
    }

    func close(_ connection: ClientConnection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        if let watch = connection.watch { loop.removeWatch(watch) }
        if let timer = connection.closeTimer { loop.cancelTimer(timer) }
        connection.stream.close()
        componentsConnectionClosed(connection)
        if let app = connection.appID, appConnections[app] == connection.id {
            appConnections[app] = nil
            withEngine { engine, _ in engine.disconnected(app) }
        }
    }

    func send(frame: [UInt8], to connection: ClientConnection) {
        connection.enqueue(frame)
        flush(connection)
    }

    /// Writes what the connection holds, as much as the socket takes (the rest
    /// when it is writable again); closes a connection that is gone or reads
    /// nothing.
    private func flush(_ connection: ClientConnection) {
        guard connection.flushOutput() else { return close(connection) }
        if connection.pendingOutputCount > ClientConnection.maxPendingOutput {
            logger.warning("client \(connection.id) reads nothing; closing it (its events stay queued)")
            return close(connection)
        }
        updateWritableInterest(connection)
    }

    private func updateWritableInterest(_ connection: ClientConnection) {
        let wanted = connection.hasPendingOutput
        guard wanted != connection.wantsWritable, let watch = connection.watch else { return }
        connection.wantsWritable = wanted
        try? loop.updateWatch(watch, for: wanted ? [.readable, .writable] : .readable)
    }

    /// Delivers an engine message to the app's current connection.
    func sendToApp(_ message: OutboundMessage, _ app: String) {
        guard let id = appConnections[app], let connection = connections[id] else { return }
        switch message {
        case let .lifecycle(lifecycle):
            hold(lifecycle, to: connection)
        case let .event(event, redelivered):
            commitJournal(compactIfDue: false)  // journaled before the app can see it
            componentsWillSend(event, to: app)  // e.g. a session log readable by the app before it learns the path
            hold(
                EventMessage(seq: event.seq, kind: event.kind, attributes: event.attributes, redelivered: redelivered),
                body: event.payload, to: connection)
        case let .taskExpiring(expiring):
            hold(expiring, to: connection)
        case let .deadline(deadline):
            hold(DeadlineChanged(deadline: deadline), to: connection)
        }
    }

    /// Within an engine call (`withEngine`), a frame to an app waits in its
    /// connection until the call returns, so that what one call sends to one
    /// app goes out in one write: a wake's `deadline` and `event` are one
    /// sendto(2) and one wake-up of the app, not two. Outside one it is sent
    /// at once. The order of frames on a connection is the same either way.
    private func hold<M: Message>(_ message: M, body: [UInt8] = [], to connection: ClientConnection) {
        guard engineCallDepth > 0 else { return send(message, body: body, to: connection) }
        connection.enqueue(MessageCodec.encode(message, body: body))
        if !heldAppOutput.contains(where: { $0 === connection }) { heldAppOutput.append(connection) }
    }

    /// Sends what engine calls held back (`hold`), once the outermost returns.
    func flushHeldAppOutput() {
        let held = heldAppOutput
        heldAppOutput.removeAll(keepingCapacity: true)
        for connection in held where connections[connection.id] === connection {
            flush(connection)
        }
    }
}

import Glibc
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// What the client connections need of the core beyond `DaemonServices`:
/// each frame read, and word of a connection that closed.
protocol ConnectionHandler: DaemonServices {
    /// The connections themselves (for the loop's callbacks).
    var clients: ClientConnections { get }
    /// A whole frame from `connection`, in order.
    func handle(_ frame: Frame, from connection: ClientConnection)
    /// `connection` closed; `app` is set when it was that app's current one.
    func connectionClosed(_ connection: ClientConnection, app: String?)
}

/// The daemon's socket and its clients: accepting, reading frames, writing
/// with back-pressure, and closing one connection without disturbing the
/// others. Which connection each app talks on is kept here too.
final class ClientConnections {
    private var listener: UnixListener?
    private var listenerWatch: WatchID?
    /// The listening socket systemd passed (socket activation), used instead of binding one.
    private var passedListener: UnixListener?
    private var connections: [Int: ClientConnection] = [:]
    private var nextID = 1
    /// The connection each app is currently talking on.
    private var appConnections: [String: Int] = [:]
    /// Connections holding frames of an engine call (`hold`), to flush when it returns.
    private var held: [ClientConnection] = []
    private let limits: FrameLimits

    init(passedListener: UnixListener?, limits: FrameLimits) {
        self.passedListener = passedListener
        self.limits = limits
    }

    var count: Int { connections.count }

    func connection(_ id: Int) -> ClientConnection? { connections[id] }

    func connection(ofApp app: String) -> ClientConnection? {
        appConnections[app].flatMap { connections[$0] }
    }

    /// Binds the socket (or takes the one systemd passed) and accepts from
    /// the loop. Nothing is accepted before the caller's loop turn ends.
    func listen<S: ConnectionHandler>(path: String, services: isolated S) throws {
        let listener = try passedListener ?? UnixListener.bind(path: path, permissions: 0o666)
        passedListener = nil
        self.listener = listener
        listenerWatch = try services.loop.watch(listener.fd, for: .readable) { [unowned services] _ in
            services.assumeIsolated { services in services.clients.accept(services: services) }
        }
    }

    /// The stop's first step: no new clients.
    func stopListening<S: ConnectionHandler>(services: isolated S) {
        if let listenerWatch { services.loop.removeWatch(listenerWatch) }
        listenerWatch = nil
        listener?.close()
        listener = nil
    }

    func closeAll<S: ConnectionHandler>(services: isolated S) {
        for connection in connections.values { close(connection, services: services) }
    }

    /// Makes `connection` the one `app` talks on; closes the one it used before.
    func attach<S: ConnectionHandler>(_ connection: ClientConnection, to app: String, services: isolated S) {
        if let previous = appConnections[app], previous != connection.id, let old = connections[previous] {
            services.logger.info("app \(app) connected again; closing its previous connection")
            close(old, services: services)
        }
        connection.phase = .app(app)
        appConnections[app] = connection.id
    }

    private func accept<S: ConnectionHandler>(services: isolated S) {
        guard let listener else { return }
        while true {
            let stream: UnixStream
            do {
                guard let accepted = try listener.accept() else { return }
                stream = accepted
            } catch {
                services.logger.error("accept failed: \(error)")
                return
            }
            guard let credentials = try? stream.peerCredentials() else {
                stream.close()
                continue
            }
            let connection = ClientConnection(id: nextID, stream: stream, credentials: credentials, limits: limits)
            nextID += 1
            connections[connection.id] = connection
            let connectionID = connection.id
            do {
                connection.watch = try services.loop.watch(stream.fd, for: .readable) { [unowned services] events in
                    services.assumeIsolated { services in services.clients.ready(connectionID, events, services: services) }
                }
            } catch {
                services.logger.error("cannot watch a client socket: \(error)")
                close(connection, services: services)
            }
        }
    }

    private func ready<S: ConnectionHandler>(_ id: Int, _ events: IOEvents, services: isolated S) {
        guard let connection = connections[id] else { return }
        if events.contains(.writable) {
            guard connection.flushOutput() else { return close(connection, services: services) }
            if connection.isClosing && !connection.hasPendingOutput { try? connection.stream.shutdown(.write) }
            updateWritableInterest(connection, services: services)
        }
        if events.contains(.readable) || events.contains(.hangup) || events.contains(.error) {
            readFrames(from: connection, services: services)
        }
    }

    private func readFrames<S: ConnectionHandler>(from connection: ClientConnection, services: isolated S) {
        let buffer = ClientConnection.readBuffer.bytes
        let count: Int?
        do {
            count = try connection.stream.read(into: buffer)
        } catch {
            return close(connection, services: services)
        }
        guard let count else { return }
        guard count > 0 else { return close(connection, services: services) }  // EOF
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
                return fail(connection, ProtocolError(code, error.description), services: services)
            }
            guard let frame else { return }
            services.handle(frame, from: connection)
        }
    }

    /// Sends a fatal error, then closes only this connection. Reading goes on
    /// (discarding) until the peer closes, so the error is not lost to a reset.
    func fail<S: ConnectionHandler>(_ connection: ClientConnection, _ error: ProtocolError, services: isolated S) {
        services.logger.warning("closing client \(connection.id) (pid \(connection.credentials.pid)): \(error)")
        send(frame: MessageCodec.encode(error, id: error.id), to: connection, services: services)
        connection.phase = .closing
        if !connection.hasPendingOutput { try? connection.stream.shutdown(.write) }
        let connectionID = connection.id
        connection.closeTimer = services.loop.schedule(after: .seconds(2)) { [unowned services] in
            services.assumeIsolated { services in
                if let connection = services.clients.connection(connectionID) { services.clients.close(connection, services: services) }
            }
        }
    }

    func close<S: ConnectionHandler>(_ connection: ClientConnection, services: isolated S) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        if let watch = connection.watch { services.loop.removeWatch(watch) }
        if let timer = connection.closeTimer { services.loop.cancelTimer(timer) }
        connection.stream.close()
        var app: String?
        if let id = connection.appID, appConnections[id] == connection.id {
            appConnections[id] = nil
            app = id
        }
        services.connectionClosed(connection, app: app)
    }

    func send<S: ConnectionHandler>(frame: [UInt8], to connection: ClientConnection, services: isolated S) {
        connection.enqueue(frame)
        flush(connection, services: services)
    }

    /// Within an engine call, a frame to an app waits in its connection until
    /// the call returns (`flushHeld`), so that what one call sends to one app
    /// goes out in one write: a wake's `deadline` and `event` are one
    /// sendto(2) and one wake-up of the app, not two. The order of frames on
    /// a connection is the same either way.
    func hold(frame: [UInt8], to connection: ClientConnection) {
        connection.enqueue(frame)
        if !held.contains(where: { $0 === connection }) { held.append(connection) }
    }

    /// Sends what engine calls held back (`hold`), once the outermost returns.
    func flushHeld<S: ConnectionHandler>(services: isolated S) {
        guard !held.isEmpty else { return }
        let list = held
        held.removeAll(keepingCapacity: true)
        for connection in list where connections[connection.id] === connection {
            flush(connection, services: services)
        }
    }

    /// Writes what the connection holds, as much as the socket takes (the rest
    /// when it is writable again); closes a connection that is gone or reads
    /// nothing.
    private func flush<S: ConnectionHandler>(_ connection: ClientConnection, services: isolated S) {
        guard connection.flushOutput() else { return close(connection, services: services) }
        if connection.pendingOutputCount > ClientConnection.maxPendingOutput {
            services.logger.warning("client \(connection.id) reads nothing; closing it (its events stay queued)")
            return close(connection, services: services)
        }
        updateWritableInterest(connection, services: services)
    }

    private func updateWritableInterest<S: ConnectionHandler>(_ connection: ClientConnection, services: isolated S) {
        let wanted = connection.hasPendingOutput
        guard wanted != connection.wantsWritable, let watch = connection.watch else { return }
        connection.wantsWritable = wanted
        try? services.loop.updateWatch(watch, for: wanted ? [.readable, .writable] : .readable)
    }
}

import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// What L2CAP and RFCOMM channels share on their way to the stream layer: a
/// session for the channel, the connect watched on the loop until it ends,
/// the open socket handed over as a `BluetoothStreamEndpoint`, and the
/// channel's events delivered to its holder. The components keep what
/// differs (addresses, PSMs or channel numbers, MTUs, when to reopen).
protocol BluetoothChannelTransport: StreamTransport, SendableMetatype {
    /// The log prefix and the name of its channels in messages ("l2cap", "rfcomm").
    var transportName: String { get }
    /// The channel closed by itself: announce, then end or wait to reopen.
    func endChannel<S: DaemonServices>(_ session: Int, reason: String, services: isolated S)
}

extension BluetoothChannelTransport {
    /// A stream session for a new channel of `client`.
    func openChannelSession<S: DaemonServices>(
        for client: BluetoothClient, name: String, wakeMode: BackgroundMode, coalescing: Duration, services: isolated S
    ) throws(ProtocolError) -> Int {
        guard let streams = services.component(StreamSessions.self) else {
            throw ProtocolError(.internalError, "no stream sessions in this daemon")
        }
        do {
            return try streams.open(holder: client.sessionHolder, name: name, transport: self, wakeMode: wakeMode, coalescing: coalescing,
                                    services: services)
        } catch {
            throw ProtocolError(.invalidState, "cannot create the channel's session log: \(error)")
        }
    }

    /// Watches a connecting socket until its connect ends (`.writable`, or
    /// an error), then runs `finished` on the loop; closes the socket if it
    /// cannot be watched.
    func watchConnect<S: DaemonServices>(
        _ socket: BluetoothSocket, services: isolated S, _ finished: @escaping @Sendable (Self, isolated S) -> Void
    ) throws(ProtocolError) -> WatchID {
        do {
            return try services.loop.watch(socket.fd, for: .writable, services.watchCallback(Self.self) { transport, _, services in
                finished(transport, services)
            })
        } catch {
            socket.close()
            throw ProtocolError(.internalError, "cannot watch the channel's socket: \(error)")
        }
    }

    /// Hands an open channel to the stream layer, which reads and writes it from now on.
    func attachChannel<S: DaemonServices>(_ endpoint: BluetoothStreamEndpoint, to session: Int, services: isolated S) {
        do {
            try services.component(StreamSessions.self)?.attach(endpoint, to: session, services: services)
        } catch {
            endpoint.close()
            endChannel(session, reason: "cannot watch the channel's socket: \(error)", services: services)
        }
    }

    /// A channel's coalescing window (`coalesceMilliseconds`; nil: the default).
    func coalescing(_ milliseconds: Int?) throws(ProtocolError) -> Duration {
        guard let milliseconds else { return .milliseconds(L2CAPCoalescing.defaultMilliseconds) }
        let range = L2CAPCoalescing.milliseconds
        guard range.contains(milliseconds) else {
            throw ProtocolError(.invalidArgument, "coalesceMilliseconds \(milliseconds) is outside \(range.lowerBound)-\(range.upperBound) (0: announce every read at once)")
        }
        return .milliseconds(milliseconds)
    }

    /// Delivers a channel event (`ble.l2cap.*`, `bluetooth.rfcomm.*`): queued
    /// for an app (waking it by `mode`), pushed to a control client.
    func deliver<S: DaemonServices>(
        _ kind: String, _ attributes: [String: JSONValue], mode: BackgroundMode, to client: BluetoothClient, services: isolated S
    ) {
        switch client {
        case let .control(connectionID):
            if let connection = services.connection(connectionID) {
                services.send(BluetoothPush(kind: kind, attributes: attributes), to: connection)
            }
        case let .app(app):
            let event = QueuedEvent(kind: kind, attributes: attributes, wakeMode: mode)
            do {
                try services.withEngine { engine, now throws(ProtocolError) in _ = try engine.deliver(event, to: app, now: now) }
            } catch {
                services.logger.warning("\(transportName): '\(kind)' for \(app) not queued: \(error)", metadata: ["app": "\(app)"])
            }
        }
    }
}

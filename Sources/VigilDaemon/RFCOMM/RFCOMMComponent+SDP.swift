import VigilBluetooth
import VigilL2CAP
import VigilProtocol
import VigilStreams
import VigilSystem

/// A channel asked for by service UUID: its number comes from the device's
/// SDP server (an L2CAP channel to PSM 1, one ServiceSearchAttribute
/// request, its continuations), then the channel connects as one asked for
/// by number. The number found is kept: a `reopen` connects to it again
/// without asking SDP (a serial device's channel does not move).
extension RFCOMMComponent {
    /// How long the device's SDP server may take from connect to answer.
    static let sdpTimeout: Duration = .seconds(20)

    func startLookup<S: DaemonServices>(
        _ session: Int, uuid: [UInt8], wish: @escaping (RFCOMMChannel) -> RFCOMMRequest, peer: String, adapter: String?,
        opening: RFCOMMConnection.Opening, services: isolated S
    ) throws(ProtocolError) {
        guard let address = BluetoothDeviceAddress(peer) else {
            throw ProtocolError(.invalidArgument, "'\(peer)' is not a Bluetooth address")
        }
        let socket: BluetoothSocket
        do {
            socket = try BluetoothSocket.connect(to: address, type: .bredr, psm: SDP.psm, from: adapter.flatMap(BluetoothDeviceAddress.init))
        } catch {
            throw protocolError(error, "cannot reach the SDP server of \(peer)")
        }
        let lookup = SDPLookup(socket: socket, uuid: uuid, wish: wish, opening: opening)
        lookup.watch = try watchConnect(socket, services: services) { rfcomm, services in
            rfcomm.lookupConnected(session, services: services)
        }
        lookups[session] = lookup
        let token = ObjectIdentifier(lookup)
        _ = services.loop.schedule(after: Self.sdpTimeout, services.callback(RFCOMMComponent.self) { rfcomm, services in
            guard let current = rfcomm.lookups[session], ObjectIdentifier(current) == token else { return }
            rfcomm.failLookup(session, ProtocolError(.notConnected, "the SDP server of \(peer) did not answer within \(Self.sdpTimeout)"),
                              services: services)
        })
    }

    /// The L2CAP channel to the SDP server is open (or failed): send the request.
    private func lookupConnected<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard let lookup = lookups[session] else { return }
        if let watch = lookup.watch { services.loop.removeWatch(watch) }
        lookup.watch = nil
        if let failure = lookup.socket.connectResult() {
            return failLookup(session, protocolError(failure, "cannot reach the SDP server"), services: services)
        }
        if let error = send(lookup, continuation: []) {
            return failLookup(session, protocolError(error, "cannot ask the SDP server"), services: services)
        }
        do {
            lookup.watch = try services.loop.watch(
                lookup.socket.fd, for: .readable, services.watchCallback(RFCOMMComponent.self) { rfcomm, _, services in
                    rfcomm.lookupAnswered(session, services: services)
                })
        } catch {
            failLookup(session, ProtocolError(.internalError, "cannot watch the SDP socket: \(error)"), services: services)
        }
    }

    /// Sends the next request; the error, if it could not.
    private func send(_ lookup: SDPLookup, continuation: [UInt8]) -> BluetoothSocketError? {
        lookup.transaction &+= 1
        let pdu = SDP.request(uuid: lookup.uuid, transaction: lookup.transaction, continuation: continuation)
        do {
            let sent = try pdu.withUnsafeBytes { bytes in try lookup.socket.send(bytes) }
            return sent == pdu.count ? nil : .invalidArgument("the SDP request did not fit the channel")
        } catch let error as BluetoothSocketError {
            return error
        } catch {
            return .invalidArgument("\(error)")
        }
    }

    /// A response: collected, continued, or read for the channel number.
    private func lookupAnswered<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard let lookup = lookups[session] else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let outcome: BluetoothReceive
        do {
            outcome = try buffer.withUnsafeMutableBytes { bytes in try lookup.socket.receive(into: bytes) }
        } catch let error as BluetoothSocketError {
            return failLookup(session, protocolError(error, "cannot read the SDP answer"), services: services)
        } catch {
            return failLookup(session, ProtocolError(.deviceError, "cannot read the SDP answer: \(error)"), services: services)
        }
        let count: Int
        switch outcome {
        case .wouldBlock: return
        case .closed: return failLookup(session, ProtocolError(.notConnected, "the device closed its SDP channel before answering"), services: services)
        case let .data(read, _, _): count = read
        }
        do {
            let (part, continuation) = try SDP.response(Array(buffer[0..<count]), transaction: lookup.transaction)
            lookup.collected += part
            if !continuation.isEmpty {
                if let error = send(lookup, continuation: continuation) {
                    failLookup(session, protocolError(error, "cannot ask the SDP server"), services: services)
                }
                return
            }
            guard let number = try SDP.rfcommChannel(inAttributeLists: lookup.collected) else {
                return failLookup(session, ProtocolError(.notFound, "the device offers no RFCOMM service \(lookup.uuidText) (SDP)"),
                                  services: services)
            }
            let channel: RFCOMMChannel
            do { channel = try RFCOMMChannel(number) } catch {
                return failLookup(session, ProtocolError(.deviceError, "the device's SDP record names RFCOMM channel \(number)"), services: services)
            }
            finishLookup(session, lookup, channel: channel, services: services)
        } catch {
            failLookup(session, ProtocolError(.deviceError, "\(error)"), services: services)
        }
    }

    private func finishLookup<S: DaemonServices>(_ session: Int, _ lookup: SDPLookup, channel: RFCOMMChannel, services: isolated S) {
        close(lookup, session, services: services)
        let request = lookup.wish(channel)
        services.logger.info("rfcomm: session \(session): SDP: service \(lookup.uuidText) on \(request.peer) is channel \(channel)")
        do throws(ProtocolError) {
            try connect(session, request, opening: lookup.opening, services: services)
        } catch {
            failOpening(session, opening: lookup.opening, error, services: services)
        }
    }

    /// The lookup failed: the session goes (it never carried data), the opener hears why.
    func failLookup<S: DaemonServices>(_ session: Int, _ error: ProtocolError, services: isolated S) {
        guard let lookup = lookups[session] else { return }
        close(lookup, session, services: services)
        failOpening(session, opening: lookup.opening, error, services: services)
    }

    func close<S: DaemonServices>(_ lookup: SDPLookup, _ session: Int, services: isolated S) {
        if let watch = lookup.watch { services.loop.removeWatch(watch) }
        lookup.watch = nil
        lookup.socket.close()
        if lookups[session] === lookup { lookups[session] = nil }
    }
}

/// An SDP request in flight for a channel asked for by UUID.
final class SDPLookup {
    let socket: BluetoothSocket
    let uuid: [UInt8]
    let wish: (RFCOMMChannel) -> RFCOMMRequest
    let opening: RFCOMMConnection.Opening
    var watch: WatchID?
    var transaction: UInt16 = 0
    /// The attribute lists' parts so far (a long answer comes in several).
    var collected: [UInt8] = []

    init(socket: BluetoothSocket, uuid: [UInt8], wish: @escaping (RFCOMMChannel) -> RFCOMMRequest, opening: RFCOMMConnection.Opening) {
        self.socket = socket
        self.uuid = uuid
        self.wish = wish
        self.opening = opening
    }

    var uuidText: String {
        let hex = uuid.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        return uuid.count == 2 ? "0x" + hex : hex
    }
}

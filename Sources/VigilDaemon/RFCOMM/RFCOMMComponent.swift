import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// RFCOMM channels (Bluetooth Classic serial, SPP), central role: a channel
/// to a server channel (or an SPP service's channel, found by SDP) on a
/// BR/EDR device BlueZ knows. A channel is a stream session
/// (`StreamSessions`): once open, its socket is handed to the stream layer
/// as a `BluetoothStreamEndpoint`, and its bytes reach the holder as `session.data`
/// events, woken by `bluetooth-central`; the app writes with `write` and
/// closes with `closeSession`. The device is checked through the central's
/// `BluetoothLinks.classicTarget`; the kernel makes the link itself.
///
/// A channel opened with `reopen` that closes by itself (the link went, the
/// device was switched off or closed it) keeps its session and connects
/// again, after 1 s and then at doubling intervals up to `maxRetryDelay`,
/// until it is open again (`bluetooth.rfcomm.reopened`) or its holder closes
/// it. Unlike LE, no link is kept by BlueZ for a client, so there is no
/// link event to wait for: a classic serial device is paged by connecting.
final class RFCOMMComponent: BluetoothChannelTransport, BluetoothLinkObserver {
    let name = "rfcomm"
    let transportName = "rfcomm"
    let requestTypes: Set<String> = [OpenRFCOMMChannel.type, PublishRFCOMMService.type, UnpublishRFCOMMService.type]

    /// Opening or open channels, by session id.
    var channels: [Int: RFCOMMConnection] = [:]
    /// `reopen` channels that closed, by session id: the next attempt's delay.
    var waiting: [Int: (request: RFCOMMRequest, delay: Duration)] = [:]
    /// Channels asked for by service UUID whose number SDP has not told yet, by session id.
    var lookups: [Int: SDPLookup] = [:]
    /// Published serial port services, by UUID (`RFCOMMComponent+Services.swift`).
    var published: [String: PublishedSerialService] = [:]
    /// What the state file said, by app: from the start until the services are published again.
    var restoring: [String: SavedRFCOMM] = [:]

    static let firstRetryDelay: Duration = .seconds(1)
    static let maxRetryDelay: Duration = .seconds(30)

    // MARK: Requests

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let id = message.id
        do throws(ProtocolError) {
            let client = BluetoothClient(requester)
            switch message.type {
            case OpenRFCOMMChannel.type:
                let request: OpenRFCOMMChannel = try message.decode()
                try open(request, client: client, opening: .init(requestID: id, connectionID: connection.id), services: services)
            case PublishRFCOMMService.type:
                let request: PublishRFCOMMService = try message.decode()
                let reply = try publish(request, client: client, services: services)
                saveIntent(of: client, services: services)  // in the state file before the app can tell a device
                services.send(reply, id: id, to: connection)
            case UnpublishRFCOMMService.type:
                let request: UnpublishRFCOMMService = try message.decode()
                try unpublish(request.uuid, client: client, services: services)
                saveIntent(of: client, services: services)
                services.send(Done(), id: id, to: connection)
            default:
                throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'")
            }
        } catch {
            throw ProtocolError(error.code, error.message, id: id)
        }
    }

    /// Checks the request (before Bluetooth is asked anything: a bad request
    /// gets the same answer with Bluetooth off), then starts connecting.
    func open<S: DaemonServices>(
        _ request: OpenRFCOMMChannel, client: BluetoothClient, opening: RFCOMMConnection.Opening, services: isolated S
    ) throws(ProtocolError) {
        guard BluetoothDeviceAddress(request.device) != nil else {
            throw ProtocolError(.invalidArgument, "'\(request.device)' is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        var channel: RFCOMMChannel?
        var uuid: [UInt8]?
        switch (request.channel, request.uuid) {
        case let (number?, nil):
            do { channel = try RFCOMMChannel(number) } catch { throw ProtocolError(.invalidArgument, error.description) }
        case let (nil, text?):
            guard let bytes = SDP.uuidBytes(text) else {
                throw ProtocolError(.invalidArgument, "'\(text)' is not a Bluetooth UUID (0x1101, or 128-bit)")
            }
            uuid = bytes
        case (nil, nil):
            throw ProtocolError(.invalidArgument, "give the RFCOMM channel (1-30) or the service's uuid")
        case (_?, _?):
            throw ProtocolError(.invalidArgument, "give the RFCOMM channel or the service's uuid, not both")
        }
        var security: L2CAPSecurity?
        if let name = request.security {
            guard let level = L2CAPSecurity(name: name) else {
                throw ProtocolError(.invalidArgument, "security '\(name)' is not one of low, medium, high, fips")
            }
            security = level
        }
        let coalesce = try coalescing(request.coalesceMilliseconds)
        guard let links = services.bluetoothLinks else {
            throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config")
        }
        let target = try links.classicTarget(address: request.device)
        let reopen = request.reopen ?? false
        let wish = { (channel: RFCOMMChannel) in
            RFCOMMRequest(client: client, peer: target.address, adapter: target.adapterAddress, channel: channel,
                          security: security, reopen: reopen, coalesce: coalesce)
        }
        let session = try openChannelSession(
            for: client, name: "rfcomm:\(target.address)/\(request.channel.map { "\($0)" } ?? request.uuid ?? "")",
            wakeMode: .bluetoothCentral, coalescing: coalesce, services: services)
        do throws(ProtocolError) {
            if let channel {
                try connect(session, wish(channel), opening: opening, services: services)
            } else if let uuid {
                try startLookup(session, uuid: uuid, wish: wish, peer: target.address, adapter: target.adapterAddress, opening: opening,
                                services: services)
            }
        } catch {
            services.component(StreamSessions.self)?.forget(session)
            throw error
        }
        let what = channel.map { "channel \($0)" } ?? "service \(request.uuid ?? "")"
        services.logger.info("rfcomm: session \(session): \(client) opening \(what) on \(target.address)\(target.paired ? "" : " (not paired)")")
    }

    /// Starts connecting the channel's socket for `session`.
    func connect<S: DaemonServices>(
        _ session: Int, _ request: RFCOMMRequest, opening: RFCOMMConnection.Opening, services: isolated S
    ) throws(ProtocolError) {
        let socket = try connectSocket(request)
        try startOpening(session, RFCOMMConnection(socket: socket, request: request, opening: opening), services: services)
    }

    /// An opening that failed before the channel was open: the session goes
    /// (it never carried data), the opener hears why.
    func failOpening<S: DaemonServices>(_ session: Int, opening: RFCOMMConnection.Opening, _ error: ProtocolError, services: isolated S) {
        services.logger.info("rfcomm: session \(session): \(error.message)")
        channels[session] = nil
        services.component(StreamSessions.self)?.forget(session)
        if let id = opening.requestID, let replyTo = opening.connectionID.flatMap({ services.connection($0) }) {
            services.send(ProtocolError(error.code, error.message, id: id), to: replyTo)
        }
    }

    private func connectSocket(_ wish: RFCOMMRequest) throws(ProtocolError) -> BluetoothSocket {
        guard let address = BluetoothDeviceAddress(wish.peer) else {
            throw ProtocolError(.invalidArgument, "'\(wish.peer)' is not a Bluetooth address")
        }
        do {
            return try BluetoothSocket.connect(to: address, channel: wish.channel, from: wish.adapter.flatMap(BluetoothDeviceAddress.init),
                                            security: wish.security)
        } catch {
            throw protocolError(error, "cannot open RFCOMM channel \(wish.channel) on \(wish.peer)")
        }
    }

    /// A socket error as the protocol says it (the system's words, without
    /// `BluetoothSocketError`'s hints, which are about PSMs).
    func protocolError(_ error: BluetoothSocketError, _ doing: String) -> ProtocolError {
        guard case let .system(system) = error else {
            let code: ProtocolError.Code = if case .bluetoothUnavailable = error { .unavailable } else { .invalidArgument }
            return ProtocolError(code, "\(doing): \(error)")
        }
        switch system.errno {
        case .connectionRefused: return ProtocolError(.notFound, "\(doing): nothing listens on that channel (\(system))")
        case .permissionDenied:
            // The kernel asks for a link key on every RFCOMM channel to an SSP
            // device, and vigild's agent answers only pairings a client asked
            // for: an unpaired device is paired first, by the client.
            return ProtocolError(.notPermitted, "\(doing): the link's security was refused: the device is not paired (or the pairing failed); pair it first (ble.pair: central.pair(address) in VigilKit and Python, vigilctl ble pair ADDRESS), then open the channel")
        case .hostIsDown, .noRouteToHost, .timedOut, .socketNotConnected:
            return ProtocolError(.notConnected, "\(doing): the device did not answer (\(system))")
        default: return ProtocolError(.deviceError, "\(doing): \(system)")
        }
    }

    // MARK: Opening

    /// Waits (on the loop) for the connect to finish: `.writable` or an error.
    private func startOpening<S: DaemonServices>(_ session: Int, _ connection: RFCOMMConnection, services: isolated S) throws(ProtocolError) {
        connection.watch = try watchConnect(connection.socket, services: services) { rfcomm, services in
            guard let connection = rfcomm.channels[session], connection.opening != nil else { return }
            rfcomm.finishOpening(session, connection, services: services)
        }
        channels[session] = connection
    }

    /// The connect finished: the channel is open (its opener answered, the
    /// stream layer reads it), or it failed (the opener gets the error; a
    /// reopen tries again later).
    private func finishOpening<S: DaemonServices>(_ session: Int, _ connection: RFCOMMConnection, services: isolated S) {
        guard let opening = connection.opening, let streams = services.component(StreamSessions.self) else { return }
        connection.opening = nil
        if let watch = connection.watch { services.loop.removeWatch(watch) }
        connection.watch = nil
        let request = connection.request
        let replyTo = opening.connectionID.flatMap { services.connection($0) }
        if let failure = connection.socket.connectResult() {
            let error = protocolError(failure, "cannot open RFCOMM channel \(request.channel) on \(request.peer)")
            connection.socket.close()
            channels[session] = nil
            if opening.requestID == nil && opening.connectionID == nil {
                services.logger.info("rfcomm: session \(session): \(error.message); next try in \(opening.retryDelay)")
                return retryLater(session, request, after: opening.retryDelay, services: services)
            }
            return failOpening(session, opening: opening, error, services: services)
        }
        services.logger.info("rfcomm: session \(session) open: \(request.peer) channel \(request.channel)")
        let endpoint = BluetoothStreamEndpoint(stream: connection.socket, session: session, logger: services.logger) { [unowned self] in
            if self.channels[session] === connection { self.channels[session] = nil }
        }
        streams.record(services: services)
        let info = RFCOMMChannelInfo(session: session, peer: request.peer, channel: Int(request.channel.value))
        if opening.connectionID == nil {
            services.logger.info("rfcomm: session \(session) reopened: \(request.peer) channel \(request.channel)")
            deliver(RFCOMMEventKind.reopened, info.attributes, mode: .bluetoothCentral, to: request.client, services: services)
        } else if let replyTo {
            services.send(RFCOMMChannelOpened(channel: info), id: opening.requestID, to: replyTo)
        }
        attachChannel(endpoint, to: session, services: services)
    }

    // MARK: The end of a channel

    /// The channel closed by itself: what it received is announced; a
    /// `reopen` channel keeps its session and connects again later, any
    /// other ends.
    func endChannel<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        guard let streams = services.component(StreamSessions.self), streams.contains(session) else { return }
        let request = channels[session]?.request ?? waiting[session]?.request
        streams.announce(session, all: true, services: services)
        streams.detach(session, services: services)
        channels[session] = nil
        guard let request, request.reopen else {
            return streams.end(session, reason: reason, willReopen: false, services: services)
        }
        services.logger.info("rfcomm: session \(session) closed: \(reason); connecting again in \(Self.firstRetryDelay)")
        streams.notifyClosed(session, reason: reason, willReopen: true, services: services)
        retryLater(session, request, after: Self.firstRetryDelay, services: services)
    }

    private func retryLater<S: DaemonServices>(_ session: Int, _ request: RFCOMMRequest, after delay: Duration, services: isolated S) {
        waiting[session] = (request, delay)
        _ = services.loop.schedule(after: delay, services.callback(RFCOMMComponent.self) { rfcomm, services in
            rfcomm.retry(session, services: services)
        })
    }

    /// A waiting channel's next attempt: on failure the delay doubles (up to `maxRetryDelay`).
    private func retry<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard let (request, delay) = waiting.removeValue(forKey: session),
              let streams = services.component(StreamSessions.self), streams.contains(session) else { return }
        let next = min(delay * 2, Self.maxRetryDelay)
        do throws(ProtocolError) {
            try connect(session, request, opening: .init(retryDelay: next), services: services)
        } catch {
            services.logger.info("rfcomm: session \(session): cannot connect again yet (\(error.message)); next try in \(next)")
            retryLater(session, request, after: next, services: services)
        }
    }

    // MARK: StreamTransport

    func endpointEnded<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        endChannel(session, reason: reason, services: services)
    }

    func notOpenReason(_ session: Int) -> String {
        "RFCOMM channel (session \(session)) is not open (connecting to its device again)"
    }

    /// The session ended (its holder closed it, its app ended): a channel
    /// still connecting is abandoned, its opener told; it no longer retries.
    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S) {
        waiting[session] = nil
        if let lookup = lookups[session] {
            close(lookup, session, services: services)
            if let id = lookup.opening.requestID, let replyTo = lookup.opening.connectionID.flatMap({ services.connection($0) }) {
                services.send(ProtocolError(.invalidState, "the channel was closed while opening"), id: id, to: replyTo)
            }
        }
        if let connection = channels.removeValue(forKey: session) {
            if let watch = connection.watch { services.loop.removeWatch(watch) }
            connection.watch = nil
            connection.socket.close()
            if let opening = connection.opening, let id = opening.requestID,
               let replyTo = opening.connectionID.flatMap({ services.connection($0) }) {
                services.send(ProtocolError(.invalidState, "the channel was closed while opening"), id: id, to: replyTo)
            }
        }
    }

    // MARK: Restart

    /// An RFCOMM channel's socket dies with vigild: the sessions an earlier
    /// daemon recorded come back only to deliver what their logs kept, then
    /// end, their holders told why.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        restoring = services.config.bluetooth ? saved.bluetooth?.rfcomm ?? [:] : [:]
        republish(services: services)
        guard let streams = services.component(StreamSessions.self) else { return }
        let records = streams.takeSaved(transport: transportName)
        for record in records where streams.restore(record, transport: self, wakeMode: .bluetoothCentral, coalescing: nil, services: services) {
            streams.end(record.id, reason: "vigild restarted, and an RFCOMM channel's socket ends with it", willReopen: false, services: services)
        }
        if !records.isEmpty { streams.record(services: services) }
    }
}

/// What a channel was opened with, to connect it again.
struct RFCOMMRequest {
    var client: BluetoothClient
    var peer: String
    var adapter: String?
    var channel: RFCOMMChannel
    var security: L2CAPSecurity?
    var reopen: Bool
    var coalesce: Duration
}

/// A channel from its connect until the stream layer closes its socket.
final class RFCOMMConnection {
    let socket: BluetoothSocket
    let request: RFCOMMRequest
    /// The watch for the connect's end (the stream layer watches an open channel).
    var watch: WatchID?
    /// Until the device accepted: who waits for the reply (none: a reopen).
    var opening: Opening?

    struct Opening {
        var requestID: Int?
        var connectionID: Int?
        /// A reopen's next delay should this attempt fail.
        var retryDelay: Duration = RFCOMMComponent.firstRetryDelay
    }

    init(socket: BluetoothSocket, request: RFCOMMRequest, opening: Opening?) {
        self.socket = socket
        self.request = request
        self.opening = opening
    }
}

import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// L2CAP connection-oriented channels, both roles: requests, opening,
/// published PSMs, reopening after link loss or a daemon restart. A channel
/// is a stream session (`StreamSessions`): once open, its socket is handed
/// to the stream layer as a `BluetoothStreamEndpoint`, and its bytes reach the holder
/// as `session.data` events (or frames for vigilctl), woken by
/// `bluetooth-central` or `bluetooth-peripheral`; the app writes with
/// `write` and closes with `closeSession`. The central's links are reached
/// through `BluetoothLinks`.
final class L2CAPComponent: BluetoothChannelTransport, BluetoothLinkObserver {
    let name = "l2cap"
    let transportName = "l2cap"
    let requestTypes: Set<String> = [
        OpenL2CAPChannel.type, PublishL2CAPChannel.type, UnpublishL2CAPChannel.type, ListL2CAP.type,
    ]

    /// Opening or open channels, by session id.
    var channels: [Int: OpenChannel] = [:]
    /// Channels opened with `reopen` whose link went: they open again when it
    /// is back (same session), by session id.
    var waiting: [Int: ChannelRequest] = [:]
    /// Waiting channels whose holder is not told yet (`decideReopen`): the reason.
    var undecided: [Int: String] = [:]
    /// Listening PSMs, by PSM.
    var published: [UInt16: PublishedPSM] = [:]
    /// What the state file said, by app: from the start until the sessions
    /// and PSMs are restored (`L2CAPComponent+Restore.swift`).
    var restoring: [String: SavedL2CAP] = [:]

    /// The receive MTU a channel asks for unless told otherwise: SDUs of
    /// 2 KiB make few reads per second at LE's rates.
    static let defaultReceiveMTU: UInt16 = 2048

    /// How long a streaming channel's bytes may wait to share a
    /// `session.data` event unless its opener chose (`coalesceMilliseconds`).
    /// An LE link brings an SDU every few milliseconds, and an awake app
    /// acknowledged each event before the next came: one event per SDU, ~400
    /// per MiB, whose cost (queue, journal, wake, the app's handling) was 30
    /// times the direct reader's CPU per byte. A lone SDU after a quiet spell
    /// goes at once. Serial sessions read a pty or UART in large reads and
    /// announce at once (docs/performance.md).
    static let defaultCoalescing: Duration = .milliseconds(L2CAPCoalescing.defaultMilliseconds)

    // MARK: Requests

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let client = BluetoothClient(requester)
        let id = message.id
        guard let links = services.bluetoothLinks else {
            throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config", id: id)
        }
        do throws(ProtocolError) {
            switch message.type {
            case OpenL2CAPChannel.type:
                let request: OpenL2CAPChannel = try message.decode()
                try openChannel(request, client: client, links: links, opening: .init(requestID: id, connectionID: connection.id), services: services)
            case PublishL2CAPChannel.type:
                let request: PublishL2CAPChannel = try message.decode()
                let psm = try publish(request, client: client, services: services)
                saveIntent(of: client, services: services)  // in the state file before the app can advertise the PSM
                services.send(L2CAPChannelPublished(psm: psm), id: id, to: connection)
            case ListL2CAP.type:
                services.send(list(for: client), id: id, to: connection)
            case UnpublishL2CAPChannel.type:
                let request: UnpublishL2CAPChannel = try message.decode()
                try unpublish(request.psm, client: client, services: services)
                saveIntent(of: client, services: services)
                services.send(Done(), id: id, to: connection)
            default:
                throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'")
            }
        } catch {
            throw ProtocolError(error.code, error.message, id: id)
        }
    }

    /// `ble.l2cap`: a control client sees every client's PSMs and channels, an app its own.
    func list(for client: BluetoothClient) -> L2CAPList {
        let sees: (BluetoothClient) -> Bool = { owner in
            if case .control = client { return true }
            return owner == client
        }
        let published = published.sorted { $0.key < $1.key }.filter { sees($0.value.client) }.map { psm, entry in
            PublishedL2CAP(psm: Int(psm), holder: "\(entry.client.sessionHolder)", security: entry.options.security?.description,
                           receiveMTU: Int(entry.options.receiveMTU ?? Self.defaultReceiveMTU),
                           coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: entry.coalesce))
        }
        var channels: [(Int, ChannelRequest, String)] = channels.map { ($0.key, $0.value.request, $0.value.opening == nil ? "open" : "opening") }
        channels += waiting.filter { self.channels[$0.key] == nil }.map { ($0.key, $0.value, "waiting") }
        return L2CAPList(published: published, channels: channels.filter { sees($0.1.client) }.sorted { $0.0 < $1.0 }.map { session, request, state in
            L2CAPChannelStatus(session: session, holder: "\(request.client.sessionHolder)", peer: request.peer,
                               psm: Int(request.psm.value), state: state, reopen: request.reopen)
        })
    }

    // MARK: Fan-outs

    /// A client gone for good (a control connection closed, an app the user
    /// force-quit): its PSMs stop listening. An app that merely ended keeps
    /// them (`keep`): the next incoming channel relaunches it. Its channels
    /// are sessions: they end in the stream layer.
    func bluetoothClientEnded<S: DaemonServices>(_ client: BluetoothClient, keep: Bool, services: isolated S) {
        guard !keep else { return }
        clientEnded(client, services: services)
    }

    func bluetoothLinkConnected<S: DaemonServices>(_ address: String, client: BluetoothClient, services: isolated S) {
        linkConnected(address, client: client, services: services)
    }

    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S) {
        snapshot.bluetooth?.l2cap = saved()
    }

    // MARK: Arguments

    func options(security: String?, receiveMTU: Int?) throws(ProtocolError) -> L2CAPOptions {
        var options = L2CAPOptions(receiveMTU: Self.defaultReceiveMTU)
        if let security {
            guard let level = L2CAPSecurity(name: security) else {
                throw ProtocolError(.invalidArgument, "security '\(security)' is not one of low, medium, high, fips")
            }
            options.security = level
        }
        if let receiveMTU {
            guard let mtu = UInt16(exactly: receiveMTU), mtu >= 23 else {
                throw ProtocolError(.invalidArgument, "receiveMTU \(receiveMTU) is outside 23-65535")
            }
            options.receiveMTU = mtu
        }
        return options
    }

    func psm(_ value: Int) throws(ProtocolError) -> L2CAPPSM {
        do {
            return try L2CAPPSM(le: value)
        } catch {
            throw ProtocolError(.invalidArgument, error.description)
        }
    }

    /// An L2CAP socket error as the protocol says it, with what the errno
    /// means for a PSM (RFCOMM's say it for a channel: `RFCOMMComponent.protocolError`).
    func protocolError(_ error: BluetoothSocketError, _ doing: String) -> ProtocolError {
        switch error {
        case .bluetoothUnavailable:
            return ProtocolError(.unavailable, "\(doing): \(error)")
        case .invalidArgument:
            return ProtocolError(.invalidArgument, "\(doing): \(error)")
        case .system:
            switch error.errno {
            case .connectionRefused?:
                return ProtocolError(.notFound, "\(doing): \(error) (the device offers no channel on that PSM, or refused it)")
            case .addressInUse?: return ProtocolError(.invalidState, "\(doing): \(error) (the PSM is already in use on this adapter)")
            case .permissionDenied?:
                return ProtocolError(.notPermitted, "\(doing): \(error) (fixed PSMs below 128 need CAP_NET_BIND_SERVICE, or the link's security was refused)")
            case .socketNotConnected?:
                return ProtocolError(.notConnected, "\(doing): \(error)")
            case .noRouteToHost?, .hostIsDown?:
                return ProtocolError(.notConnected, "\(doing): \(error) (no Bluetooth adapter is up for that address)")
            default: return ProtocolError(.deviceError, "\(doing): \(error)")
            }
        }
    }

    // MARK: StreamTransport

    /// The peer closed the channel, its link went, a read or write failed.
    func endpointEnded<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        endChannel(session, reason: reason, services: services)
    }

    func notOpenReason(_ session: Int) -> String {
        "channel (session \(session)) is not open (waiting for its link to return)"
    }

    /// The session ended (its holder closed it, its app ended, ...): a
    /// channel still opening is abandoned, its opener told; it no longer waits.
    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S) {
        waiting[session] = nil
        undecided[session] = nil
        if let channel = channels.removeValue(forKey: session) {
            if let watch = channel.watch { services.loop.removeWatch(watch) }
            channel.watch = nil
            channel.socket.close()
            if let opening = channel.opening, let id = opening.requestID, let connection = opening.connectionID.flatMap({ services.connection($0) }) {
                services.send(ProtocolError(.invalidState, "the channel was closed while opening"), id: id, to: connection)
            }
        }
        services.scheduleSave()  // a `reopen` channel leaves the state file
    }
}

/// What a channel was opened with, to open it again after its link returns.
struct ChannelRequest {
    var client: BluetoothClient
    var peer: String
    var psm: L2CAPPSM
    var options: L2CAPOptions
    var reopen: Bool
    /// How long its bytes may wait to share a data event (zero: never).
    var coalesce: Duration = L2CAPComponent.defaultCoalescing
}

/// A channel from its connect until the stream layer closes its socket.
final class OpenChannel {
    let socket: BluetoothSocket
    let request: ChannelRequest
    let wakeMode: BackgroundMode
    /// The watch for the connect's end (the stream layer watches an open channel).
    var watch: WatchID?
    /// Until the peripheral accepted: who waits for the reply (nil: a reopen).
    var opening: Opening?
    var sendMTU = 0
    var receiveMTU = 0

    struct Opening {
        var requestID: Int?
        var connectionID: Int?
    }

    init(socket: BluetoothSocket, request: ChannelRequest, wakeMode: BackgroundMode, opening: Opening?) {
        self.socket = socket
        self.request = request
        self.wakeMode = wakeMode
        self.opening = opening
    }
}

/// A PSM a client listens on.
final class PublishedPSM {
    let client: BluetoothClient
    let listener: BluetoothSocket
    let options: L2CAPOptions
    /// The coalescing window of the channels it accepts (`ChannelRequest.coalesce`).
    var coalesce: Duration = L2CAPComponent.defaultCoalescing
    /// Asked for without a PSM: publishing again without one (and the same
    /// options) gets this one back, across relaunches and daemon restarts.
    let dynamic: Bool
    var watch: WatchID?

    init(client: BluetoothClient, listener: BluetoothSocket, options: L2CAPOptions, dynamic: Bool) {
        self.client = client
        self.listener = listener
        self.options = options
        self.dynamic = dynamic
    }
}

extension BluetoothClient {
    var sessionHolder: SessionHolder {
        switch self {
        case let .app(id): .app(id)
        case let .control(connection): .control(connection)
        }
    }
}

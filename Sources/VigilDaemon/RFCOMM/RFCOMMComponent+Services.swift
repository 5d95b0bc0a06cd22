import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilStreams

/// Incoming SPP: serial port services apps publish. bluetoothd holds the SDP
/// record and the listening RFCOMM channel (`ProfileManager1.RegisterProfile`,
/// Role server: `BluetoothCentral+SerialServices`), and hands each
/// connection's socket to vigild (`Profile1.NewConnection`), which makes it
/// a session of the publisher, announced by `bluetooth.rfcomm.incoming`
/// (waking or relaunching an app: `bluetooth-peripheral`), and hands the
/// socket to the stream layer like an outgoing channel's.
///
/// A published service is an intent: in the state file (`SavedRFCOMM`)
/// before the reply, published again by the next vigild, and registered
/// again with every bluetoothd that appears. It stays while the app is
/// suspended or not running and goes on unpublish or a force-quit.
extension RFCOMMComponent {
    static let defaultServiceUUID = "00001101-0000-1000-8000-00805f9b34fb"
    static let defaultServiceName = "Vigil serial port"

    /// Publishing the same UUID again with the same options is idempotent (a
    /// relaunched app publishes again); other options replace the old ones.
    func publish<S: DaemonServices>(
        _ request: PublishRFCOMMService, client: BluetoothClient, services: isolated S
    ) throws(ProtocolError) -> RFCOMMServicePublished {
        let text = request.uuid ?? Self.defaultServiceUUID
        guard let uuid = BluetoothUUID.normalize(text) else {
            throw ProtocolError(.invalidArgument, "'\(text)' is not a Bluetooth UUID (0x1101, or 128-bit)")
        }
        var channel: RFCOMMChannel?
        if let number = request.channel {
            do { channel = try RFCOMMChannel(number) } catch { throw ProtocolError(.invalidArgument, error.description) }
        }
        let name = request.name ?? Self.defaultServiceName
        guard !name.isEmpty, name.utf8.count <= 248 else {
            throw ProtocolError(.invalidArgument, "the service name must have 1-248 bytes (UTF-8)")
        }
        let coalesce = try coalescing(request.coalesceMilliseconds)
        if case let .app(app) = client, let manifest = services.engine.apps[app]?.manifest,
           !manifest.backgroundModes.contains(.bluetoothPeripheral) {
            throw ProtocolError(.notPermitted, "publishing an RFCOMM service needs the 'bluetooth-peripheral' background mode in \(app)'s manifest (an incoming channel wakes or relaunches the app by it)")
        }
        guard let links = services.bluetoothLinks else {
            throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config")
        }
        if let existing = published[uuid], existing.client != client {
            throw ProtocolError(.invalidState, "the service \(uuid) is already published by another client")
        }
        if let channel, let other = published.values.first(where: { $0.spec.channel == channel.value && $0.spec.uuid != uuid }) {
            throw ProtocolError(.invalidState, "RFCOMM channel \(channel) is already published (service \(other.spec.uuid))")
        }
        let spec = SerialServiceSpec(uuid: uuid, channel: channel?.value, name: name,
                                     requireAuthentication: request.requireAuthentication ?? false)
        register(PublishedSerialService(client: client, spec: spec, coalesce: coalesce), links: links, services: services)
        services.logger.info("rfcomm: \(client) published the serial service \(uuid)\(channel.map { " on channel \($0)" } ?? "")")
        return RFCOMMServicePublished(uuid: uuid, channel: channel.map { Int($0.value) })
    }

    private func register<S: DaemonServices>(_ entry: PublishedSerialService, links: any BluetoothLinks, services: isolated S) {
        let uuid = entry.spec.uuid
        published[uuid] = entry
        links.publishSerialService(entry.spec, for: entry.client, connected: { [weak services] connection in
            services?.assumeIsolated { services in
                services.component(RFCOMMComponent.self)?.accept(connection, services: services)
            }
        }, failed: { [weak services] reason in
            services?.assumeIsolated { services in
                services.component(RFCOMMComponent.self)?.registrationFailed(uuid, reason: reason, services: services)
            }
        })
    }

    func unpublish<S: DaemonServices>(_ text: String, client: BluetoothClient, services: isolated S) throws(ProtocolError) {
        guard let uuid = BluetoothUUID.normalize(text), let entry = published[uuid], entry.client == client else {
            throw ProtocolError(.notFound, "the service \(text) is not published by this client")
        }
        withdraw(entry, services: services)
    }

    private func withdraw<S: DaemonServices>(_ entry: PublishedSerialService, services: isolated S) {
        published[entry.spec.uuid] = nil
        services.bluetoothLinks?.unpublishSerialService(entry.spec.uuid)
        services.logger.info("rfcomm: \(entry.client) unpublished the serial service \(entry.spec.uuid)")
    }

    /// bluetoothd would not take the service: it is withdrawn, its publisher told.
    func registrationFailed<S: DaemonServices>(_ uuid: String, reason: String, services: isolated S) {
        guard let entry = published[uuid] else { return }
        withdraw(entry, services: services)
        services.logger.error("rfcomm: \(entry.client)'s serial service \(uuid): \(reason); the client is told (\(RFCOMMEventKind.unpublished))")
        deliver(RFCOMMEventKind.unpublished, ["uuid": .string(uuid), "reason": .string(reason)], mode: .bluetoothPeripheral,
                to: entry.client, services: services)
        saveIntent(of: entry.client, services: services)
    }

    /// A device connected to a published service: a new session of its
    /// publisher, announced before any of its data.
    func accept<S: DaemonServices>(_ connection: SerialConnection, services: isolated S) {
        let socket = BluetoothSocket.adopting(rfcomm: connection.fd)
        guard let entry = published[connection.uuid], let streams = services.component(StreamSessions.self) else {
            socket.close()
            return
        }
        let channel = entry.spec.channel.map(RFCOMMChannel.init(bound:)) ?? (try? socket.localChannel()) ?? RFCOMMChannel(bound: 0)
        let client = entry.client
        let session: Int
        do {
            session = try openChannelSession(for: client, name: "rfcomm:\(connection.device)/\(channel)", wakeMode: .bluetoothPeripheral,
                                             coalescing: entry.coalesce, services: services)
        } catch {
            services.logger.error("rfcomm: no session for a channel from \(connection.device) to \(connection.uuid): \(error.message); refused")
            socket.close()
            return
        }
        let request = RFCOMMRequest(client: client, peer: connection.device, adapter: nil, channel: channel, security: nil, reopen: false,
                                    coalesce: entry.coalesce)
        let open = RFCOMMConnection(socket: socket, request: request, opening: nil)
        channels[session] = open
        let endpoint = BluetoothStreamEndpoint(stream: socket, session: session, logger: services.logger) { [unowned self] in
            if self.channels[session] === open { self.channels[session] = nil }
        }
        streams.record(services: services)
        services.logger.info("rfcomm: session \(session): \(connection.device) connected to \(client)'s service \(connection.uuid) (channel \(channel))")
        var attributes = RFCOMMChannelInfo(session: session, peer: connection.device, channel: Int(channel.value)).attributes
        attributes["uuid"] = .string(connection.uuid)
        deliver(RFCOMMEventKind.incoming, attributes, mode: .bluetoothPeripheral, to: client, services: services)
        attachChannel(endpoint, to: session, services: services)
    }

    // MARK: Clients

    /// A client gone for good (a control connection closed, an app the user
    /// force-quit): its services go. An app that merely ended keeps them
    /// (`keep`): the next incoming channel relaunches it.
    func bluetoothClientEnded<S: DaemonServices>(_ client: BluetoothClient, keep: Bool, services: isolated S) {
        guard !keep else { return }
        for entry in published.values.sorted(by: { $0.spec.uuid < $1.spec.uuid }) where entry.client == client {
            withdraw(entry, services: services)
        }
        if case .app = client { services.scheduleSave() }
    }

    func bluetoothLinkConnected<S: DaemonServices>(_ address: String, client: BluetoothClient, services: isolated S) {}

    // MARK: The state file

    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S) {
        snapshot.bluetooth?.rfcomm = saved()
    }

    /// Apps' published services; intents not yet restored are kept as they were.
    func saved() -> [String: SavedRFCOMM] {
        var result = restoring
        for entry in published.values.sorted(by: { $0.spec.uuid < $1.spec.uuid }) {
            guard case let .app(app) = entry.client else { continue }
            result[app, default: SavedRFCOMM()].services.append(SavedSerialService(
                uuid: entry.spec.uuid, channel: entry.spec.channel.map(Int.init), name: entry.spec.name,
                requireAuthentication: entry.spec.requireAuthentication, coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: entry.coalesce)))
        }
        return result
    }

    func saveIntent<S: DaemonServices>(of client: BluetoothClient, services: isolated S) {
        guard case .app = client else { return }
        services.saveState()
    }

    /// After a restart: every app's services are published again (a
    /// force-quit app's are dropped); one that cannot be is reported to its app.
    func republish<S: DaemonServices>(services: isolated S) {
        let restored = restoring
        restoring = [:]
        for (app, saved) in restored.sorted(by: { $0.key < $1.key }) {
            guard let known = services.engine.apps[app], !known.forceQuit else { continue }
            for service in saved.services {
                let request = PublishRFCOMMService(uuid: service.uuid, channel: service.channel, name: service.name,
                                                   requireAuthentication: service.requireAuthentication,
                                                   coalesceMilliseconds: service.coalesceMilliseconds)
                do throws(ProtocolError) {
                    _ = try publish(request, client: .app(app), services: services)
                } catch {
                    let reason = "vigild restarted and cannot publish the service again: \(error.message)"
                    services.logger.error("rfcomm: \(app): \(reason)")
                    deliver(RFCOMMEventKind.unpublished, ["uuid": .string(service.uuid), "reason": .string(reason)],
                            mode: .bluetoothPeripheral, to: .app(app), services: services)
                }
            }
        }
        if !restored.isEmpty { services.saveState() }
    }
}

/// A serial port service a client published.
struct PublishedSerialService {
    let client: BluetoothClient
    let spec: SerialServiceSpec
    /// The coalescing window of the channels devices open to it.
    let coalesce: Duration
}

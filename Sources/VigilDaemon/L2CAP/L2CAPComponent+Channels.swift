import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// Channels: opening one (central role), accepting them on a published PSM
/// (peripheral role), handing each to the stream layer once open, and its end.
extension L2CAPComponent {
    // MARK: Opening (central role)

    func openChannel<S: DaemonServices>(
        _ request: OpenL2CAPChannel, client: BluetoothClient, links: any BluetoothLinks, opening: OpenChannel.Opening,
        services: isolated S
    ) throws(ProtocolError) {
        let psm = try psm(request.psm)
        let options = try options(security: request.security, receiveMTU: request.receiveMTU)
        let coalesce = try coalescing(request.coalesceMilliseconds)
        let target = try links.l2capTarget(client, address: request.peripheral)
        var wish = ChannelRequest(client: client, peer: target.address, psm: psm, options: options, reopen: request.reopen ?? false)
        wish.coalesce = coalesce
        let socket = try connectSocket(wish, target: target)
        let session: Int
        do {
            session = try openChannelSession(for: client, name: "l2cap:\(target.address)/\(psm.value)", wakeMode: .bluetoothCentral,
                                             coalescing: coalesce, services: services)
        } catch {
            socket.close()
            throw error
        }
        do {
            try startOpening(session, OpenChannel(socket: socket, request: wish, wakeMode: .bluetoothCentral, opening: opening), services: services)
        } catch {
            services.component(StreamSessions.self)?.forget(session)
            throw error
        }
        services.logger.info("l2cap: session \(session): \(client) opening a channel to \(target.address) (\(target.addressType)) PSM \(psm)")
    }

    private func connectSocket(_ wish: ChannelRequest, target: L2CAPTarget) throws(ProtocolError) -> BluetoothSocket {
        guard let address = BluetoothDeviceAddress(target.address) else {
            throw ProtocolError(.invalidArgument, "'\(target.address)' is not a Bluetooth address")
        }
        let type = BluetoothAddressType(blueZ: target.addressType) ?? .lePublic
        let source = target.adapterAddress.flatMap(BluetoothDeviceAddress.init)
        do {
            return try BluetoothSocket.connect(to: address, type: type, psm: wish.psm, from: source, options: wish.options)
        } catch {
            throw protocolError(error, "cannot open an L2CAP channel to \(target.address) PSM \(wish.psm.value)")
        }
    }

    /// Waits (on the loop) for the connect to finish: `.writable` or an error.
    private func startOpening<S: DaemonServices>(_ session: Int, _ channel: OpenChannel, services: isolated S) throws(ProtocolError) {
        channel.watch = try watchConnect(channel.socket, services: services) { l2cap, services in
            guard let channel = l2cap.channels[session], channel.opening != nil else { return }
            l2cap.finishOpening(session, channel, services: services)
        }
        channels[session] = channel
    }

    /// The connect finished: the channel is open (its opener is answered, and
    /// the stream layer starts reading it), or it failed (the opener gets the
    /// error; a reopen waits for the next time the link comes back).
    private func finishOpening<S: DaemonServices>(_ session: Int, _ channel: OpenChannel, services: isolated S) {
        guard let opening = channel.opening, let streams = services.component(StreamSessions.self) else { return }
        channel.opening = nil
        if let watch = channel.watch { services.loop.removeWatch(watch) }
        channel.watch = nil
        let replyTo = opening.connectionID.flatMap { services.connection($0) }
        if let failure = channel.socket.connectResult() {
            let error = protocolError(failure, "cannot open an L2CAP channel to \(channel.request.peer) PSM \(channel.request.psm.value)")
            services.logger.info("l2cap: session \(session): \(error.message)")
            channel.socket.close()
            channels[session] = nil
            if opening.requestID == nil && opening.connectionID == nil {
                waiting[session] = channel.request  // a reopen: try again when the link next returns
                return
            }
            streams.forget(session)
            if let replyTo, let id = opening.requestID { services.send(ProtocolError(error.code, error.message, id: id), to: replyTo) }
            return
        }
        let endpoint = opened(session, channel, services: services)
        streams.record(services: services)  // a channel's session outlives vigild: the next one reopens or ends it
        if opening.connectionID != nil && channel.request.reopen { saveIntent(of: channel.request.client, services: services) }
        let info = info(session, channel)
        if opening.connectionID == nil {
            services.logger.info("l2cap: session \(session) reopened: \(channel.request.peer) PSM \(channel.request.psm)")
            deliver(L2CAPEventKind.reopened, info.attributes, mode: channel.wakeMode, to: channel.request.client, services: services)
        } else if let replyTo {
            services.send(L2CAPChannelOpened(channel: info), id: opening.requestID, to: replyTo)
        }
        attachChannel(endpoint, to: session, services: services)
    }

    /// An open channel's sizes and drop counting, as an endpoint.
    private func opened<S: DaemonServices>(_ session: Int, _ channel: OpenChannel, services: isolated S) -> BluetoothStreamEndpoint {
        channel.sendMTU = (try? channel.socket.sendMTU()) ?? 23
        channel.receiveMTU = (try? channel.socket.receiveMTU()) ?? Int(Self.defaultReceiveMTU)
        do {
            try channel.socket.countDrops()
        } catch {
            services.logger.warning("l2cap: session \(session): cannot count dropped SDUs (\(error)); loss in the kernel would go unreported")
        }
        services.logger.info("l2cap: session \(session) open: \(channel.request.peer) PSM \(channel.request.psm), MTU send \(channel.sendMTU) receive \(channel.receiveMTU)")
        return BluetoothStreamEndpoint(
            l2cap: channel.socket, session: session, sendMTU: channel.sendMTU, receiveMTU: channel.receiveMTU, logger: services.logger
        ) { [unowned self] in
            if self.channels[session] === channel { self.channels[session] = nil }
        }
    }

    func info(_ session: Int, _ channel: OpenChannel) -> L2CAPChannelInfo {
        L2CAPChannelInfo(session: session, peer: channel.request.peer, psm: Int(channel.request.psm.value),
                         sendMTU: channel.sendMTU, receiveMTU: channel.receiveMTU)
    }

    // MARK: The end of a channel

    /// The channel ended by itself (the peer closed it, the link went, a read
    /// or write failed): what it received is announced, then the holder is
    /// told. A channel opened with `reopen` whose client still wants the
    /// link waits for the link to return (`willReopen`); any other ends its session.
    func endChannel<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        guard let streams = services.component(StreamSessions.self), streams.contains(session) else { return }
        let request = channels[session]?.request ?? waiting[session]
        streams.announce(session, all: true, services: services)
        streams.detach(session, services: services)
        channels[session] = nil
        guard let request, request.reopen, services.bluetoothLinks?.wantsLink(request.client, address: request.peer) == true else {
            return finishChannel(session, reason: reason, services: services)
        }
        // The socket cannot say whether the peer closed the channel (the link
        // stays up: nothing to wait for) or the link went: both are
        // ECONNRESET. BlueZ reports a lost link shortly after; decide then.
        waiting[session] = request
        undecided[session] = reason
        services.logger.info("l2cap: session \(session) closed: \(reason); it reopens when the link comes back, unless the link stayed up")
        _ = services.loop.schedule(after: .seconds(2), services.callback(L2CAPComponent.self) { l2cap, services in
            l2cap.decideReopen(session, services: services)
        })
    }

    /// Two seconds after a `reopen` channel closed: with its link still up the
    /// peer closed it, and it ends; otherwise its holder hears it waits.
    func decideReopen<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard let reason = undecided.removeValue(forKey: session), let streams = services.component(StreamSessions.self),
              streams.contains(session) else { return }
        if let request = waiting[session], services.bluetoothLinks?.linkIsUp(request.peer) == true {
            waiting[session] = nil
            return finishChannel(session, reason: "\(reason); the link stayed up: the peer closed it", services: services)
        }
        streams.notifyClosed(session, reason: reason, willReopen: true, services: services)
    }

    /// The session ends for good: its log retires once its events are
    /// acknowledged, and a `reopen` channel leaves the state file.
    func finishChannel<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        services.component(StreamSessions.self)?.end(session, reason: reason, willReopen: false, services: services)
    }

    /// A link came up for `client`: its channels waiting for that peripheral open again.
    func linkConnected<S: DaemonServices>(_ address: String, client: BluetoothClient, services: isolated S) {
        guard let links = services.bluetoothLinks, let streams = services.component(StreamSessions.self) else { return }
        for (session, request) in waiting.sorted(by: { $0.key < $1.key }) where request.client == client && request.peer == address {
            waiting[session] = nil
            if undecided[session] != nil { decideReopen(session, services: services) }  // told before reopened
            guard streams.contains(session) else { continue }
            do throws(ProtocolError) {
                let target = try links.l2capTarget(client, address: address)
                let socket = try connectSocket(request, target: target)
                try startOpening(session, OpenChannel(socket: socket, request: request, wakeMode: .bluetoothCentral, opening: .init()),
                                 services: services)
            } catch {
                services.logger.info("l2cap: session \(session): cannot reopen yet (\(error)); waiting for the link again")
                waiting[session] = request
            }
        }
    }

    // MARK: Peripheral role

    /// Publishing is idempotent: a PSM the client published already comes
    /// back, and so does one it published without a PSM when it asks again
    /// without one and with the same options (an app relaunched, or
    /// reconnected after a daemon restart, gets the PSM it advertised before).
    func publish<S: DaemonServices>(_ request: PublishL2CAPChannel, client: BluetoothClient, services: isolated S) throws(ProtocolError) -> Int {
        let wanted = try request.psm.map { value throws(ProtocolError) in try psm(value) }
        let options = try options(security: request.security, receiveMTU: request.receiveMTU)
        let coalesce = try coalescing(request.coalesceMilliseconds)
        if let wanted, let existing = published[wanted.value] {
            if existing.client == client { return Int(wanted.value) }
            throw ProtocolError(.invalidState, "PSM \(wanted.value) is already published by another client")
        }
        if wanted == nil, let existing = published.sorted(by: { $0.key < $1.key }).first(where: {
            $0.value.client == client && $0.value.dynamic && $0.value.options == options && $0.value.coalesce == coalesce
        }) {
            return Int(existing.key)
        }
        return Int(try listen(wanted, options: options, coalesce: coalesce, client: client, dynamic: wanted == nil, services: services))
    }

    /// A listening socket on `wanted` (nil: a free dynamic PSM), watched for
    /// centrals' channels; returns the PSM.
    func listen<S: DaemonServices>(
        _ wanted: L2CAPPSM?, options: L2CAPOptions, coalesce: Duration, client: BluetoothClient, dynamic: Bool, services: isolated S
    ) throws(ProtocolError) -> UInt16 {
        let listener: BluetoothSocket
        let bound: L2CAPPSM
        do {
            listener = try BluetoothSocket.listen(psm: wanted, options: options)
            bound = try listener.localPSM()
        } catch {
            throw protocolError(error, "cannot publish PSM \(wanted.map { "\($0.value)" } ?? "(dynamic)")")
        }
        let entry = PublishedPSM(client: client, listener: listener, options: options, dynamic: dynamic)
        entry.coalesce = coalesce
        let psm = bound.value
        do {
            entry.watch = try services.loop.watch(
                listener.fd, for: .readable, services.watchCallback(L2CAPComponent.self) { l2cap, _, services in
                    l2cap.acceptChannels(psm, services: services)
                })
        } catch {
            listener.close()
            throw ProtocolError(.internalError, "cannot watch the listener: \(error)")
        }
        published[psm] = entry
        services.logger.info("l2cap: \(client) published PSM \(bound)")
        return psm
    }

    func unpublish<S: DaemonServices>(_ psm: Int, client: BluetoothClient, services: isolated S) throws(ProtocolError) {
        guard let value = UInt16(exactly: psm), let entry = published[value], entry.client == client else {
            throw ProtocolError(.notFound, "PSM \(psm) is not published by this client")
        }
        closeListener(value, entry, services: services)
    }

    private func closeListener<S: DaemonServices>(_ psm: UInt16, _ entry: PublishedPSM, services: isolated S) {
        if let watch = entry.watch { services.loop.removeWatch(watch) }
        entry.listener.close()
        published[psm] = nil
        services.logger.info("l2cap: \(entry.client) unpublished PSM \(psm)")
    }

    /// A client is gone for good (a control connection closed, an app
    /// force-quit): its PSMs stop listening.
    func clientEnded<S: DaemonServices>(_ client: BluetoothClient, services: isolated S) {
        for (psm, entry) in published where entry.client == client {
            closeListener(psm, entry, services: services)
        }
        if case .app = client { services.scheduleSave() }
    }

    /// Channels centrals opened to a published PSM: each becomes a session of
    /// the publisher, announced with `ble.l2cap.incoming` (which wakes or
    /// relaunches an app) before any of its data.
    private func acceptChannels<S: DaemonServices>(_ psm: UInt16, services: isolated S) {
        guard let entry = published[psm], let streams = services.component(StreamSessions.self) else { return }
        while true {
            let accepted: (socket: BluetoothSocket, peer: BluetoothDeviceAddress, type: BluetoothAddressType)?
            do {
                accepted = try entry.listener.acceptL2CAP()
            } catch {
                services.logger.warning("l2cap: accept on PSM \(psm) failed: \(error)")
                return
            }
            guard let accepted else { return }
            let client = entry.client
            var request = ChannelRequest(client: client, peer: accepted.peer.description, psm: L2CAPPSM(bound: psm),
                                         options: entry.options, reopen: false)
            request.coalesce = entry.coalesce
            let session: Int
            do {
                session = try openChannelSession(for: client, name: "l2cap:\(accepted.peer)/\(psm)", wakeMode: .bluetoothPeripheral,
                                                 coalescing: entry.coalesce, services: services)
            } catch {
                services.logger.error("l2cap: no session for a channel from \(accepted.peer) on PSM \(psm): \(error.message); refused")
                accepted.socket.close()
                continue
            }
            let channel = OpenChannel(socket: accepted.socket, request: request, wakeMode: .bluetoothPeripheral, opening: nil)
            channels[session] = channel
            let endpoint = opened(session, channel, services: services)
            streams.record(services: services)
            deliver(L2CAPEventKind.incoming, info(session, channel).attributes, mode: .bluetoothPeripheral, to: client, services: services)
            attachChannel(endpoint, to: session, services: services)
        }
    }
}

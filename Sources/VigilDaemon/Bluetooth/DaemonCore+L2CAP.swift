import VigilAccessories
import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// L2CAP channels: requests, opening, and the end of a channel. A channel is
/// a session (`SessionTable.openStream`): what it receives goes into the
/// session's log and reaches the holder as `session.data` events (or frames
/// for vigilctl), woken by `bluetooth-central` or `bluetooth-peripheral`;
/// the app writes with `write` and closes with `closeSession`.
/// Reading and writing are in `DaemonCore+L2CAPTraffic.swift`.
extension DaemonCore {
    /// The receive MTU a channel asks for unless told otherwise: SDUs of
    /// 2 KiB make few reads per second at LE's rates.
    static let defaultL2CAPReceiveMTU: UInt16 = 2048

    /// Handles `message` if it is an L2CAP request; false if it is not one.
    func handleL2CAPRequest(_ message: IncomingMessage, client: BluetoothClient, connection: ClientConnection,
                            central: BluetoothCentral) throws(ProtocolError) -> Bool {
        let id = message.id
        do throws(ProtocolError) {
            switch message.type {
            case OpenL2CAPChannel.type:
                let request: OpenL2CAPChannel = try message.decode()
                try openChannel(request, client: client, central: central, opening: .init(requestID: id, connectionID: connection.id))
            case PublishL2CAPChannel.type:
                let request: PublishL2CAPChannel = try message.decode()
                let psm = try publish(request, client: client)
                saveL2CAPIntent(of: client)  // in the state file before the app can advertise the PSM
                send(L2CAPChannelPublished(psm: psm), id: id, to: connection)
            case ListL2CAP.type:
                send(l2capList(for: client), id: id, to: connection)
            case UnpublishL2CAPChannel.type:
                let request: UnpublishL2CAPChannel = try message.decode()
                try unpublish(request.psm, client: client)
                saveL2CAPIntent(of: client)
                send(Done(), id: id, to: connection)
            default:
                return false
            }
        } catch {
            throw ProtocolError(error.code, error.message, id: id)
        }
        return true
    }

    /// `ble.l2cap`: a control client sees every client's PSMs and channels, an app its own.
    func l2capList(for client: BluetoothClient) -> L2CAPList {
        let sees: (BluetoothClient) -> Bool = { owner in
            if case .control = client { return true }
            return owner == client
        }
        let published = l2capState.published.sorted { $0.key < $1.key }.filter { sees($0.value.client) }.map { psm, entry in
            PublishedL2CAP(psm: Int(psm), holder: "\(entry.client.sessionHolder)", security: entry.options.security?.description,
                           receiveMTU: Int(entry.options.receiveMTU ?? Self.defaultL2CAPReceiveMTU),
                           coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: entry.coalesce))
        }
        var channels: [(Int, ChannelRequest, String)] = l2capState.channels.map { ($0.key, $0.value.request, $0.value.opening == nil ? "open" : "opening") }
        channels += l2capState.waiting.filter { l2capState.channels[$0.key] == nil }.map { ($0.key, $0.value, "waiting") }
        return L2CAPList(published: published, channels: channels.filter { sees($0.1.client) }.sorted { $0.0 < $1.0 }.map { session, request, state in
            L2CAPChannelStatus(session: session, holder: "\(request.client.sessionHolder)", peer: request.peer,
                               psm: Int(request.psm.value), state: state, reopen: request.reopen)
        })
    }

    /// The wake mode of a session's events: a channel's role's, else an accessory's.
    func sessionWakeMode(_ session: Int) -> BackgroundMode {
        l2capState.wakeModes[session] ?? .externalAccessory
    }

    func isChannel(_ session: Int) -> Bool {
        l2capState.wakeModes[session] != nil
    }

    // MARK: Opening (central role)

    func options(security: String?, receiveMTU: Int?) throws(ProtocolError) -> L2CAPOptions {
        var options = L2CAPOptions(receiveMTU: Self.defaultL2CAPReceiveMTU)
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

    /// An L2CAP socket error as the protocol says it.
    func protocolError(_ error: L2CAPError, _ doing: String) -> ProtocolError {
        switch error {
        case .bluetoothUnavailable:
            l2capState.unavailable = error
            return ProtocolError(.unavailable, "\(doing): \(error)")
        case .invalidArgument:
            return ProtocolError(.invalidArgument, "\(doing): \(error)")
        case .system:
            switch error.errno {
            case .connectionRefused?: return ProtocolError(.notFound, "\(doing): \(error)")
            case .addressInUse?: return ProtocolError(.invalidState, "\(doing): \(error)")
            case .permissionDenied?: return ProtocolError(.notPermitted, "\(doing): \(error)")
            case .socketNotConnected?, .noRouteToHost?, .hostIsDown?: return ProtocolError(.notConnected, "\(doing): \(error)")
            default: return ProtocolError(.deviceError, "\(doing): \(error)")
            }
        }
    }

    private func openChannel(_ request: OpenL2CAPChannel, client: BluetoothClient, central: BluetoothCentral,
                             opening: OpenChannel.Opening) throws(ProtocolError) {
        let psm = try psm(request.psm)
        let options = try options(security: request.security, receiveMTU: request.receiveMTU)
        let coalesce = try channelCoalescing(request.coalesceMilliseconds)
        let target = try target(central, client, request.peripheral)
        var wish = ChannelRequest(client: client, peer: target.address, psm: psm, options: options, reopen: request.reopen ?? false)
        wish.coalesce = coalesce
        let socket = try connectSocket(wish, target: target)
        let record = accessoryState.sessions.openStream(holder: client.sessionHolder, name: "l2cap:\(target.address)/\(psm.value)")
        do {
            _ = try openLog(record.id)
        } catch {
            accessoryState.sessions.close(record.id)
            throw ProtocolError(.invalidState, "cannot create the channel's session log: \(error)")
        }
        l2capState.wakeModes[record.id] = .bluetoothCentral
        do {
            try startOpening(record.id, OpenChannel(socket: socket, request: wish, wakeMode: .bluetoothCentral, opening: opening))
        } catch {
            forgetChannelSession(record.id)
            throw error
        }
        logger.info("l2cap: session \(record.id): \(client) opening a channel to \(target.address) (\(target.addressType)) PSM \(psm)")
    }

    /// The central's view of the link (actor calls cannot throw typed errors).
    private func target(_ central: BluetoothCentral, _ client: BluetoothClient, _ address: String) throws(ProtocolError) -> L2CAPTarget {
        let outcome: Result<L2CAPTarget, ProtocolError> = central.assumeIsolated { central in
            do throws(ProtocolError) { return .success(try central.l2capTarget(client, address: address)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    private func connectSocket(_ wish: ChannelRequest, target: L2CAPTarget) throws(ProtocolError) -> L2CAPSocket {
        guard let address = BluetoothDeviceAddress(target.address) else {
            throw ProtocolError(.invalidArgument, "'\(target.address)' is not a Bluetooth address")
        }
        let type = BluetoothAddressType(blueZ: target.addressType) ?? .lePublic
        let source = target.adapterAddress.flatMap(BluetoothDeviceAddress.init)
        do {
            return try L2CAPSocket.connect(to: address, type: type, psm: wish.psm, from: source, options: wish.options)
        } catch {
            throw protocolError(error, "cannot open an L2CAP channel to \(target.address) PSM \(wish.psm.value)")
        }
    }

    /// Waits (on the loop) for the connect to finish: `.writable` or an error.
    private func startOpening(_ session: Int, _ channel: OpenChannel) throws(ProtocolError) {
        do {
            channel.watch = try loop.watch(channel.socket.fd, for: .writable) { [unowned self] events in
                self.assumeIsolated { $0.channelReady(session, events) }
            }
        } catch {
            channel.socket.close()
            throw ProtocolError(.internalError, "cannot watch the channel's socket: \(error)")
        }
        l2capState.channels[session] = channel
    }

    /// The connect finished: the channel is open (its opener is answered, and
    /// reading starts), or it failed (the opener gets the error; a reopen
    /// waits for the next time the link comes back).
    func finishOpening(_ session: Int, _ channel: OpenChannel) {
        guard let opening = channel.opening else { return }
        channel.opening = nil
        let replyTo = opening.connectionID.flatMap { connections[$0] }
        if let failure = channel.socket.connectResult() {
            let error = protocolError(failure, "cannot open an L2CAP channel to \(channel.request.peer) PSM \(channel.request.psm.value)")
            logger.info("l2cap: session \(session): \(error.message)")
            closeChannelSocket(session)
            if opening.requestID == nil && opening.connectionID == nil {
                l2capState.waiting[session] = channel.request  // a reopen: try again when the link next returns
                return
            }
            forgetChannelSession(session)
            if let replyTo, let id = opening.requestID { send(ProtocolError(error.code, error.message, id: id), to: replyTo) }
            return
        }
        channelOpened(session, channel)
        recordSessions()  // a channel's session outlives vigild: the next one reopens or ends it
        if opening.connectionID != nil && channel.request.reopen { saveL2CAPIntent(of: channel.request.client) }
        let info = channelInfo(session, channel)
        if opening.connectionID == nil {
            logger.info("l2cap: session \(session) reopened: \(channel.request.peer) PSM \(channel.request.psm)")
            deliverBluetoothEvent(L2CAPEventKind.reopened, info.attributes, [], mode: channel.wakeMode, to: channel.request.client)
        } else if let replyTo {
            send(L2CAPChannelOpened(channel: info), id: opening.requestID, to: replyTo)
        }
        updateChannelWatch(session, channel)
    }

    /// An open channel's sizes, drop counting and buffer.
    private func channelOpened(_ session: Int, _ channel: OpenChannel) {
        channel.sendMTU = (try? channel.socket.sendMTU()) ?? 23
        channel.receiveMTU = (try? channel.socket.receiveMTU()) ?? Int(Self.defaultL2CAPReceiveMTU)
        channel.scratch = [UInt8](repeating: 0, count: max(channel.receiveMTU, 23))
        do {
            try channel.socket.countDrops()
        } catch {
            logger.warning("l2cap: session \(session): cannot count dropped SDUs (\(error)); loss in the kernel would go unreported")
        }
        logger.info("l2cap: session \(session) open: \(channel.request.peer) PSM \(channel.request.psm), MTU send \(channel.sendMTU) receive \(channel.receiveMTU)")
    }

    func channelInfo(_ session: Int, _ channel: OpenChannel) -> L2CAPChannelInfo {
        L2CAPChannelInfo(session: session, peer: channel.request.peer, psm: Int(channel.request.psm.value),
                         sendMTU: channel.sendMTU, receiveMTU: channel.receiveMTU)
    }

    /// A session that never carried data (its open failed): gone without a trace.
    private func forgetChannelSession(_ session: Int) {
        accessoryState.logs.removeValue(forKey: session)?.log.remove()
        accessoryState.sessions.close(session)
        l2capState.wakeModes[session] = nil
    }

    // MARK: The end of a channel

    /// Closes a channel's socket (from `closePort`, whoever ends the session);
    /// writes still waiting are answered with an error. No event: the caller
    /// tells the holder.
    func closeChannelSocket(_ session: Int) {
        l2capState.waiting[session] = nil
        l2capState.undecided[session] = nil
        guard let channel = l2capState.channels.removeValue(forKey: session) else { return }
        if let watch = channel.watch { loop.removeWatch(watch) }
        channel.watch = nil
        channel.socket.close()
        for write in channel.pendingWrites {
            if let connection = connections[write.clientConnection], let id = write.requestID {
                send(ProtocolError(.invalidState, "channel (session \(session)) closed before the write completed"), id: id, to: connection)
            }
        }
        channel.pendingWrites = []
        if let opening = channel.opening, let id = opening.requestID, let connection = opening.connectionID.flatMap({ connections[$0] }) {
            send(ProtocolError(.invalidState, "the channel was closed while opening"), id: id, to: connection)
        }
    }

    /// The channel ended by itself (the peer closed it, the link went, a read
    /// failed): what it received is announced, then the holder is told. A
    /// channel opened with `reopen` whose client still wants the link waits
    /// for the link to return (`willReopen`); any other ends its session.
    func endChannel(_ session: Int, reason: String) {
        guard let channel = l2capState.channels[session], accessoryState.sessions.sessions[session] != nil else { return }
        announce(session, all: true)
        closeChannelSocket(session)
        let request = channel.request
        guard request.reopen, central?.assumeIsolated({ $0.wantsLink(request.client, address: request.peer) }) == true else {
            return finishChannel(session, wakeMode: channel.wakeMode, reason: reason)
        }
        // The socket cannot say whether the peer closed the channel (the link
        // stays up: nothing to wait for) or the link went: both are
        // ECONNRESET. BlueZ reports a lost link shortly after; decide then.
        l2capState.waiting[session] = request
        l2capState.undecided[session] = reason
        logger.info("l2cap: session \(session) closed: \(reason); it reopens when the link comes back, unless the link stayed up")
        let wakeMode = channel.wakeMode
        _ = loop.schedule(after: .seconds(2)) { [unowned self] in
            self.assumeIsolated { $0.decideReopen(session, wakeMode: wakeMode) }
        }
    }

    /// Two seconds after a `reopen` channel closed: with its link still up the
    /// peer closed it, and it ends; otherwise its holder hears it waits.
    func decideReopen(_ session: Int, wakeMode: BackgroundMode) {
        guard let reason = l2capState.undecided.removeValue(forKey: session),
              let holder = accessoryState.sessions.sessions[session]?.holder else { return }
        if let request = l2capState.waiting[session],
           central?.assumeIsolated({ $0.linkIsUp(request.peer) }) == true {
            l2capState.waiting[session] = nil
            return finishChannel(session, wakeMode: wakeMode, reason: "\(reason); the link stayed up: the peer closed it")
        }
        notifyChannelClosed(session, holder: holder, wakeMode: wakeMode, reason: reason, willReopen: true)
    }

    /// The session ends for good: its log retires once its events are acknowledged.
    func finishChannel(_ session: Int, wakeMode: BackgroundMode, reason: String) {
        guard let record = accessoryState.sessions.sessions[session] else { return }
        retireLog(session, holder: record.holder)
        accessoryState.sessions.close(session)
        recordSessions()
        scheduleSave()  // a `reopen` channel leaves the state file
        logger.info("l2cap: session \(session) closed: \(reason)")
        notifyChannelClosed(session, holder: record.holder, wakeMode: wakeMode, reason: reason, willReopen: false)
    }

    func notifyChannelClosed(_ session: Int, holder: SessionHolder, wakeMode: BackgroundMode, reason: String, willReopen: Bool) {
        switch holder {
        case let .app(app):
            let event = QueuedEvent(
                kind: AccessoryEventKind.closed,
                attributes: ["session": .number(Double(session)), "reason": .string(reason), "willReopen": .bool(willReopen)],
                wakeMode: wakeMode)
            _ = try? withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
        case let .control(connectionID):
            if let connection = connections[connectionID] {
                send(SessionClosed(session: session, reason: reason, willReopen: willReopen), to: connection)
            }
        }
    }

    /// A link came up for `client`: its channels waiting for that peripheral open again.
    func l2capLinkConnected(_ address: String, client: BluetoothClient) {
        guard let central else { return }
        for (session, request) in l2capState.waiting.sorted(by: { $0.key < $1.key })
        where request.client == client && request.peer == address {
            l2capState.waiting[session] = nil
            if l2capState.undecided[session] != nil { decideReopen(session, wakeMode: .bluetoothCentral) }  // told before reopened
            do {
                let target = try target(central, client, address)
                let socket = try connectSocket(request, target: target)
                try startOpening(session, OpenChannel(socket: socket, request: request, wakeMode: .bluetoothCentral, opening: .init()))
            } catch {
                logger.info("l2cap: session \(session): cannot reopen yet (\(error)); waiting for the link again")
                l2capState.waiting[session] = request
            }
        }
    }

    // MARK: Peripheral role

    /// Publishing is idempotent: a PSM the client published already comes
    /// back, and so does one it published without a PSM when it asks again
    /// without one and with the same options (an app relaunched, or
    /// reconnected after a daemon restart, gets the PSM it advertised before).
    private func publish(_ request: PublishL2CAPChannel, client: BluetoothClient) throws(ProtocolError) -> Int {
        let wanted = try request.psm.map { value throws(ProtocolError) in try psm(value) }
        let options = try options(security: request.security, receiveMTU: request.receiveMTU)
        let coalesce = try channelCoalescing(request.coalesceMilliseconds)
        if let wanted, let existing = l2capState.published[wanted.value] {
            if existing.client == client { return Int(wanted.value) }
            throw ProtocolError(.invalidState, "PSM \(wanted.value) is already published by another client")
        }
        if wanted == nil, let existing = l2capState.published.sorted(by: { $0.key < $1.key }).first(where: {
            $0.value.client == client && $0.value.dynamic && $0.value.options == options && $0.value.coalesce == coalesce
        }) {
            return Int(existing.key)
        }
        return Int(try listen(wanted, options: options, coalesce: coalesce, client: client, dynamic: wanted == nil))
    }

    /// A listening socket on `wanted` (nil: a free dynamic PSM), watched for
    /// centrals' channels; returns the PSM.
    func listen(_ wanted: L2CAPPSM?, options: L2CAPOptions, coalesce: Duration, client: BluetoothClient,
                dynamic: Bool) throws(ProtocolError) -> UInt16 {
        let listener: L2CAPSocket
        let bound: L2CAPPSM
        do {
            listener = try L2CAPSocket.listen(psm: wanted, options: options)
            bound = try listener.localPSM()
        } catch {
            throw protocolError(error, "cannot publish PSM \(wanted.map { "\($0.value)" } ?? "(dynamic)")")
        }
        let published = PublishedPSM(client: client, listener: listener, options: options, dynamic: dynamic)
        published.coalesce = coalesce
        do {
            published.watch = try loop.watch(listener.fd, for: .readable) { [unowned self] _ in
                self.assumeIsolated { $0.acceptChannels(bound.value) }
            }
        } catch {
            listener.close()
            throw ProtocolError(.internalError, "cannot watch the listener: \(error)")
        }
        l2capState.published[bound.value] = published
        logger.info("l2cap: \(client) published PSM \(bound)")
        return bound.value
    }

    private func unpublish(_ psm: Int, client: BluetoothClient) throws(ProtocolError) {
        guard let value = UInt16(exactly: psm), let published = l2capState.published[value], published.client == client else {
            throw ProtocolError(.notFound, "PSM \(psm) is not published by this client")
        }
        closeListener(value, published)
    }

    private func closeListener(_ psm: UInt16, _ published: PublishedPSM) {
        if let watch = published.watch { loop.removeWatch(watch) }
        published.listener.close()
        l2capState.published[psm] = nil
        logger.info("l2cap: \(published.client) unpublished PSM \(psm)")
    }

    /// A client is gone for good (a control connection closed, an app
    /// force-quit): its PSMs stop listening. An app that merely died keeps
    /// them: the next incoming channel relaunches it.
    func l2capClientEnded(_ client: BluetoothClient) {
        for (psm, published) in l2capState.published where published.client == client {
            closeListener(psm, published)
        }
        if case .app = client { scheduleSave() }
    }

    /// Channels centrals opened to a published PSM: each becomes a session of
    /// the publisher, announced with `ble.l2cap.incoming` (which wakes or
    /// relaunches an app) before any of its data.
    private func acceptChannels(_ psm: UInt16) {
        guard let published = l2capState.published[psm] else { return }
        while true {
            let accepted: (socket: L2CAPSocket, peer: BluetoothDeviceAddress, type: BluetoothAddressType)?
            do {
                accepted = try published.listener.accept()
            } catch {
                logger.warning("l2cap: accept on PSM \(psm) failed: \(error)")
                return
            }
            guard let accepted else { return }
            let client = published.client
            var request = ChannelRequest(client: client, peer: accepted.peer.description, psm: L2CAPPSM(bound: psm),
                                         options: published.options, reopen: false)
            request.coalesce = published.coalesce
            let record = accessoryState.sessions.openStream(holder: client.sessionHolder, name: "l2cap:\(accepted.peer)/\(psm)")
            do {
                _ = try openLog(record.id)
            } catch {
                logger.error("l2cap: cannot create a session log for a channel from \(accepted.peer) on PSM \(psm): \(error); refused")
                accessoryState.sessions.close(record.id)
                continue
            }
            l2capState.wakeModes[record.id] = .bluetoothPeripheral
            let channel = OpenChannel(socket: accepted.socket, request: request, wakeMode: .bluetoothPeripheral, opening: nil)
            l2capState.channels[record.id] = channel
            channelOpened(record.id, channel)
            recordSessions()
            deliverBluetoothEvent(L2CAPEventKind.incoming, channelInfo(record.id, channel).attributes, [], mode: .bluetoothPeripheral, to: client)
            updateChannelWatch(record.id, channel)
        }
    }
}

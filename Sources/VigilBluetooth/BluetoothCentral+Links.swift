import VigilDBus
import VigilProtocol
import VigilSystem

/// Links: a connect request never times out and is retried by the daemon,
/// with backoff, through InProgress, aborts, link loss and BlueZ restarts.
extension BluetoothCentral {
    func wanted(_ address: String) -> Bool {
        clients.values.contains { $0.connects.contains(address) }
    }

    /// Brings the link to what clients want: up while any wants it, down
    /// (if vigild brought it up) when none does.
    func reconcileLink(_ address: String) {
        guard bus != nil, bluezOwner != nil, !loading else { return }
        let device = self.device(address)
        // The mirror decides, whatever told it (a signal, an InterfacesAdded
        // that already says Connected, a snapshot, a re-read), and a change
        // goes through connectedChanged: the one place that announces it.
        if let device, device.connected != (links[address]?.connected ?? false) {
            connectedChanged(device)
            if !device.connected { return }  // connectedChanged reconciled again
        }
        var link = links[address] ?? Link()
        var forget = false
        defer { links[address] = forget ? nil : link }
        if wanted(address) {
            guard let device, !link.connected, !link.connecting, link.retry == nil,
                  let adapter = device.adapter.flatMap(tree.adapter(at:)), adapter.powered
            else {
                if device == nil { reconcileDiscovery() }  // find it first
                return
            }
            link.connecting = true
            // Ours from now: a client that lets go before the reply still gets the
            // link taken down (AlreadyConnected says it was someone else's).
            link.ours = true
            // Not a count: a forgotten link's late reply must not match a new one's.
            link.attempt = Int.random(in: 1...Int.max)
            let attempt = link.attempt
            let number = link.failures + 1
            link.watchdog = scheduleConnectCheck(device.path, address: address, attempt: attempt, waited: .zero)
            loop.task { await self.connect(device.path, address: address, attempt: attempt, number: number) }
        } else {
            let pending = link.connecting
            link.cancelAttempt(loop: loop)
            // Disconnect also cancels a Connect still in flight (BlueZ's doc).
            if (link.connected && link.ours) || pending, let device {
                link.ours = false
                loop.task { await self.disconnect(device.path, address: address) }
            }
            forget = !link.connected && !link.connecting
        }
    }

    /// How long a Connect call may be in flight before BlueZ's state is
    /// checked (and again as often while it stays in flight).
    static let connectCheckInterval: Duration = .seconds(5)
    /// A Connect unanswered this long while BlueZ reports the link down is
    /// cancelled and tried again (once per attempt).
    static let connectAbandonAfter: Duration = .seconds(10)

    private func connect(_ path: ObjectPath, address: String, attempt: Int, number: Int) async {
        guard let bus else { return }
        do {
            // BlueZ answers when the link is up or its own attempt failed; it
            // has no notion of "pending forever", so that is ours to do.
            _ = try await bus.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "Connect", timeout: .seconds(60))
            guard links[address]?.attempt == attempt else { return }
            await confirmConnected(path, address: address, attempt: attempt, reply: "Connect succeeded")
        } catch let error as DBusError {
            guard links[address]?.attempt == attempt else { return }
            switch error.name {
            case BlueZ.Error.alreadyConnected:
                links[address]?.ours = false
                await confirmConnected(path, address: address, attempt: attempt, reply: "BlueZ says already connected")
            case BlueZ.Error.inProgress:
                endAttempt(address)
                // Someone's attempt (maybe ours, before a restart) is under way:
                // Connected will change; check again later in case it never does.
                scheduleRetry(address, after: .seconds(2), reason: "a connect is already in progress")
            default:
                endAttempt(address)
                // Up anyway (announced by a check while the call was out): nothing to retry.
                if links[address]?.connected == true { return }
                links[address]?.failures += 1
                let delay = links[address]?.backoff ?? .seconds(1)
                scheduleRetry(address, after: delay, reason: "attempt \(number) failed: \(error.name) \(error.message)")
            }
        } catch {
            guard links[address]?.attempt == attempt else { return }
            endAttempt(address)
            log("bluetooth: \(address): attempt \(number) ended: \(error)")
        }
    }

    private func endAttempt(_ address: String) {
        links[address]?.connecting = false
        links[address]?.stopWatchdog(loop: loop)
    }

    /// BlueZ said the link is up (Connect's reply, or AlreadyConnected); its
    /// state, not the reply, decides. A mirror that missed Connected is put
    /// right by a re-read (which announces the link); a link that is not up
    /// after all is tried again, so a connect never stalls on a lost signal.
    private func confirmConnected(_ path: ObjectPath, address: String, attempt: Int, reply: String) async {
        if self.device(address)?.connected != true {
            await reread(path, interface: BlueZ.device)
        }
        guard links[address]?.attempt == attempt else { return }
        endAttempt(address)
        if let device = self.device(address), device.connected {
            connectedChanged(device)  // announces it to whoever has not heard
            reconcileLink(address)  // taken down if nobody wants it any more
        } else {
            links[address]?.failures += 1
            let delay = links[address]?.backoff ?? .seconds(1)
            scheduleRetry(address, after: delay, reason: "\(reply) but BlueZ reports it not connected")
        }
    }

    /// While a Connect call is in flight: read the device afresh (a Connected
    /// the signals did not bring is announced by that) and say how long it has
    /// been, then check again.
    private func scheduleConnectCheck(_ path: ObjectPath, address: String, attempt: Int, waited: Duration) -> TimerID {
        let interval = Self.connectCheckInterval
        return loop.schedule(after: interval) { [weak self] in
            self?.assumeIsolated { central in
                guard central.links[address]?.attempt == attempt, central.links[address]?.connecting == true else { return }
                central.loop.task { await central.checkPendingConnect(path, address: address, attempt: attempt, waited: waited + interval) }
            }
        }
    }

    private func checkPendingConnect(_ path: ObjectPath, address: String, attempt: Int, waited: Duration) async {
        await reread(path, interface: BlueZ.device)
        guard links[address]?.attempt == attempt, links[address]?.connecting == true else { return }
        let connected = self.device(address)?.connected ?? false
        log("bluetooth: \(address): Connect still unanswered after \(waited); BlueZ reports Connected=\(connected)")
        links[address]?.watchdog = connected ? nil : scheduleConnectCheck(path, address: address, attempt: attempt, waited: waited)
        if !connected && links[address]?.needsDiscovery == false {
            // Seen in the lab: BlueZ's Connect pending for good while the peer
            // advertised. Discovery makes the controller see it.
            links[address]?.needsDiscovery = true
            reconcileDiscovery()
        }
        if !connected && waited >= Self.connectAbandonAfter && waited - Self.connectCheckInterval < Self.connectAbandonAfter {
            // Seen in the lab: after a peer dropped the link, BlueZ's next
            // Connect went unanswered for good while the peer advertised.
            // Disconnect cancels a pending Connect (BlueZ's documented way);
            // the cancelled call then fails, and that failure tries again.
            log("bluetooth: \(address): cancelling the Connect unanswered for \(waited) with the link down, to try again")
            _ = try? await bus?.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "Disconnect", timeout: .seconds(10))
        }
    }

    private func scheduleRetry(_ address: String, after delay: Duration, reason: String) {
        guard wanted(address), links[address] != nil else { return }
        log("bluetooth: \(address): \(reason); trying again in \(delay)")
        links[address]?.retry = loop.schedule(after: delay) { [weak self] in
            self?.assumeIsolated { central in
                central.links[address]?.retry = nil
                central.reconcileLink(address)
            }
        }
    }

    private func disconnect(_ path: ObjectPath, address: String) async {
        log("bluetooth: \(address): no client wants the link any more; disconnecting")
        _ = try? await bus?.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "Disconnect", timeout: .seconds(10))
    }

    /// Device1.Connected changed (or a Connect call reported success).
    func connectedChanged(_ device: DeviceView) {
        let address = device.address
        if device.connected {
            let wasUp = links[address]?.connected ?? false
            links[address, default: Link()].connected = true
            links[address]?.failures = 0
            if let retry = links[address]?.retry { loop.cancelTimer(retry) }
            links[address]?.retry = nil
            if !wasUp { log("bluetooth: \(address): connected") }
            if links[address]?.needsDiscovery == true {
                links[address]?.needsDiscovery = false
                reconcileDiscovery()
            }
            for (client, state) in clients where state.connects.contains(address) && !state.announced.contains(address) {
                clients[client]?.announced.insert(address)
                emit(.connected(peripheral: address, adapter: device.adapter.flatMap(tree.adapter(at:))?.name), to: client)
            }
            if device.servicesResolved { servicesResolved(device) }
        } else if links[address]?.connected == true {
            linkWentDown(address, reason: device.properties["DisconnectReason"]?.string ?? "the link was lost")
            reconcileLink(address)
        }
    }

    /// The link is down: tell who was told it was up; their connect requests
    /// stay pending, so the daemon brings it back.
    func linkWentDown(_ address: String, reason: String) {
        let adapter = linkAdapterName(address)
        links[address]?.connected = false
        links[address]?.ours = false
        log("bluetooth: \(address): disconnected (\(reason))")
        for (path, state) in notify where state.address == address {
            state.close(loop: loop, path: path)
            notify[path] = nil
        }
        for (client, state) in clients where state.announced.contains(address) {
            clients[client]?.announced.remove(address)
            emit(.disconnected(peripheral: address, reason: reason, willReconnect: state.connects.contains(address), adapter: adapter), to: client)
        }
    }

    /// ServicesResolved: the GATT tree is ready. Waiting discoveries go on,
    /// and subscriptions are (re)started: after every reconnect, with no app action.
    func servicesResolved(_ device: DeviceView) {
        for waiter in resolvedWaiters.removeValue(forKey: device.address) ?? [] {
            loop.cancelTimer(waiter.timer)
            waiter.continuation.resume(returning: true)
        }
        reconcileNotifications(device.address)
    }

    // MARK: Requests

    /// `adapter`: the request's (a name or address), nil for the default.
    /// One adapter per peripheral: a client asking for it through another
    /// adapter than the one it is wanted through is refused, never moved.
    public func connect(_ client: BluetoothClient, address rawAddress: String, adapter selector: String? = nil) throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        let choice = try chooseAdapter(selector)
        let mine = resolvedChoice(choice)
        for (other, state) in clients where state.connects.contains(address) {
            let theirs = resolvedChoice(state.connectAdapters[address])
            guard theirs != mine else { continue }
            let name = theirs.flatMap { adapterView($0)?.name ?? adapterNames[$0] } ?? theirs ?? "the default adapter"
            throw ProtocolError(
                .invalidState,
                other == client
                    ? "\(address) is already wanted through \(name); disconnect it first"
                    : "\(address) is wanted through \(name) by another client; a peripheral is used through one adapter at a time")
        }
        clients[client, default: CentralClientState()].connects.insert(address)
        clients[client]?.connectAdapters[address] = choice
        adapterChosen(choice)
        if links[address]?.connected == true, let device = self.device(address), device.connected {
            connectedChanged(device)  // announces it to this client
        }
        reconcileLink(address)
    }

    public func cancelConnection(_ client: BluetoothClient, address rawAddress: String) throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        let adapter = linkAdapterName(address)  // before this client lets go of it
        guard clients[client]?.connects.remove(address) != nil else { return }
        clients[client]?.connectAdapters[address] = nil
        let subscribed = clients[client]?.subscriptions.keys.filter { $0.peripheral == address } ?? []
        for path in subscribed { clients[client]?.subscriptions[path] = nil }
        if clients[client]?.announced.remove(address) != nil {
            emit(.disconnected(peripheral: address, reason: "cancelled by the app", willReconnect: false, adapter: adapter), to: client)
        }
        reconcileNotifications(address)
        reconcileLink(address)
        reconcileDiscovery()
    }

    static func address(_ text: String) throws(ProtocolError) -> String {
        let address = text.uppercased()
        let parts = address.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else {
            throw ProtocolError(.invalidArgument, "'\(text)' is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return address
    }
}

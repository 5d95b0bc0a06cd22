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
        var link = links[address] ?? Link()
        var forget = false
        defer { links[address] = forget ? nil : link }
        guard bus != nil, bluezOwner != nil, !loading else { return }
        let device = tree.device(address: address)
        link.connected = device?.connected ?? false
        if wanted(address) {
            guard let device, !link.connected, !link.connecting, link.retry == nil,
                  let adapter = tree.device(address: address)?.adapter.flatMap(tree.adapter(at:)), adapter.powered
            else {
                if device == nil { reconcileDiscovery() }  // find it first
                return
            }
            link.connecting = true
            let attempt = link.failures + 1
            Task { await self.connect(device.path, address: address, attempt: attempt) }
        } else {
            link.cancelAttempt(loop: loop)
            if link.connected && link.ours, let device {
                link.ours = false
                Task { await self.disconnect(device.path, address: address) }
            }
            forget = !link.connected && !link.connecting
        }
    }

    private func connect(_ path: ObjectPath, address: String, attempt: Int) async {
        guard let bus else { return }
        do {
            // BlueZ answers when the link is up or its own attempt failed; it
            // has no notion of "pending forever", so that is ours to do.
            _ = try await bus.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "Connect", timeout: .seconds(60))
            links[address]?.connecting = false
            links[address]?.ours = true
            links[address]?.failures = 0
            if let device = tree.device(address: address), device.connected { connectedChanged(device) }
        } catch let error as DBusError {
            links[address]?.connecting = false
            switch error.name {
            case BlueZ.Error.alreadyConnected:
                links[address]?.failures = 0
                if let device = tree.device(address: address) { connectedChanged(device) }
            case BlueZ.Error.inProgress:
                // Someone's attempt (maybe ours, before a restart) is under way:
                // Connected will change; check again later in case it never does.
                scheduleRetry(address, after: .seconds(2), reason: "a connect is already in progress")
            default:
                links[address]?.failures += 1
                let delay = links[address]?.backoff ?? .seconds(1)
                scheduleRetry(address, after: delay, reason: "attempt \(attempt) failed: \(error.name) \(error.message)")
            }
        } catch {
            links[address]?.connecting = false
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
            for (client, state) in clients where state.connects.contains(address) && !state.announced.contains(address) {
                clients[client]?.announced.insert(address)
                emit(.connected(peripheral: address), to: client)
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
        links[address]?.connected = false
        links[address]?.ours = false
        log("bluetooth: \(address): disconnected (\(reason))")
        for (path, state) in notify where state.address == address {
            state.close(loop: loop, path: path)
            notify[path] = nil
        }
        for (client, state) in clients where state.announced.contains(address) {
            clients[client]?.announced.remove(address)
            emit(.disconnected(peripheral: address, reason: reason, willReconnect: state.connects.contains(address)), to: client)
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

    public func connect(_ client: BluetoothClient, address rawAddress: String) throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        clients[client, default: CentralClientState()].connects.insert(address)
        if links[address]?.connected == true, let device = tree.device(address: address), device.connected {
            connectedChanged(device)  // announces it to this client
        }
        reconcileLink(address)
    }

    public func cancelConnection(_ client: BluetoothClient, address rawAddress: String) throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        guard clients[client]?.connects.remove(address) != nil else { return }
        let subscribed = clients[client]?.subscriptions.keys.filter { $0.peripheral == address } ?? []
        for path in subscribed { clients[client]?.subscriptions[path] = nil }
        if clients[client]?.announced.remove(address) != nil {
            emit(.disconnected(peripheral: address, reason: "cancelled by the app", willReconnect: false), to: client)
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

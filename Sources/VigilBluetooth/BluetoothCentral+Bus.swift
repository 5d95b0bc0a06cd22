import Glibc
import VigilDBus
import VigilProtocol
import VigilSystem

/// The bus connection and the mirror: kept current by signals, rebuilt from
/// GetManagedObjects whenever BlueZ (re)appears or the bus connection is new.
extension BluetoothCentral {
    /// After the bus socket appeared, a first attempt can be refused until its
    /// server listens: this many more, this far apart, then wait for the next change.
    static let busFollowUpDelays: [Duration] = [.milliseconds(250), .seconds(1), .seconds(4)]

    func connectBus() async {
        guard !stopped, bus == nil, !connectingBus else { return }
        connectingBus = true
        defer { connectingBus = false }
        busGeneration += 1
        let generation = busGeneration
        do {
            let connection: DBusConnection
            if let busAddress {
                connection = try await DBusConnection.open(address: busAddress, on: loop)
            } else {
                connection = try await DBusConnection.system(on: loop)
            }
            await connection.onDisconnect { [weak self] (error: DBusError) in
                guard let self else { return }
                self.assumeIsolated { $0.busLost(generation, error) }
            }
            // Signals first, then the snapshot: nothing falls between them.
            _ = try await connection.subscribe(to: MatchRule(sender: BlueZ.service)) { [weak self] message in
                self?.assumeIsolated { $0.bluezSignal(message) }
            }
            _ = try await connection.subscribe(
                to: MatchRule(
                    sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                    arg0: BlueZ.service)
            ) { [weak self] message in
                self?.assumeIsolated { $0.bluezOwnerChanged(message) }
            }
            bus = connection
            busProblem = nil
            stopWaitingForBus()
            reconnectDelay = .milliseconds(500)
            busUnavailableLogged = false
            log("bluetooth: connected to the system bus")
            let owner = try? await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetNameOwner", arguments: [.string(BlueZ.service)], timeout: .seconds(5))
            if let name = owner?.first?.string {
                await bluezAppeared(owner: name)
            } else {
                log("bluetooth: bluetoothd is not running; waiting for it")
                stateMayHaveChanged()
            }
        } catch {
            // Said once per outage, not every retry: a machine without a system
            // bus (the demo, a container) would otherwise log forever.
            waitForBus(after: error)
        }
    }

    /// No bus: waits for its socket to appear (inotify on its directory, see
    /// `PathWatcher`), so an idle daemon on a machine without a system bus
    /// is never woken. Only an address with no socket file (abstract, tcp)
    /// is retried on a timer, backing off to every 10 s.
    private func waitForBus(after error: any Error) {
        guard !stopped else { return }
        busProblem = (error as? DBusError)?.message ?? "\(error)"
        let address = busAddress ?? DBusAddress.system
        if busWatchers.isEmpty {
            busWatchers = DBusAddress.socketPaths(address).compactMap { path in
                try? PathWatcher(path: path, on: loop) { [weak self] in
                    self?.assumeIsolated { $0.busSocketChanged() }
                }
            }
        }
        // Said once per outage, not every attempt.
        if !busUnavailableLogged {
            let how = busWatchers.isEmpty
                ? "retrying, at most every 10 s"
                : "waiting for \(busWatchers.map(\.path).joined(separator: " or ")) to appear"
            log("bluetooth: cannot use the system bus (\(error)); \(how)")
            busUnavailableLogged = true
        }
        guard busRetry == nil else { return }
        let delay: Duration
        if busWatchers.isEmpty {
            delay = reconnectDelay
            reconnectDelay = min(reconnectDelay * 2, .seconds(10))
        } else if busFollowUps < Self.busFollowUpDelays.count, busWatchers.contains(where: { access($0.path, F_OK) == 0 }) {
            // The socket is there but refused us: its server may not listen yet.
            delay = Self.busFollowUpDelays[busFollowUps]
            busFollowUps += 1
        } else {
            return  // the watchers call when something changes
        }
        busRetry = loop.schedule(after: delay) { [weak self] in
            self?.assumeIsolated { central in
                central.busRetry = nil
                central.loop.task { await central.connectBus() }
            }
        }
    }

    /// Something happened to the bus socket's path (it appeared, changed, or
    /// its directory did): try now, with a few follow-ups.
    private func busSocketChanged() {
        guard bus == nil, !stopped else { return }
        busFollowUps = 0
        if let busRetry { loop.cancelTimer(busRetry) }
        busRetry = nil
        loop.task { await self.connectBus() }
    }

    func stopWaitingForBus() {
        for watcher in busWatchers { watcher.cancel() }
        busWatchers = []
        if let busRetry { loop.cancelTimer(busRetry) }
        busRetry = nil
        busFollowUps = Self.busFollowUpDelays.count
    }

    private func busLost(_ generation: Int, _ error: DBusError) {
        guard generation == busGeneration else { return }
        log("bluetooth: lost the system bus (\(error.message)); reconnecting")
        bus = nil
        bluezVanished()
        // Once now; if the bus is restarting, its new socket's appearance (or
        // a follow-up) brings the next attempt.
        busFollowUps = 0
        loop.task { await self.connectBus() }
    }

    private func bluezOwnerChanged(_ message: DBusMessage) {
        guard message.member == "NameOwnerChanged", message.body.count == 3,
              message.body[0].string == BlueZ.service, let newOwner = message.body[2].string else { return }
        if newOwner.isEmpty {
            log("bluetooth: bluetoothd left the bus; every link, scan and subscription will be re-established when it returns")
            bluezVanished()
        } else if newOwner != bluezOwner {
            if bluezOwner != nil { bluezVanished() }
            log("bluetooth: bluetoothd is on the bus (\(newOwner)); loading its objects")
            loop.task { await self.bluezAppeared(owner: newOwner) }
        }
    }

    func bluezAppeared(owner: String) async {
        guard let bus else { return }
        bluezOwner = owner
        loading = true
        signalsWhileLoading = []
        let reply: [DBusValue]
        do {
            reply = try await bus.call(
                destination: BlueZ.service, path: BlueZ.root, interface: BlueZ.objectManager,
                member: "GetManagedObjects", timeout: .seconds(10))
        } catch {
            loading = false
            log("bluetooth: GetManagedObjects failed (\(error)); retrying")
            loop.schedule(after: .seconds(1)) { [weak self] in
                guard let self else { return }
                self.loop.task { await self.retryLoad(owner) }
            }
            return
        }
        guard bluezOwner == owner else { return }  // it restarted meanwhile
        tree = BlueZObjectTree(managedObjects: reply.first ?? .array(elementSignature: "{oa{sa{sv}}}", []))
        loading = false
        // Signals that raced the reply: applying one already in the snapshot changes nothing.
        let raced = signalsWhileLoading
        signalsWhileLoading = []
        for message in raced { applySignal(message) }
        log("bluetooth: mirror loaded: \(tree.adapters.count) adapter(s), \(tree.devices.count) device(s)")
        pinDefaultAdapter()
        stateMayHaveChanged()
        reconcileEverything()
        // A bluetoothd that (re)appeared has no agent: register ours again.
        loop.task { await self.registerAgent() }
        loop.task { await self.registerSerialServices() }
        if let peripheral { loop.task { await peripheral.bluezReady() } }
    }

    private func retryLoad(_ owner: String) async {
        guard bluezOwner == owner, !loading else { return }
        await bluezAppeared(owner: owner)
    }

    /// BlueZ is gone (restart, crash, or our bus connection dropped): its
    /// objects, links and notify sessions went with it. What clients asked
    /// for stays, and is redone once it is back.
    func bluezVanished() {
        bluezOwner = nil
        loading = false
        let connected = links.filter { $0.value.connected }.map(\.key)
        tree = BlueZObjectTree()
        agentGone()
        discoveries = [:]
        for (path, state) in notify { state.close(loop: loop, path: path) }
        notify = [:]
        for address in connected { linkWentDown(address, reason: "bluetoothd stopped") }
        for address in links.keys { links[address]?.cancelAttempt(loop: loop) }
        peripheral?.assumeIsolated { $0.bluezGone() }
        stateMayHaveChanged()
    }

    private func bluezSignal(_ message: DBusMessage) {
        guard let bluezOwner, message.sender == bluezOwner else { return }
        if loading {
            signalsWhileLoading.append(message)
            return
        }
        applySignal(message)
    }

    /// Applies one of BlueZ's signals to the mirror, then reacts to it.
    private func applySignal(_ message: DBusMessage) {
        guard let path = message.path else { return }
        switch (message.interface, message.member) {
        case (BlueZ.objectManager, "InterfacesAdded"):
            guard message.body.count == 2, let object = message.body[0].objectPath else { return }
            tree.interfacesAdded(object, message.body[1])
            objectAppeared(object, interfaces: Set(message.body[1].dictionaryStringKeyed?.keys.map { $0 } ?? []))
        case (BlueZ.objectManager, "InterfacesRemoved"):
            guard message.body.count == 2, let object = message.body[0].objectPath else { return }
            let device = tree.device(at: object)
            let interfaces = message.body[1].strings ?? []
            tree.interfacesRemoved(object, interfaces)
            objectRemoved(object, device: device, adapterRemoved: interfaces.contains(BlueZ.adapter))
        case (BlueZ.properties, "PropertiesChanged"):
            guard message.body.count >= 2, let interface = message.body[0].string else { return }
            let changed = message.body[1].dictionaryStringVariant ?? [:]
            let before = tree.properties(path, interface)
            tree.propertiesChanged(
                path, interface: interface, changed: changed, invalidated: message.body.count > 2 ? message.body[2].strings ?? [] : [])
            propertiesChanged(path, interface: interface, changed: changed, before: before)
        default:
            break
        }
    }

    /// Reads one object's interface afresh (Properties.GetAll) into the
    /// mirror and reacts to what differed as to a PropertiesChanged: for when
    /// BlueZ's word (a Connect reply) and the mirror disagree, i.e. a signal
    /// was lost, merged into another or came before we listened. Returns
    /// false if the read failed or BlueZ changed meanwhile.
    @discardableResult
    func reread(_ path: ObjectPath, interface: String) async -> Bool {
        guard let bus, let owner = bluezOwner, !loading else { return false }
        let since = tree.revision
        let reply: [DBusValue]
        do {
            reply = try await bus.call(
                destination: BlueZ.service, path: path, interface: BlueZ.properties, member: "GetAll",
                arguments: [.string(interface)], timeout: .seconds(10))
        } catch {
            log("bluetooth: reading \(path) afresh failed: \(error)")
            return false
        }
        guard bluezOwner == owner, !loading, let properties = reply.first?.dictionaryStringVariant else { return false }
        let before = tree.properties(path, interface)
        let changed = tree.reread(path, interface: interface, properties: properties, since: since)
        guard !changed.isEmpty else { return true }
        let names = changed.keys.sorted().map { name in "\(name)=\(changed[name]!.bool.map(String.init) ?? "\(changed[name]!)")" }.joined(separator: " ")
        log("bluetooth: \(path) read afresh differs from the signals seen: \(names)")
        propertiesChanged(path, interface: interface, changed: changed, before: before)
        return true
    }

    private func objectAppeared(_ path: ObjectPath, interfaces: Set<String>) {
        if interfaces.contains(BlueZ.adapter) {
            pinDefaultAdapter()
            stateMayHaveChanged()
            reconcileEverything()
            if let adapter = tree.adapter(at: path) { loop.task { await self.keepBondable(adapter) } }
        }
        if interfaces.contains(BlueZ.device), let device = tree.device(at: path) {
            advertisementSeen(device)
            if device.properties["RSSI"] != nil { monitorAdvertisement(device) }
            reconcileLink(device.address)
            deviceSeenForPairing(device.address)
        }
        if interfaces.contains(BlueZ.gattCharacteristic) { characteristicAppeared(path) }
    }

    private func objectRemoved(_ path: ObjectPath, device: DeviceView?, adapterRemoved: Bool) {
        if adapterRemoved {
            // An adapter gone takes its discovery with it. (Only then: every
            // device and GATT object that goes would otherwise re-check the
            // adapters and the state.)
            discoveries[path] = nil
            stateMayHaveChanged()
        }
        if let device, tree.device(at: path) == nil, device.adapter != nil, linkAdapter(device.address)?.path == device.adapter {
            if links[device.address]?.connected == true { linkWentDown(device.address, reason: "the device was removed") }
            reconcileLink(device.address)
        }
        if tree.characteristic(at: path) == nil, let state = notify.removeValue(forKey: path) {
            state.close(loop: loop, path: path)
        }
    }

    private func propertiesChanged(_ path: ObjectPath, interface: String, changed: [String: DBusValue], before: [String: DBusValue]?) {
        switch interface {
        case BlueZ.adapter:
            // Powering off ends the adapter's discovery at BlueZ.
            if changed["Powered"]?.unwrapped.bool == false, discoveries[path]?.changing != true { discoveries[path] = nil }
            stateMayHaveChanged()
            if changed["Powered"] != nil { reconcileEverything() }
            if changed["Pairable"]?.unwrapped.bool == false, let adapter = tree.adapter(at: path) {
                loop.task { await self.keepBondable(adapter) }
            }
        case BlueZ.device:
            guard let device = tree.device(at: path) else { return }
            if changed["Address"] != nil, let old = before?["Address"]?.string?.uppercased(), old != device.address {
                deviceAddressChanged(path, from: old, to: device.address)
            }
            // The same address on another adapter is another object: not this link's.
            if changed["Connected"] != nil, isLinkDevice(device) { connectedChanged(device) }
            if changed["ServicesResolved"]?.unwrapped.bool == true, isLinkDevice(device) { servicesResolved(device) }
            if changed["Paired"]?.unwrapped.bool == true || changed["Bonded"]?.unwrapped.bool == true { pairedChanged(device) }
            let advertised = ["RSSI", "ManufacturerData", "ServiceData", "UUIDs", "Name", "TxPower"]
            if advertised.contains(where: { changed[$0] != nil }) {
                advertisementSeen(device)
                monitorAdvertisement(device)
            }
            if advertised.contains(where: { changed[$0] != nil }) || changed["Connected"]?.unwrapped.bool == true {
                deviceSeenForPairing(device.address)
            }
        case BlueZ.gattCharacteristic:
            if let value = changed["Value"]?.unwrapped.bytes { valueChanged(path, value) }
            if changed["Notifying"]?.unwrapped.bool == false, notify[path] != nil {
                // BlueZ ended the notify session (link loss, the device's doing):
                // it is started again after the next resolve.
                notify[path] = nil
            }
        default:
            break
        }
    }

    // MARK: Adapter state

    public var state: BluetoothState {
        guard bus != nil, bluezOwner != nil else { return lastState == .unknown ? .unsupported : .resetting }
        guard !loading else { return .resetting }
        guard let adapter else { return .unsupported }
        return adapter.powered ? .poweredOn : .poweredOff
    }

    public var adapterName: String? { adapter?.name }

    /// Which link of bus, bluetoothd, adapter and power is missing, in words
    /// an administrator can act on (`vigilctl status`, `vigilctl ble scan`).
    public var health: BluetoothHealth {
        let address = busAddress ?? DBusAddress.system
        // Connecting (at start, or again after the bus went): not known to be missing yet.
        if connectingBus || (bus == nil && busProblem == nil) {
            return BluetoothHealth(condition: .starting, detail: "connecting to the system bus at \(address)")
        }
        guard bus != nil else {
            let why = busProblem.map { ": \($0)" } ?? ""
            return BluetoothHealth(condition: .noBus, detail: "cannot reach the system bus at \(address)\(why)")
        }
        guard bluezOwner != nil else {
            return BluetoothHealth(
                condition: .noBluetoothd, detail: "bluetoothd is not running (\(BlueZ.service) is not on the system bus)")
        }
        guard !loading else {
            return BluetoothHealth(condition: .starting, detail: "bluetoothd (re)appeared; loading its objects")
        }
        guard let adapter else {
            if let configuredAdapter {
                let present = tree.adapters.map(\.name).sorted().joined(separator: ", ")
                return BluetoothHealth(
                    condition: .noAdapter,
                    detail: "the configured adapter \(configuredAdapter) is not present (BlueZ has: \(present.isEmpty ? "none" : present)); vigild waits for it")
            }
            if let pinnedAdapter {
                return BluetoothHealth(
                    condition: .noAdapter, detail: "the default adapter (\(pinnedAdapter)) is gone; vigild waits for it and uses no other")
            }
            return BluetoothHealth(condition: .noAdapter, detail: "bluetoothd runs but has no Bluetooth adapter")
        }
        guard adapter.powered else {
            return BluetoothHealth(
                condition: .poweredOff, adapter: adapter.name,
                detail: "adapter \(adapter.name) is powered off (e.g. `bluetoothctl power on`, or check `rfkill list`)")
        }
        return BluetoothHealth(condition: .poweredOn, adapter: adapter.name, detail: "adapter \(adapter.name) is powered on")
    }

    /// The bus and adapter the peripheral role publishes through, while
    /// BlueZ is there: the chosen adapter (an address), or the default.
    func roleAccess(adapter choice: String? = nil) -> (bus: DBusConnection, adapter: ObjectPath)? {
        guard let bus, bluezOwner != nil, !loading, let adapter = adapterView(choice) else { return nil }
        return (bus, adapter.path)
    }

    /// The peripheral role's `adapter` member, checked as the central's are.
    func choosePublishingAdapter(_ selector: String?) throws(ProtocolError) -> String? {
        try chooseAdapter(selector)
    }

    /// Tells every client with a manager when the state changes.
    func stateMayHaveChanged() {
        chosenAdaptersMayHaveChanged()
        let now = state
        guard now != lastState else { return }
        log("bluetooth: state \(lastState.rawValue) -> \(now.rawValue)")
        lastState = now
        delegate?.bluetoothStateChanged(now)
        // Apps with only a peripheral manager hear of the adapter too, by
        // their own mode: an event their mode cannot wake them for would be
        // held for the foreground and hold back every later event (after a
        // daemon restart, the incoming L2CAP channels that should wake them).
        let publishers = peripheral?.assumeIsolated { Array($0.clients.keys) } ?? []
        for client in Set(clients.keys).union(publishers) {
            let content = BluetoothEventContent.state(now)
            delegate?.bluetooth(emit: content.kind, attributes: content.attributes, body: [],
                                mode: clients[client] == nil ? .bluetoothPeripheral : .bluetoothCentral, to: client)
        }
    }

    /// After BlueZ (re)appeared or an adapter changed: redo what clients asked for.
    func reconcileEverything() {
        reconcileDiscovery()
        for address in Set(links.keys).union(clients.values.flatMap(\.connects)) { reconcileLink(address) }
        for device in tree.devices where device.connected && device.servicesResolved && isLinkDevice(device) { servicesResolved(device) }
        resumePairings()
    }
}

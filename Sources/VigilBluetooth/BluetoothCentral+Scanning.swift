import VigilDBus
import VigilProtocol

/// Discovery is shared: one BlueZ discovery session with the union of what
/// clients scan for (BlueZ merges filters of all its clients too, so every
/// result is checked again against each client's own filter).
struct DiscoveryState {
    /// vigild's StartDiscovery is in effect.
    var running = false
    /// The filter last set; nil UUIDs: every device.
    var filterUUIDs: [String]?
    var changing = false
}

extension BluetoothCentral {
    public func startScan(_ client: BluetoothClient, services: [String]?, allowDuplicates: Bool, adapter selector: String? = nil) throws(ProtocolError) {
        var uuids: Set<String>?
        if let services {
            uuids = []
            for service in services {
                guard let uuid = BluetoothUUID.normalize(service) else {
                    throw ProtocolError(.invalidArgument, "'\(service)' is not a Bluetooth UUID")
                }
                uuids?.insert(uuid)
            }
        }
        if uuids?.isEmpty ?? true, delegate?.bluetoothClientIsForeground(client) == false {
            throw ProtocolError(.notPermitted, "a scan in the background must name the services it looks for")
        }
        let choice = try chooseAdapter(selector)
        clients[client, default: CentralClientState()].scan = .init(services: uuids, allowDuplicates: allowDuplicates, adapter: choice)
        clients[client]?.seen = []
        adapterChosen(choice)
        reconcileDiscovery()
        // Devices BlueZ already knows count as discovered now (CoreBluetooth reports cached ones too).
        for device in tree.devices where device.properties["RSSI"] != nil { advertisementSeen(device, only: client) }
    }

    public func stopScan(_ client: BluetoothClient) {
        guard clients[client]?.scan != nil else { return }
        clients[client]?.scan = nil
        clients[client]?.seen = []
        reconcileDiscovery()
    }

    /// What discovery on `adapter` must look for: nil when something needs
    /// every device (a scan without services, or a pending connect to a
    /// device BlueZ does not know there, which must be seen advertising
    /// before Connect can work, or whose Connect has gone unanswered with
    /// the link down).
    func wantedDiscovery(on adapter: AdapterView) -> (needed: Bool, uuids: [String]?) {
        var needed = false
        var uuids: Set<String> = []
        var everything = false
        for state in clients.values {
            // A monitor's patterns are on data BlueZ cannot filter discovery by;
            // monitors watch through the default adapter.
            if !state.monitors.isEmpty, adapterView(nil)?.path == adapter.path {
                needed = true
                everything = true
            }
            if let scan = state.scan, adapterView(scan.adapter)?.path == adapter.path {
                needed = true
                if let services = scan.services { uuids.formUnion(services) } else { everything = true }
            }
            for address in state.connects where adapterView(state.connectAdapters[address])?.path == adapter.path
                && (self.device(address) == nil || links[address]?.needsDiscovery == true) {
                needed = true
                everything = true
            }
        }
        return (needed, everything ? nil : uuids.sorted())
    }

    /// Discovery on every powered adapter as its clients need it.
    func reconcileDiscovery() {
        guard let bus, bluezOwner != nil, !loading else { return }
        for adapter in tree.adapters where adapter.powered {
            let current = discoveries[adapter.path] ?? DiscoveryState()
            guard !current.changing else { continue }
            let wanted = wantedDiscovery(on: adapter)
            if wanted.needed == current.running && (!wanted.needed || wanted.uuids == current.filterUUIDs) { continue }
            discoveries[adapter.path, default: DiscoveryState()].changing = true
            loop.task {
                await self.applyDiscovery(wanted, adapter: adapter, bus: bus)
            }
        }
    }

    private func applyDiscovery(_ wanted: (needed: Bool, uuids: [String]?), adapter view: AdapterView, bus: DBusConnection) async {
        let adapter = view.path
        defer {
            discoveries[adapter]?.changing = false
            // Clients may have changed their minds meanwhile.
            reconcileDiscovery()
        }
        do {
            if wanted.needed {
                var filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .bool(true)]
                if let uuids = wanted.uuids { filter["UUIDs"] = .strings(uuids) }
                _ = try await bus.call(
                    destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "SetDiscoveryFilter",
                    arguments: [.stringVariantDictionary(filter)], timeout: .seconds(10))
                discoveries[adapter]?.filterUUIDs = wanted.uuids
                if discoveries[adapter]?.running != true {
                    do {
                        _ = try await bus.call(
                            destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "StartDiscovery",
                            timeout: .seconds(10))
                    } catch let error as DBusError where error.name == BlueZ.Error.inProgress {
                        // Already discovering for us (e.g. a second start raced): fine.
                    }
                    discoveries[adapter]?.running = true
                    log("bluetooth: discovery on \(view.name) (\(wanted.uuids.map { $0.map(BluetoothUUID.short).joined(separator: ",") } ?? "all devices"))")
                }
            } else if discoveries[adapter]?.running == true {
                discoveries[adapter]?.running = false
                _ = try await bus.call(
                    destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "StopDiscovery",
                    timeout: .seconds(10))
                log("bluetooth: discovery off on \(view.name)")
            }
        } catch {
            log("bluetooth: changing discovery on \(view.name) failed: \(error)")
        }
    }

    /// An advertisement (a new device, or new RSSI/data): reported to each
    /// scanning client whose filter it matches; a duplicate only to clients in
    /// the foreground that allow duplicates.
    func advertisementSeen(_ device: DeviceView, only: BluetoothClient? = nil) {
        let info = peripheralInfo(device)
        for (client, state) in clients {
            if let only, client != only { continue }
            guard let scan = state.scan, adapterView(scan.adapter)?.path == device.adapter else { continue }
            if let services = scan.services, services.isDisjoint(with: device.serviceUUIDs) { continue }
            if state.seen.contains(device.address) {
                guard scan.allowDuplicates, delegate?.bluetoothClientIsForeground(client) ?? false else { continue }
            }
            clients[client]?.seen.insert(device.address)
            emit(.discovered(info), to: client)
        }
    }

    func peripheralInfo(_ device: DeviceView) -> PeripheralInfo {
        // Only the object of the link's adapter is the one being connected.
        let link = isLinkDevice(device) ? links[device.address] : nil
        let pending = link?.connecting == true || (isLinkDevice(device) && wanted(device.address))
        let state = device.connected ? "connected" : (pending ? "connecting" : "disconnected")
        let mtu = tree.services(of: device.path).lazy.flatMap { self.tree.characteristics(of: $0.path) }.compactMap(\.mtu).first
        return PeripheralInfo(
            address: device.address, addressType: device.addressType, name: device.name, rssi: device.rssi,
            txPower: device.txPower, state: state, serviceUUIDs: device.serviceUUIDs,
            manufacturerData: device.manufacturerData, serviceData: device.serviceData, mtu: mtu,
            paired: device.paired, bonded: device.bonded, trusted: device.trusted, adapter: adapterName(of: device))
    }

    /// Every device BlueZ knows, on every adapter (one record per adapter
    /// that knows it, each naming its adapter).
    public func knownPeripherals() -> [PeripheralInfo] {
        var result = tree.devices.map(peripheralInfo)
        // Pending connects to devices BlueZ does not know (yet) are peripherals too.
        let known = Set(result.map(\.address))
        for address in Set(clients.values.flatMap(\.connects)).subtracting(known).sorted() {
            result.append(PeripheralInfo(address: address, state: "connecting", adapter: linkAdapterName(address)))
        }
        return result
    }
}

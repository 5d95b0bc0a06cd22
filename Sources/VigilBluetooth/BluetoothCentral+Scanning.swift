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
    public func startScan(_ client: BluetoothClient, services: [String]?, allowDuplicates: Bool) throws(ProtocolError) {
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
        clients[client, default: CentralClientState()].scan = .init(services: uuids, allowDuplicates: allowDuplicates)
        clients[client]?.seen = []
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

    /// What discovery must look for: nil when something needs every device
    /// (a scan without services, or a pending connect to a device BlueZ does
    /// not know, which must be seen advertising before Connect can work, or
    /// whose Connect has gone unanswered with the link down).
    var wantedDiscovery: (needed: Bool, uuids: [String]?) {
        var needed = false
        var uuids: Set<String> = []
        var everything = false
        for state in clients.values {
            // A monitor's patterns are on data BlueZ cannot filter discovery by.
            if !state.monitors.isEmpty {
                needed = true
                everything = true
            }
            if let scan = state.scan {
                needed = true
                if let services = scan.services { uuids.formUnion(services) } else { everything = true }
            }
            for address in state.connects where tree.device(address: address) == nil || links[address]?.needsDiscovery == true {
                needed = true
                everything = true
            }
        }
        return (needed, everything ? nil : uuids.sorted())
    }

    func reconcileDiscovery() {
        guard let bus, bluezOwner != nil, !loading, !discovery.changing, let adapter, adapter.powered else { return }
        let wanted = wantedDiscovery
        if wanted.needed == discovery.running && (!wanted.needed || wanted.uuids == discovery.filterUUIDs) { return }
        discovery.changing = true
        loop.task {
            await self.applyDiscovery(wanted, adapter: adapter.path, bus: bus)
        }
    }

    private func applyDiscovery(_ wanted: (needed: Bool, uuids: [String]?), adapter: ObjectPath, bus: DBusConnection) async {
        defer {
            discovery.changing = false
            // Clients may have changed their minds meanwhile.
            if wantedDiscovery.needed != discovery.running || (discovery.running && wantedDiscovery.uuids != discovery.filterUUIDs) {
                reconcileDiscovery()
            }
        }
        do {
            if wanted.needed {
                var filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .bool(true)]
                if let uuids = wanted.uuids { filter["UUIDs"] = .strings(uuids) }
                _ = try await bus.call(
                    destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "SetDiscoveryFilter",
                    arguments: [.stringVariantDictionary(filter)], timeout: .seconds(10))
                discovery.filterUUIDs = wanted.uuids
                if !discovery.running {
                    do {
                        _ = try await bus.call(
                            destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "StartDiscovery",
                            timeout: .seconds(10))
                    } catch let error as DBusError where error.name == BlueZ.Error.inProgress {
                        // Already discovering for us (e.g. a second start raced): fine.
                    }
                    discovery.running = true
                    log("bluetooth: discovery on (\(wanted.uuids.map { $0.map(BluetoothUUID.short).joined(separator: ",") } ?? "all devices"))")
                }
            } else if discovery.running {
                discovery.running = false
                _ = try await bus.call(
                    destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "StopDiscovery",
                    timeout: .seconds(10))
                log("bluetooth: discovery off")
            }
        } catch {
            log("bluetooth: changing discovery failed: \(error)")
        }
    }

    /// An advertisement (a new device, or new RSSI/data): reported to each
    /// scanning client whose filter it matches; a duplicate only to clients in
    /// the foreground that allow duplicates.
    func advertisementSeen(_ device: DeviceView, only: BluetoothClient? = nil) {
        let info = peripheralInfo(device)
        for (client, state) in clients {
            if let only, client != only { continue }
            guard let scan = state.scan else { continue }
            if let services = scan.services, services.isDisjoint(with: device.serviceUUIDs) { continue }
            if state.seen.contains(device.address) {
                guard scan.allowDuplicates, delegate?.bluetoothClientIsForeground(client) ?? false else { continue }
            }
            clients[client]?.seen.insert(device.address)
            emit(.discovered(info), to: client)
        }
    }

    func peripheralInfo(_ device: DeviceView) -> PeripheralInfo {
        let link = links[device.address]
        let state = device.connected ? "connected" : (link?.connecting == true || wanted(device.address) ? "connecting" : "disconnected")
        let mtu = tree.services(of: device.path).lazy.flatMap { self.tree.characteristics(of: $0.path) }.compactMap(\.mtu).first
        return PeripheralInfo(
            address: device.address, addressType: device.addressType, name: device.name, rssi: device.rssi,
            txPower: device.txPower, state: state, serviceUUIDs: device.serviceUUIDs,
            manufacturerData: device.manufacturerData, serviceData: device.serviceData, mtu: mtu,
            paired: device.paired, bonded: device.bonded, trusted: device.trusted)
    }

    public func knownPeripherals() -> [PeripheralInfo] {
        var result = tree.devices.map(peripheralInfo)
        // Pending connects to devices BlueZ does not know (yet) are peripherals too.
        let known = Set(result.map(\.address))
        for address in Set(clients.values.flatMap(\.connects)).subtracting(known).sorted() {
            result.append(PeripheralInfo(address: address, state: "connecting"))
        }
        return result
    }
}

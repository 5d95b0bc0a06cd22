import VigilDBus
import VigilProtocol

/// Advertising through LEAdvertisingManager1: an LEAdvertisement1 object per
/// client, registered with BlueZ; BlueZ's limits come back as errors naming them.
extension BluetoothPeripheral {
    /// `adapter`: the request's (a name or address), nil for the default.
    public func startAdvertising(_ client: BluetoothClient, _ data: AdvertisementData, adapter selector: String? = nil) async throws(ProtocolError) {
        let choice = try chooseAdapter(selector)
        if let old = clients[client]?.advertisement {
            await withdraw(old)
            clients[client]?.advertisement = nil
        }
        let advertisement = PublishedAdvertisement(
            data: data, path: try objectPath("/org/vigil/advertising/\(token(client))_\(nextAdvertisementNumber)"))
        nextAdvertisementNumber += 1
        advertisement.adapter = choice
        _ = try properties(of: data)  // refuse bad data before BlueZ sees it
        // The client's before BlueZ answers: a client that ends or registers
        // again meanwhile withdraws it, and `register` undoes the late registration.
        clients[client, default: PeripheralClientState()].advertisement = advertisement
        do throws(ProtocolError) {
            try await register(advertisement)
        } catch {
            if clients[client]?.advertisement === advertisement { clients[client]?.advertisement = nil }
            throw error
        }
        // The name is an app's text: escaped, as every device string is in the log.
        log("bluetooth: \(client) advertises \(data.localName.map(DeviceText.quoted) ?? "(no name)") \(data.serviceUUIDs ?? [])")
    }

    public func stopAdvertising(_ client: BluetoothClient) async {
        guard let advertisement = clients[client]?.advertisement else { return }
        clients[client]?.advertisement = nil
        await withdraw(advertisement)
    }

    /// Registers with BlueZ. The actor runs other work while BlueZ answers:
    /// if the advertisement was withdrawn meanwhile (its client re-registered
    /// or ended), the registration is undone at once, or BlueZ would keep
    /// advertising for nobody.
    func register(_ advertisement: PublishedAdvertisement) async throws(ProtocolError) {
        try await registerWithBlueZ(advertisement)
        if advertisement.withdrawn {
            await withdraw(advertisement)
            throw ProtocolError(.invalidState, "the advertisement was withdrawn while BlueZ registered it")
        }
    }

    private func registerWithBlueZ(_ advertisement: PublishedAdvertisement) async throws(ProtocolError) {
        guard let (bus, adapter) = await blueZ(adapter: advertisement.adapter) else {
            throw ProtocolError(.unavailable, "bluetoothd is not running or the adapter is not there")
        }
        let properties = try properties(of: advertisement.data)
        do {
            let tree = try await DBusObjectTree.export(at: advertisement.path, on: bus)
            advertisement.tree = tree
            try await tree.add(advertisement.path, interfaces: ["org.bluez.LEAdvertisement1": properties], handler: { [weak self] call in
                guard call.member == "Release" else { return call.replyUnknownMethod() }
                try? call.reply()
                self?.assumeIsolated { _ in advertisement.registered = false }
            })
            _ = try await bus.call(
                destination: BlueZ.service, path: adapter, interface: BlueZ.advertisingManager, member: "RegisterAdvertisement",
                arguments: [.objectPath(advertisement.path), .stringVariantDictionary([:])], timeout: .seconds(30))
            advertisement.registered = true
            advertisement.registeredOn = adapter
        } catch let error as DBusError {
            await advertisement.tree?.unexport()
            advertisement.tree = nil
            throw ProtocolError(.deviceError, "RegisterAdvertisement: \(error.name)\(error.message.isEmpty ? "" : ": " + error.message)")
        } catch {
            throw ProtocolError(.internalError, "advertising: \(error)")
        }
    }

    func withdraw(_ advertisement: PublishedAdvertisement) async {
        advertisement.withdrawn = true
        if advertisement.registered, let (bus, fallback) = await blueZ(adapter: advertisement.adapter) {
            _ = try? await bus.call(
                destination: BlueZ.service, path: advertisement.registeredOn ?? fallback, interface: BlueZ.advertisingManager,
                member: "UnregisterAdvertisement",
                arguments: [.objectPath(advertisement.path)], timeout: .seconds(10))
        }
        advertisement.registered = false
        await advertisement.tree?.unexport()
        advertisement.tree = nil
    }

    /// LEAdvertisement1's properties (doc/org.bluez.LEAdvertisement.rst).
    func properties(of data: AdvertisementData) throws(ProtocolError) -> [String: DBusValue] {
        var properties: [String: DBusValue] = ["Type": .string("peripheral")]
        if let name = data.localName { properties["LocalName"] = .string(name) }
        if let services = data.serviceUUIDs {
            var uuids: [String] = []
            for service in services {
                guard let uuid = BluetoothUUID.normalize(service) else { throw ProtocolError(.invalidArgument, "'\(service)' is not a Bluetooth UUID") }
                uuids.append(uuid)
            }
            properties["ServiceUUIDs"] = .strings(uuids)
        }
        if let manufacturer = data.manufacturerData {
            var entries: [DBusDictEntry] = []
            for (company, hexValue) in manufacturer.sorted(by: { $0.key < $1.key }) {
                guard let id = UInt16(company), let bytes = GATTHex.bytes(hexValue) else {
                    throw ProtocolError(.invalidArgument, "manufacturer data needs a decimal company id and hex data, not \(company): \(hexValue)")
                }
                entries.append(DBusDictEntry(key: .uint16(id), value: .variant(.bytes(bytes))))
            }
            properties["ManufacturerData"] = .dictionary(keySignature: "q", valueSignature: "v", entries)
        }
        if let serviceData = data.serviceData {
            var entries: [String: DBusValue] = [:]
            for (service, hexValue) in serviceData {
                guard let uuid = BluetoothUUID.normalize(service), let bytes = GATTHex.bytes(hexValue) else {
                    throw ProtocolError(.invalidArgument, "service data needs a UUID and hex data, not \(service): \(hexValue)")
                }
                entries[uuid] = .bytes(bytes)
            }
            properties["ServiceData"] = .stringVariantDictionary(entries)
        }
        if let appearance = data.appearance {
            guard let value = UInt16(exactly: appearance) else { throw ProtocolError(.invalidArgument, "appearance \(appearance) is not 16-bit") }
            properties["Appearance"] = .uint16(value)
        }
        return properties
    }
}

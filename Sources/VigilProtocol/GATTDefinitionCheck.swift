/// Checks an app's service definition before BlueZ sees it, and returns it
/// with canonical UUIDs. BlueZ would refuse some mistakes only vaguely (or
/// accept them and misbehave with a central): say exactly what is wrong.
/// Pure (definitions in, definition or error out), so it lives with the
/// definitions and is fuzzed without the D-Bus stack (Sources/Fuzz/FuzzGATT).
public enum GATTDefinitionCheck {
    static let properties: Set<String> = [
        "broadcast", "read", "write-without-response", "write", "notify", "indicate", "authenticated-signed-writes",
        "extended-properties", "reliable-write", "writable-auxiliaries", "encrypt-read", "encrypt-write",
        "encrypt-notify", "encrypt-indicate", "encrypt-authenticated-read", "encrypt-authenticated-write",
        "encrypt-authenticated-notify", "encrypt-authenticated-indicate", "secure-read", "secure-write",
        "secure-notify", "secure-indicate", "authorize",
    ]
    static let changing: Set<String> = ["write", "write-without-response", "notify", "indicate", "reliable-write"]

    public static func canonical(_ service: GATTServiceDefinition) throws(ProtocolError) -> GATTServiceDefinition {
        guard let uuid = BluetoothUUID.normalize(service.uuid) else {
            throw ProtocolError(.invalidArgument, "service UUID '\(service.uuid)' is not a Bluetooth UUID")
        }
        var result = GATTServiceDefinition(uuid: uuid, primary: service.primary ?? true, characteristics: [])
        var seen: Set<String> = []
        for characteristic in service.characteristics {
            let where_ = "service \(BluetoothUUID.short(uuid)), characteristic '\(characteristic.uuid)'"
            guard let id = BluetoothUUID.normalize(characteristic.uuid) else {
                throw ProtocolError(.invalidArgument, "\(where_): not a Bluetooth UUID")
            }
            guard seen.insert(id).inserted else {
                throw ProtocolError(.invalidArgument, "\(where_): defined twice in the service")
            }
            guard !characteristic.properties.isEmpty else {
                throw ProtocolError(.invalidArgument, "\(where_): no properties (read, write, notify, ...)")
            }
            if let unknown = characteristic.properties.first(where: { !properties.contains($0) }) {
                throw ProtocolError(.invalidArgument, "\(where_): unknown property '\(unknown)'")
            }
            var value: String?
            if let hex = characteristic.value {
                guard let bytes = GATTHex.bytes(hex) else {
                    throw ProtocolError(.invalidArgument, "\(where_): value '\(hex)' is not hex")
                }
                if let conflict = characteristic.properties.first(where: changing.contains) {
                    throw ProtocolError(
                        .invalidArgument,
                        "\(where_): a fixed value must be read-only, but it has '\(conflict)' (omit the value to answer requests yourself)")
                }
                guard characteristic.properties.contains("read") else {
                    throw ProtocolError(.invalidArgument, "\(where_): a fixed value needs the 'read' property")
                }
                value = GATTHex.string(bytes)
            }
            var descriptors: [GATTDescriptorDefinition] = []
            for descriptor in characteristic.descriptors ?? [] {
                guard let descriptorUUID = BluetoothUUID.normalize(descriptor.uuid) else {
                    throw ProtocolError(.invalidArgument, "\(where_): descriptor UUID '\(descriptor.uuid)' is not a Bluetooth UUID")
                }
                if descriptorUUID == BluetoothUUID.normalize("2902") {
                    throw ProtocolError(.invalidArgument, "\(where_): BlueZ provides the CCCD (0x2902) itself; leave it out")
                }
                guard let bytes = GATTHex.bytes(descriptor.value) else {
                    throw ProtocolError(.invalidArgument, "\(where_): descriptor value '\(descriptor.value)' is not hex")
                }
                descriptors.append(GATTDescriptorDefinition(uuid: descriptorUUID, value: GATTHex.string(bytes)))
            }
            result.characteristics.append(
                GATTCharacteristicDefinition(
                    uuid: id, properties: characteristic.properties, value: value, descriptors: descriptors.isEmpty ? nil : descriptors))
        }
        return result
    }


}

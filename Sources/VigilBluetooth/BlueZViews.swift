import VigilDBus
import VigilProtocol

/// Typed reads of one object's properties in the mirror. Missing or mistyped
/// properties read as absent, never as a crash: BlueZ versions differ.

public struct AdapterView: Sendable, Equatable {
    public let path: ObjectPath
    public let properties: [String: DBusValue]
    public var address: String { properties["Address"]?.string ?? "" }
    public var powered: Bool { properties["Powered"]?.bool ?? false }
    public var discovering: Bool { properties["Discovering"]?.bool ?? false }
    /// "hci0".
    public var name: String { path.rawValue.split(separator: "/").last.map(String.init) ?? path.rawValue }
}

public struct DeviceView: Sendable, Equatable {
    public let path: ObjectPath
    public let properties: [String: DBusValue]
    public var address: String { (properties["Address"]?.string ?? "").uppercased() }
    public var addressType: String { properties["AddressType"]?.string ?? "public" }
    public var name: String? { properties["Name"]?.string ?? properties["Alias"]?.string }
    public var adapter: ObjectPath? { properties["Adapter"]?.objectPath }
    public var rssi: Int? { properties["RSSI"]?.int16.map(Int.init) }
    public var txPower: Int? { properties["TxPower"]?.int16.map(Int.init) }
    public var connected: Bool { properties["Connected"]?.bool ?? false }
    public var servicesResolved: Bool { properties["ServicesResolved"]?.bool ?? false }
    public var paired: Bool { properties["Paired"]?.bool ?? false }
    /// Older BlueZ has no `Bonded` (the lab's 5.66 has it): there a pairing on a bondable adapter is a bond.
    public var bonded: Bool { properties["Bonded"]?.bool ?? paired }
    public var trusted: Bool { properties["Trusted"]?.bool ?? false }
    public var serviceUUIDs: [String] { (properties["UUIDs"]?.strings ?? []).compactMap(BluetoothUUID.normalize) }

    /// Company id (decimal) -> data (hex), from `ManufacturerData` (a{qv}).
    public var manufacturerData: [String: String] {
        var result: [String: String] = [:]
        for entry in properties["ManufacturerData"]?.dictionaryEntries ?? [] {
            guard let company = entry.key.uint16, let data = entry.value.unwrapped.bytes else { continue }
            result[String(company)] = GATTHex.string(data)
        }
        return result
    }

    /// Service UUID -> data (hex), from `ServiceData` (a{sv}).
    public var serviceData: [String: String] {
        var result: [String: String] = [:]
        for (uuid, value) in properties["ServiceData"]?.dictionaryStringVariant ?? [:] {
            guard let data = value.unwrapped.bytes else { continue }
            result[BluetoothUUID.normalize(uuid) ?? uuid] = GATTHex.string(data)
        }
        return result
    }
}

public struct GattServiceView: Sendable, Equatable {
    public let path: ObjectPath
    public let properties: [String: DBusValue]
    public var uuid: String { BluetoothUUID.normalize(properties["UUID"]?.string ?? "") ?? "" }
    public var primary: Bool { properties["Primary"]?.bool ?? true }
    public var device: ObjectPath? { properties["Device"]?.objectPath }
}

public struct GattCharacteristicView: Sendable, Equatable {
    public let path: ObjectPath
    public let properties: [String: DBusValue]
    public var uuid: String { BluetoothUUID.normalize(properties["UUID"]?.string ?? "") ?? "" }
    public var service: ObjectPath? { properties["Service"]?.objectPath }
    public var flags: [String] { properties["Flags"]?.strings ?? [] }
    public var notifying: Bool { properties["Notifying"]?.bool ?? false }
    public var value: [UInt8]? { properties["Value"]?.bytes }
    public var mtu: Int? { properties["MTU"]?.uint16.map(Int.init) }
    /// The ATT handle: BlueZ's `Handle` where it reports one, else the hex
    /// number its object path ends with (`.../service000a/char000b`).
    public var handle: Int? {
        if let handle = properties["Handle"]?.uint16, handle != 0 { return Int(handle) }
        let last = path.rawValue.split(separator: "/").last ?? ""
        guard last.hasPrefix("char"), last.count > 4 else { return nil }
        return Int(last.dropFirst(4), radix: 16)
    }
}

public struct GattDescriptorView: Sendable, Equatable {
    public let path: ObjectPath
    public let properties: [String: DBusValue]
    public var uuid: String { BluetoothUUID.normalize(properties["UUID"]?.string ?? "") ?? "" }
    public var characteristic: ObjectPath? { properties["Characteristic"]?.objectPath }
}

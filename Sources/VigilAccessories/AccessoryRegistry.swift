import VigilLifecycle
import VigilProtocol

/// A connected accessory: what apps see, plus what the daemon needs.
public struct Accessory: Sendable, Equatable {
    public var info: AccessoryInfo
    public var identity: AccessoryIdentity
}

/// Which serial devices are accessories, and their connections.
///
/// A device is an accessory when udev marks it (`VIGIL_ACCESSORY=1`, with
/// `VIGIL_PROTOCOLS`, from the rules in udev/) or a rule of the daemon's config
/// matches it. Every connection gets a new id, so an app can tell a replugged
/// accessory from the one it had.
public final class AccessoryRegistry {
    public private(set) var connected: [UInt64: Accessory] = [:]
    private var bySysPath: [String: UInt64] = [:]
    private var nextConnectionID: UInt64 = 1
    public var rules: [AccessoryRule]

    public init(rules: [AccessoryRule]) {
        self.rules = rules
    }

    /// A device node appeared (or was found at start). Returns the new
    /// accessory, or nil when it is not one or is already connected.
    public func added(_ device: DeviceObservation) -> Accessory? {
        guard bySysPath[device.sysPath] == nil, let declaration = declaration(for: device) else { return nil }
        let id = nextConnectionID
        nextConnectionID += 1
        let usb = device.usb
        let property = { (key: String) in device.properties[key].flatMap { $0.isEmpty ? nil : $0 } }
        let info = AccessoryInfo(
            connectionID: id,
            name: declaration.name ?? property("VIGIL_NAME") ?? usb?.product ?? property("ID_MODEL") ?? device.devNode,
            manufacturer: usb?.manufacturer ?? property("ID_VENDOR") ?? "",
            modelNumber: property("VIGIL_MODEL") ?? usb?.productID ?? "",
            serialNumber: usb?.serialNumber ?? property("ID_SERIAL_SHORT") ?? "",
            firmwareRevision: property("VIGIL_FIRMWARE_REVISION") ?? usb?.revision ?? "",
            hardwareRevision: property("VIGIL_HARDWARE_REVISION") ?? "",
            protocolStrings: declaration.protocols, deviceNode: device.devNode,
            vendorID: usb?.vendorID ?? "", productID: usb?.productID ?? "", sysPath: device.sysPath,
            lineSettings: declaration.lineSettings ?? property("VIGIL_SERIAL") ?? "115200 8N1")
        let accessory = Accessory(info: info, identity: AccessoryIdentity(device))
        connected[id] = accessory
        bySysPath[device.sysPath] = id
        return accessory
    }

    /// A device node went away. Returns the accessory that was connected there.
    public func removed(sysPath: String) -> Accessory? {
        guard let id = bySysPath.removeValue(forKey: sysPath) else { return nil }
        return connected.removeValue(forKey: id)
    }

    public func accessory(_ connectionID: UInt64) -> Accessory? { connected[connectionID] }

    /// The connected accessory with this identity, if any (for reopening sessions).
    public func accessory(identity: AccessoryIdentity) -> Accessory? {
        connected.values.first { $0.identity == identity }
    }

    public var all: [AccessoryInfo] { connected.keys.sorted().compactMap { connected[$0]?.info } }

    private struct Declaration {
        var protocols: [String]
        var lineSettings: String?
        var name: String?
    }

    private func declaration(for device: DeviceObservation) -> Declaration? {
        if let rule = rules.first(where: { matches($0, device) }) {
            return Declaration(protocols: rule.protocols, lineSettings: rule.lineSettings, name: rule.name)
        }
        guard device.properties["VIGIL_ACCESSORY"] == "1" else { return nil }
        let protocols = (device.properties["VIGIL_PROTOCOLS"] ?? "").split(separator: " ").map(String.init)
        return Declaration(protocols: protocols, lineSettings: device.properties["VIGIL_SERIAL"], name: nil)
    }

    private func matches(_ rule: AccessoryRule, _ device: DeviceObservation) -> Bool {
        if let byID = rule.byID, !device.devLinks.contains(byID) { return false }
        if let vendor = rule.vendorID, device.usb?.vendorID != vendor { return false }
        if let product = rule.productID, device.usb?.productID != product { return false }
        if let serial = rule.serialNumber, device.usb?.serialNumber != serial { return false }
        return rule.byID != nil || rule.vendorID != nil
    }
}

import VigilConfig
import VigilLifecycle
import VigilProtocol

/// A connected accessory: what apps see, plus what the daemon needs.
public struct Accessory: Sendable, Equatable {
    public var info: AccessoryInfo
    public var identity: AccessoryIdentity
    /// Protocol strings the device declared and was not offered for.
    public var refusedProtocols: [ProtocolRefusal] = []
}

/// A protocol string a device declared that is not offered: not a reverse-DNS
/// token (`$(reboot)`, `;rm`), or past the most one accessory may declare.
public struct ProtocolRefusal: Sendable, Equatable {
    /// As declared, bounded in length (`DeviceText.bounded`); escape it to log it.
    public var value: String
    public var reason: String
}

/// Which serial devices are accessories, and their connections.
///
/// A device is an accessory when udev marks it (`VIGIL_ACCESSORY=1`, with
/// `VIGIL_PROTOCOLS`, from the rules in udev/) or a rule of the daemon's config
/// matches it. Every connection gets a new id, so an app can tell a replugged
/// accessory from the one it had. What a device says of itself is untrusted:
/// its strings are bounded (and escaped where logged), and only reverse-DNS
/// protocol strings are offered.
public final class AccessoryRegistry {
    public private(set) var connected: [UInt64: Accessory] = [:]
    private var bySysPath: [String: UInt64] = [:]
    private var nextConnectionID: UInt64 = 1
    public var rules: [AccessoryRule]
    /// Identities two devices have claimed at once (cloned serial numbers): a
    /// session waiting for one of them reopens only on its own USB port.
    /// Bounded: past the bound, identities are remembered no more.
    public private(set) var sharedIdentities: Set<AccessoryIdentity> = []
    static let sharedIdentityLimit = 1024
    /// The most protocol strings one accessory is offered for.
    public static let maxProtocols = 32

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
        let property = { (key: String) in device.properties[key].flatMap { $0.isEmpty ? nil : DeviceText.bounded($0) } }
        let text = { (value: String?) in value.map { DeviceText.bounded($0) } }
        var offered: [String] = []
        var refused: [ProtocolRefusal] = []
        // Checked whole, before bounding: cutting an overlong string could make it valid.
        for name in declaration.protocols where !offered.contains(name) {
            if !ReverseDNS.isValid(name) {
                refused.append(ProtocolRefusal(value: DeviceText.bounded(name), reason: "not a reverse-DNS protocol string (dot-separated labels of letters, digits, '-' and '_', at most 255 bytes)"))
            } else if offered.count == Self.maxProtocols {
                refused.append(ProtocolRefusal(value: name, reason: "more than \(Self.maxProtocols) protocol strings"))
            } else {
                offered.append(name)
            }
        }
        let info = AccessoryInfo(
            connectionID: id,
            name: text(declaration.name) ?? property("VIGIL_NAME") ?? text(usb?.product) ?? property("ID_MODEL") ?? device.devNode,
            manufacturer: text(usb?.manufacturer) ?? property("ID_VENDOR") ?? "",
            modelNumber: property("VIGIL_MODEL") ?? usb?.productID ?? "",
            serialNumber: text(usb?.serialNumber) ?? property("ID_SERIAL_SHORT") ?? "",
            firmwareRevision: property("VIGIL_FIRMWARE_REVISION") ?? text(usb?.revision) ?? "",
            hardwareRevision: property("VIGIL_HARDWARE_REVISION") ?? "",
            protocolStrings: offered, deviceNode: device.devNode,
            vendorID: usb?.vendorID ?? "", productID: usb?.productID ?? "", sysPath: device.sysPath,
            lineSettings: device.kind == .hid ? "" : text(declaration.lineSettings) ?? property("VIGIL_SERIAL") ?? "115200 8N1",
            kind: device.kind.rawValue)
        let accessory = Accessory(info: info, identity: AccessoryIdentity(device), refusedProtocols: refused)
        if connected.values.contains(where: { $0.identity == accessory.identity }),
           sharedIdentities.count < Self.sharedIdentityLimit {
            sharedIdentities.insert(accessory.identity)
        }
        connected[id] = accessory
        bySysPath[device.sysPath] = id
        return accessory
    }

    /// A device node went away. Returns the accessory that was connected there.
    public func removed(sysPath: String) -> Accessory? {
        guard let id = bySysPath.removeValue(forKey: sysPath) else { return nil }
        return connected.removeValue(forKey: id)
    }

    /// The other connected accessories that claim this one's identity.
    public func sharingIdentity(with accessory: Accessory) -> [Accessory] {
        connected.values.filter { $0.identity == accessory.identity && $0.info.connectionID != accessory.info.connectionID }
            .sorted { $0.info.connectionID < $1.info.connectionID }
    }

    /// What is wrong with the connected accessories, for `vigilctl accessories`:
    /// refused protocol strings, and identities claimed by several at once.
    public var problems: [AccessoryProblem] {
        connected.keys.sorted().compactMap { connected[$0] }.flatMap { accessory in
            let id = accessory.info.connectionID
            var problems = accessory.refusedProtocols.map {
                AccessoryProblem(connectionID: id, problem: AccessoryProblem.refusedProtocol,
                                 detail: "protocol string \(DeviceText.quoted($0.value)) refused: \($0.reason)")
            }
            let others = sharingIdentity(with: accessory).map(\.info.connectionID)
            if !others.isEmpty {
                problems.append(AccessoryProblem(
                    connectionID: id, problem: AccessoryProblem.duplicateIdentity,
                    detail: "connection\(others.count == 1 ? "" : "s") \(others.map(String.init).joined(separator: ", ")) claim\(others.count == 1 ? "s" : "") the same identity \(DeviceText.escaped(accessory.identity.key)); a waiting session reopens only on its own USB port"))
            }
            return problems
        }
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
        if rule.kind != device.kind.rawValue { return false }
        if let byID = rule.byID, !device.devLinks.contains(byID) { return false }
        if let vendor = rule.vendorID, device.usb?.vendorID != vendor { return false }
        if let product = rule.productID, device.usb?.productID != product { return false }
        if let serial = rule.serialNumber, device.usb?.serialNumber != serial { return false }
        return rule.byID != nil || rule.vendorID != nil
    }
}

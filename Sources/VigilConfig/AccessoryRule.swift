import VigilLifecycle
import VigilProtocol

/// An accessory declared in the daemon's config, for users who cannot install
/// udev rules. A device matches when every given criterion matches.
///
/// ```toml
/// [[accessory]]
/// vendor-id = "1209"            # USB ids, four hex digits
/// product-id = "0001"
/// serial-number = "VGL123"      # optional
/// by-id = "/dev/serial/by-id/usb-Example_Sensor_VGL123-if00"   # optional, instead of the ids
/// protocols = ["org.example.sensor"]
/// line-settings = "115200 8N1 rtscts"
/// name = "Example sensor"       # optional, overrides the USB product string
/// kind = "hid"                  # optional: "serial" (a tty, the default) or "hid" (a hidraw node)
/// ```
///
/// A rule matches one kind of node: a USB device with both a serial and a
/// HID interface (same ids) needs a rule for each it offers.
public struct AccessoryRule: Sendable, Equatable {
    public var vendorID: String?
    public var productID: String?
    public var serialNumber: String?
    public var byID: String?
    public var protocols: [String]
    public var lineSettings: String?
    public var name: String?
    /// `"serial"` or `"hid"`: which kind of device node the rule matches.
    public var kind: String

    public static let kinds = ["serial", "hid"]

    public init(
        vendorID: String? = nil, productID: String? = nil, serialNumber: String? = nil, byID: String? = nil,
        protocols: [String], lineSettings: String? = nil, name: String? = nil, kind: String = "serial"
    ) {
        self.kind = kind
        self.vendorID = vendorID
        self.productID = productID
        self.serialNumber = serialNumber
        self.byID = byID
        self.protocols = protocols
        self.lineSettings = lineSettings
        self.name = name
    }

    static let knownFields: Set<String> = [
        "vendor-id", "product-id", "serial-number", "by-id", "protocols", "line-settings", "name", "kind",
    ]

    static func parse(_ fields: TOMLFields) throws(ManifestProblem) -> AccessoryRule {
        try fields.rejectUnknownKeys(allowed: knownFields)
        func hexID(_ key: String) throws(ManifestProblem) -> String? {
            guard let value = try fields.string(key) else { return nil }
            let lowered = value.lowercased()
            guard lowered.count == 4, lowered.allSatisfy(\.isHexDigit) else {
                throw fields.problem(key, "'\(value)' is not a USB id of four hex digits")
            }
            return lowered
        }
        let rule = AccessoryRule(
            vendorID: try hexID("vendor-id"), productID: try hexID("product-id"),
            serialNumber: try fields.string("serial-number"), byID: try fields.string("by-id"),
            protocols: try fields.stringArray("protocols") ?? [], lineSettings: try fields.string("line-settings"),
            name: try fields.string("name"), kind: try fields.string("kind") ?? "serial")
        guard Self.kinds.contains(rule.kind) else {
            throw fields.problem("kind", "'\(rule.kind)' is not a kind of accessory (\(Self.kinds.joined(separator: " or ")))")
        }
        if rule.kind == "hid", rule.lineSettings != nil {
            throw fields.problem("line-settings", "a HID accessory has no line settings")
        }
        guard rule.vendorID != nil || rule.byID != nil else {
            throw fields.problem("vendor-id", "a rule needs vendor-id (and product-id) or by-id")
        }
        guard !rule.protocols.isEmpty else { throw fields.problem("protocols", "is required") }
        for (index, name) in rule.protocols.enumerated() where !ReverseDNS.isValid(name) {
            throw fields.problem("protocols[\(index)]", "'\(name)' is not a reverse-DNS protocol string")
        }
        return rule
    }
}

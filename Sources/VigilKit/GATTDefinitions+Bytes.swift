import VigilProtocol

/// Byte-valued builders for the peripheral role's definitions, whose values
/// travel as hex:
///
/// ```swift
/// let heartRate = GATTServiceDefinition(uuid: "180d", characteristics: [
///     .init(uuid: "2a37", properties: ["notify"]),                     // dynamic: updateValue
///     .init(uuid: "2a38", properties: ["read"], fixedValue: [0x01]),   // answered by the daemon
///     .init(uuid: "2a39", properties: ["write"]),                      // writeRequest events
/// ])
/// ```
extension GATTCharacteristicDefinition {
    /// A characteristic with a fixed value, answered by the daemon without
    /// waking the app (its properties must then be read-only: `read`, or an
    /// `encrypt-read`/`secure-read` variant).
    public init(uuid: String, properties: [String] = ["read"], fixedValue: [UInt8], descriptors: [GATTDescriptorDefinition]? = nil) {
        self.init(uuid: uuid, properties: properties, value: GATTHex.string(fixedValue), descriptors: descriptors)
    }

    /// The fixed value as bytes; nil for a dynamic characteristic (or a value that is not hex).
    public var fixedValue: [UInt8]? { value.flatMap(GATTHex.bytes) }
}

extension GATTDescriptorDefinition {
    public init(uuid: String, value: [UInt8]) {
        self.init(uuid: uuid, value: GATTHex.string(value))
    }

    /// A Characteristic User Description (0x2901): the text, UTF-8.
    public static func userDescription(_ text: String) -> GATTDescriptorDefinition {
        GATTDescriptorDefinition(uuid: "2901", value: Array(text.utf8))
    }
}

extension AdvertisementData {
    /// Manufacturer data as bytes, by company identifier (e.g. 0xFFFF for tests).
    public mutating func setManufacturerData(_ data: [UInt8], company: Int) {
        manufacturerData = (manufacturerData ?? [:]).merging([String(company): GATTHex.string(data)]) { _, new in new }
    }

    /// Service data as bytes, by service UUID.
    public mutating func setServiceData(_ data: [UInt8], service: String) {
        serviceData = (serviceData ?? [:]).merging([service: GATTHex.string(data)]) { _, new in new }
    }
}

/// Values as the peripheral role's definitions spell them: lowercase hex, two
/// digits per byte.
public enum GATTHex {
    public static func string(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var text = ""
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return text
    }

    /// Bytes from hex as people write it: `0x0102`, `01 02`, `01:02`, `0102`; nil if it is not hex.
    public static func bytes(_ text: String) -> [UInt8]? {
        var digits = Substring(text.lowercased())
        if digits.hasPrefix("0x") { digits.removeFirst(2) }
        let clean = digits.filter { $0 != " " && $0 != ":" && $0 != "-" && $0 != "\t" }
        guard clean.count % 2 == 0, clean.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(clean.count / 2)
        var index = clean.startIndex
        while index < clean.endIndex {
            let next = clean.index(index, offsetBy: 2)
            guard let byte = UInt8(clean[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}

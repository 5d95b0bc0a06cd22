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


import VigilKit

/// The Heart Rate Service's UUIDs, in the lowercase 128-bit form the daemon uses.
enum HeartRateService {
    static let service = uuid("180d")
    /// Heart Rate Measurement: notify.
    static let measurement = uuid("2a37")
    /// Body Sensor Location: read, one byte (optional in the service).
    static let bodySensorLocation = uuid("2a38")
    /// Heart Rate Control Point: write 0x01 to reset Energy Expended (not used by the bridge).
    static let controlPoint = uuid("2a39")

    private static func uuid(_ short: String) -> String { GATTUUID.canonical(short) ?? short }
}

extension Array where Element == GATTServiceInfo {
    /// The characteristic `characteristic` of service `service`, if listed.
    func characteristic(_ characteristic: String, of service: String) -> GATTCharacteristicInfo? {
        first { GATTUUID.matches($0.uuid, service) }?.characteristics.first { GATTUUID.matches($0.uuid, characteristic) }
    }

    var hasHeartRateService: Bool { contains { GATTUUID.matches($0.uuid, HeartRateService.service) } }
}

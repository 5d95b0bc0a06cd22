/// A RuuviTag reading in data format 5 ("RAWv2"), the openly specified
/// format RuuviTags broadcast in manufacturer data of company 0x0499
/// (docs.ruuvi.com, "Data format 5"). 24 bytes after the company id, all
/// big-endian:
///
/// | offset | field | unit |
/// | --- | --- | --- |
/// | 0 | format (5) | |
/// | 1-2 | temperature, int16 | 0.005 °C |
/// | 3-4 | humidity, uint16 | 0.0025 % |
/// | 5-6 | pressure, uint16 | Pa, offset -50000 |
/// | 7-12 | acceleration x, y, z, int16 | mG |
/// | 13-14 | power: battery (11 bits, mV above 1600), TX power (5 bits, 2 dBm above -40) | |
/// | 15 | movement counter | |
/// | 16-17 | measurement sequence number | |
/// | 18-23 | MAC address | |
///
/// Each field's all-ones value (0x8000 for the signed ones) means "not available": nil here.
struct RuuviReading: Equatable, Sendable {
    static let company = 0x0499
    static let format: UInt8 = 5

    var temperature: Double?
    var humidity: Double?
    var pressure: Double?
    var acceleration: (x: Int, y: Int, z: Int)?
    var batteryVoltage: Double?
    var txPower: Int?
    var movementCounter: Int?
    var sequence: Int?
    var mac: String

    /// nil for data that is not format 5 or is cut short.
    init?(manufacturerData data: [UInt8]) {
        guard data.count >= 24, data[0] == Self.format else { return nil }
        func u16(_ offset: Int) -> Int { Int(data[offset]) << 8 | Int(data[offset + 1]) }
        func i16(_ offset: Int) -> Int { Int(Int16(bitPattern: UInt16(u16(offset)))) }
        temperature = i16(1) == Int(Int16.min) ? nil : Double(i16(1)) * 0.005
        humidity = u16(3) == 0xFFFF ? nil : Double(u16(3)) * 0.0025
        pressure = u16(5) == 0xFFFF ? nil : Double(u16(5) + 50000)
        let axes = [i16(7), i16(9), i16(11)]
        acceleration = axes.contains(Int(Int16.min)) ? nil : (axes[0], axes[1], axes[2])
        let power = u16(13)
        batteryVoltage = power >> 5 == 0x7FF ? nil : Double((power >> 5) + 1600) / 1000
        txPower = power & 0x1F == 0x1F ? nil : (power & 0x1F) * 2 - 40
        movementCounter = data[15] == 0xFF ? nil : Int(data[15])
        sequence = u16(16) == 0xFFFF ? nil : u16(16)
        mac = data[18..<24].map { byte in
            let text = String(byte, radix: 16, uppercase: true)
            return text.count == 1 ? "0" + text : text
        }.joined(separator: ":")
    }

    static func == (lhs: RuuviReading, rhs: RuuviReading) -> Bool {
        lhs.temperature == rhs.temperature && lhs.humidity == rhs.humidity && lhs.pressure == rhs.pressure
            && lhs.acceleration?.x == rhs.acceleration?.x && lhs.acceleration?.y == rhs.acceleration?.y
            && lhs.acceleration?.z == rhs.acceleration?.z && lhs.batteryVoltage == rhs.batteryVoltage
            && lhs.txPower == rhs.txPower && lhs.movementCounter == rhs.movementCounter && lhs.sequence == rhs.sequence
            && lhs.mac == rhs.mac
    }
}

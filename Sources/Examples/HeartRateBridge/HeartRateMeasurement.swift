/// One value of the Heart Rate Measurement characteristic (0x2A37), decoded.
///
/// Layout (Heart Rate Service 1.0, all multi-byte fields little-endian):
///
/// | byte(s) | field |
/// | --- | --- |
/// | 0 | flags: bit 0 heart rate is uint16 (else uint8); bits 1-2 sensor contact (bit 2 detection supported, bit 1 contact detected); bit 3 Energy Expended present; bit 4 RR intervals present; bits 5-7 reserved (ignored) |
/// | 1 or 1-2 | heart rate, beats per minute |
/// | next 2 | Energy Expended, kJ (if bit 3) |
/// | the rest | RR intervals, uint16 each in 1/1024 s, oldest first (if bit 4) |
///
/// Decoding is strict: a value that ends inside a field, leaves an odd byte
/// in the RR intervals, or carries bytes after the last field its flags
/// announce is an error (the bridge then logs the raw bytes instead of
/// guessing). RR intervals flagged present with none in the value decode as
/// an empty list.
struct HeartRateMeasurement: Sendable, Equatable, Codable {
    /// Sensor contact status (flags bits 1-2).
    enum SensorContact: String, Sendable, Equatable, Codable, CaseIterable {
        /// Bit 2 clear: the sensor cannot tell (bit 1 is then meaningless).
        case notSupported
        /// Bit 2 set, bit 1 clear: poor or no contact.
        case notDetected
        /// Bits 2 and 1 set.
        case detected

        /// From the flags byte.
        init(flags: UInt8) {
            switch (flags >> 1) & 0b11 {
            case 0b11: self = .detected
            case 0b10: self = .notDetected
            default: self = .notSupported
            }
        }

        /// The flags bits (1-2) that say this.
        var flagBits: UInt8 {
            switch self {
            case .notSupported: 0
            case .notDetected: HeartRateMeasurement.Flags.contactSupported
            case .detected: HeartRateMeasurement.Flags.contactSupported | HeartRateMeasurement.Flags.contactDetected
            }
        }
    }

    enum Flags {
        static let uint16 = UInt8(0x01)
        static let contactDetected = UInt8(0x02)
        static let contactSupported = UInt8(0x04)
        static let energyExpended = UInt8(0x08)
        static let rrIntervals = UInt8(0x10)
    }

    /// Beats per minute.
    var heartRate: Int
    /// Whether the value carried the rate as uint16 (flags bit 0), whatever its size.
    var is16Bit: Bool
    var sensorContact: SensorContact
    /// Kilojoules since the last reset (control point 0x2A39, opcode 0x01); nil when not sent.
    var energyExpended: Int?
    /// RR intervals as sent: 1/1024 s units, oldest first.
    var rrIntervalsRaw: [UInt16]

    /// RR intervals in seconds (`raw / 1024`), oldest first.
    var rrIntervals: [Double] { rrIntervalsRaw.map { Double($0) / 1024 } }

    init(
        heartRate: Int, is16Bit: Bool = false, sensorContact: SensorContact = .notSupported, energyExpended: Int? = nil,
        rrIntervalsRaw: [UInt16] = []
    ) {
        self.heartRate = heartRate
        self.is16Bit = is16Bit
        self.sensorContact = sensorContact
        self.energyExpended = energyExpended
        self.rrIntervalsRaw = rrIntervalsRaw
    }

    /// Decodes one notification or read value.
    init(bytes: [UInt8]) throws(HeartRateMeasurementError) {
        guard let flags = bytes.first else { throw .empty }
        var reader = Reader(bytes: bytes, offset: 1)
        is16Bit = flags & Flags.uint16 != 0
        heartRate = is16Bit
            ? Int(try reader.uint16("heart rate (uint16)"))
            : Int(try reader.uint8("heart rate (uint8)"))
        sensorContact = SensorContact(flags: flags)
        energyExpended = flags & Flags.energyExpended != 0 ? Int(try reader.uint16("energy expended")) : nil
        var rr: [UInt16] = []
        if flags & Flags.rrIntervals != 0 {
            guard reader.remaining % 2 == 0 else {
                throw .truncated(
                    field: "RR interval \(reader.remaining / 2 + 1)", offset: bytes.count - 1, needed: 2, available: 1,
                    length: bytes.count)
            }
            while reader.remaining > 0 { rr.append(try reader.uint16("RR interval \(rr.count + 1)")) }
        }
        rrIntervalsRaw = rr
        guard reader.remaining == 0 else {
            throw .trailingBytes(count: reader.remaining, length: bytes.count, flags: flags)
        }
    }

    /// The value a sensor would send for this measurement (the inverse of
    /// `init(bytes:)`; an uint8 rate above 255 is truncated to its low byte).
    var bytes: [UInt8] {
        var flags = sensorContact.flagBits
        var body: [UInt8] = []
        if is16Bit {
            flags |= Flags.uint16
            body += Self.littleEndian(UInt16(truncatingIfNeeded: heartRate))
        } else {
            body.append(UInt8(truncatingIfNeeded: heartRate))
        }
        if let energyExpended {
            flags |= Flags.energyExpended
            body += Self.littleEndian(UInt16(truncatingIfNeeded: energyExpended))
        }
        if !rrIntervalsRaw.isEmpty {
            flags |= Flags.rrIntervals
            for rr in rrIntervalsRaw { body += Self.littleEndian(rr) }
        }
        return [flags] + body
    }

    private static func littleEndian(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

    // Codable: the stored fields, plus `rrIntervals` in seconds for readers of
    // the JSON (decoding ignores it: the raw values are the truth).
    private enum CodingKeys: String, CodingKey {
        case heartRate, is16Bit, sensorContact, energyExpended, rrIntervals, rrIntervalsRaw
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        heartRate = try c.decode(Int.self, forKey: .heartRate)
        is16Bit = try c.decode(Bool.self, forKey: .is16Bit)
        sensorContact = try c.decode(SensorContact.self, forKey: .sensorContact)
        energyExpended = try c.decodeIfPresent(Int.self, forKey: .energyExpended)
        rrIntervalsRaw = try c.decode([UInt16].self, forKey: .rrIntervalsRaw)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(heartRate, forKey: .heartRate)
        try c.encode(is16Bit, forKey: .is16Bit)
        try c.encode(sensorContact, forKey: .sensorContact)
        try c.encode(energyExpended, forKey: .energyExpended)  // null when absent: one schema for every line
        try c.encode(rrIntervals, forKey: .rrIntervals)
        try c.encode(rrIntervalsRaw, forKey: .rrIntervalsRaw)
    }
}

/// Why a Heart Rate Measurement (or Body Sensor Location) value could not be decoded.
enum HeartRateMeasurementError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A zero-length value: not even the flags byte.
    case empty
    /// The value ends inside `field`, which starts at byte `offset` and needs `needed` bytes.
    case truncated(field: String, offset: Int, needed: Int, available: Int, length: Int)
    /// Bytes after the last field the flags announce.
    case trailingBytes(count: Int, length: Int, flags: UInt8)
    /// A fixed-size value (Body Sensor Location) of another size.
    case wrongLength(field: String, length: Int, expected: Int)

    var description: String {
        switch self {
        case .empty:
            "empty value: a Heart Rate Measurement needs at least a flags byte and the heart rate"
        case let .truncated(field, offset, needed, available, length):
            "truncated value (\(length) byte\(length == 1 ? "" : "s")): \(field) at byte \(offset) needs "
                + "\(needed) byte\(needed == 1 ? "" : "s"), \(available) left"
        case let .trailingBytes(count, length, flags):
            "\(count) unexpected byte\(count == 1 ? "" : "s") at the end of a \(length)-byte value "
                + "(flags 0x\(String(flags, radix: 16, uppercase: false).leftPadded(to: 2)) announce no more fields)"
        case let .wrongLength(field, length, expected):
            "\(field): \(length) byte\(length == 1 ? "" : "s"), want \(expected)"
        }
    }
}

/// Little-endian fields from a byte array, with errors naming the field.
private struct Reader {
    let bytes: [UInt8]
    var offset: Int

    var remaining: Int { bytes.count - offset }

    mutating func uint8(_ field: String) throws(HeartRateMeasurementError) -> UInt8 {
        try need(1, field)
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint16(_ field: String) throws(HeartRateMeasurementError) -> UInt16 {
        try need(2, field)
        defer { offset += 2 }
        return UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
    }

    private func need(_ count: Int, _ field: String) throws(HeartRateMeasurementError) {
        guard remaining >= count else {
            throw .truncated(field: field, offset: offset, needed: count, available: max(remaining, 0), length: bytes.count)
        }
    }
}

/// Body Sensor Location (0x2A38): one byte.
enum BodySensorLocation: Sendable, Equatable, Hashable {
    case other, chest, wrist, finger, hand, earLobe, foot
    /// 7-255: reserved for future use; kept, not rejected.
    case reserved(UInt8)

    init(rawValue: UInt8) {
        switch rawValue {
        case 0: self = .other
        case 1: self = .chest
        case 2: self = .wrist
        case 3: self = .finger
        case 4: self = .hand
        case 5: self = .earLobe
        case 6: self = .foot
        default: self = .reserved(rawValue)
        }
    }

    /// Decodes a read of 0x2A38: exactly one byte.
    init(bytes: [UInt8]) throws(HeartRateMeasurementError) {
        guard bytes.count == 1 else { throw .wrongLength(field: "body sensor location", length: bytes.count, expected: 1) }
        self.init(rawValue: bytes[0])
    }

    var rawValue: UInt8 {
        switch self {
        case .other: 0
        case .chest: 1
        case .wrist: 2
        case .finger: 3
        case .hand: 4
        case .earLobe: 5
        case .foot: 6
        case let .reserved(value): value
        }
    }

    /// The name in the bridge's JSON: `other`, `chest`, `wrist`, `finger`,
    /// `hand`, `earLobe`, `foot`, or `reserved`.
    var name: String {
        switch self {
        case .other: "other"
        case .chest: "chest"
        case .wrist: "wrist"
        case .finger: "finger"
        case .hand: "hand"
        case .earLobe: "earLobe"
        case .foot: "foot"
        case .reserved: "reserved"
        }
    }
}

extension String {
    /// Left-padded with `pad` to at least `width` characters.
    func leftPadded(to width: Int, with pad: Character = "0") -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}

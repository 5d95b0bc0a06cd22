/// The line format of a serial heart-rate sensor (`--serial-protocol`), one
/// measurement per line, ASCII, ended by `\n` (a `\r` before it is ignored):
///
///     hr=72 contact=1 energy=105 rr=812,799
///
/// Fields are `key=value`, separated by spaces or tabs, in any order, each at
/// most once:
///
/// | key | value | in 0x2A37 |
/// | --- | --- | --- |
/// | `hr` (required) | beats per minute, 0-65535 | uint8 when <= 255, else uint16 (flags bit 0) |
/// | `contact` | `1` contact detected, `0` not detected; absent: the sensor cannot tell | flags bits 1-2 |
/// | `energy` | kilojoules, 0-65535; absent: not sent | Energy Expended (flags bit 3) |
/// | `rr` | RR intervals in 1/1024 s, 0-65535 each, oldest first, comma-separated; absent: none | RR intervals (flags bit 4) |
///
/// Blank lines are skipped. Anything else (an unknown or repeated key, a
/// value out of range, no `hr`, a value too long for one notification at the
/// default ATT MTU: 20 bytes) is malformed: the bridge writes an `error` line
/// with the line's bytes and publishes nothing for it.
enum SerialHeartRateLine: Sendable, Equatable {
    case measurement(HeartRateMeasurement)
    case blank
    case malformed(String)

    /// The largest 0x2A37 value that fits one notification at the default ATT MTU (23 - 3).
    static let maxValueLength = 20

    /// Parses one line, without its `\n`.
    init(_ line: some Collection<UInt8>) {
        var text = Substring(String(decoding: line, as: UTF8.self))
        while let last = text.last, last == "\r" || last == " " || last == "\t" { text = text.dropLast() }
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        if text.isEmpty {
            self = .blank
            return
        }
        switch Self.parse(text) {
        case let .success(measurement): self = .measurement(measurement)
        case let .failure(problem): self = .malformed(problem.message)
        }
    }

    struct Problem: Error, Equatable { var message: String }

    private static func parse(_ text: Substring) -> Result<HeartRateMeasurement, Problem> {
        var heartRate: Int?
        var contact = HeartRateMeasurement.SensorContact.notSupported
        var energy: Int?
        var rr: [UInt16] = []
        var seen: Set<Substring> = []
        for field in text.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
            guard let equals = field.firstIndex(of: "=") else {
                return .failure(Problem(message: "field '\(field)' is not key=value"))
            }
            let key = field[..<equals]
            let value = field[field.index(after: equals)...]
            guard seen.insert(key).inserted else { return .failure(Problem(message: "'\(key)' given twice")) }
            switch key {
            case "hr":
                guard let number = uint16(value) else { return .failure(Problem(message: "hr '\(value)' is not 0-65535")) }
                heartRate = Int(number)
            case "contact":
                switch value {
                case "1": contact = .detected
                case "0": contact = .notDetected
                default: return .failure(Problem(message: "contact '\(value)' is not 0 or 1"))
                }
            case "energy":
                guard let number = uint16(value) else { return .failure(Problem(message: "energy '\(value)' is not 0-65535")) }
                energy = Int(number)
            case "rr":
                for item in value.split(separator: ",", omittingEmptySubsequences: false) {
                    guard let number = uint16(item) else {
                        return .failure(Problem(message: "rr '\(value)' is not a list of 0-65535"))
                    }
                    rr.append(number)
                }
            default:
                return .failure(Problem(message: "unknown key '\(key)'"))
            }
        }
        guard let heartRate else { return .failure(Problem(message: "no hr")) }
        let measurement = HeartRateMeasurement(
            heartRate: heartRate, is16Bit: heartRate > 255, sensorContact: contact, energyExpended: energy, rrIntervalsRaw: rr)
        let length = measurement.bytes.count
        guard length <= maxValueLength else {
            return .failure(Problem(message: "\(rr.count) RR intervals make a \(length)-byte value, more than \(maxValueLength)"))
        }
        return .success(measurement)
    }

    /// Decimal digits only (no sign, no spaces), 0-65535.
    private static func uint16(_ text: Substring) -> UInt16? {
        guard !text.isEmpty, text.count <= 5, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return UInt16(text)
    }
}

/// Cuts a byte stream, in chunks cut anywhere, into lines. A line longer
/// than `maxLineLength` is reported once as too long and dropped up to the
/// next newline, so memory stays bounded.
struct LineSplitter: Sendable, Equatable {
    static let maxLineLength = 256

    enum Piece: Sendable, Equatable {
        case line([UInt8])
        /// The first `maxLineLength` bytes of an overlong line.
        case tooLong([UInt8])
    }

    private(set) var pending: [UInt8] = []
    private(set) var discarding = false

    mutating func feed(_ chunk: some Sequence<UInt8>) -> [Piece] {
        var pieces: [Piece] = []
        for byte in chunk {
            if byte == UInt8(ascii: "\n") {
                if discarding {
                    discarding = false
                } else {
                    pieces.append(.line(pending))
                }
                pending = []
            } else if !discarding {
                pending.append(byte)
                if pending.count > Self.maxLineLength {
                    pieces.append(.tooLong(Array(pending.prefix(Self.maxLineLength))))
                    pending = []
                    discarding = true
                }
            }
        }
        return pieces
    }

    /// Drops an unfinished line (the stream broke off); returns it if there was one.
    mutating func reset() -> [UInt8]? {
        defer {
            pending = []
            discarding = false
        }
        return pending.isEmpty ? nil : pending
    }
}

/// Energy Expended as the bridge publishes it for a serial sensor: the
/// sensor's count minus the count at the last reset (control point 0x01).
/// A count below the offset means the sensor restarted its count: the offset
/// is dropped.
struct EnergyOffset: Sendable, Equatable {
    private(set) var offset = 0
    private(set) var lastSeen: Int?

    mutating func apply(_ measurement: HeartRateMeasurement) -> HeartRateMeasurement {
        guard let energy = measurement.energyExpended else { return measurement }
        lastSeen = energy
        if energy < offset { offset = 0 }
        var adjusted = measurement
        adjusted.energyExpended = energy - offset
        return adjusted
    }

    /// Control point 0x01: the next measurements count from the last one seen.
    mutating func reset() { offset = lastSeen ?? 0 }
}

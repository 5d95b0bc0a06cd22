import Foundation

/// One line of the bridge's output: a JSON object with `kind`, `time` (wall
/// clock, ISO 8601 UTC with milliseconds), `monotonicNs` (CLOCK_MONOTONIC) and
/// the fields of its kind. Keys are sorted; absent optional fields are `null`.
///
/// | kind | fields |
/// | --- | --- |
/// | `started` | `pid`, `app`, `launchReason`, `state`, `restoreIdentifier`, `address` (the `--address` option or null) |
/// | `lifecycle` | `notification` (`didEnterBackground`, ...), `state` |
/// | `restored` | `peripherals` (addresses the daemon kept for the manager), `address` (the one the bridge follows, or null), `connected`, `subscribed`, `scanServices` |
/// | `bluetoothState` | `state` (`poweredOn`, ...) |
/// | `scanning` | `services` |
/// | `discovered` | `address`, `name`, `rssi` |
/// | `connecting` | `address` |
/// | `connected` | `address` |
/// | `subscribed` | `address`, `service`, `characteristic` |
/// | `bodySensorLocation` | `address`, `location` (`chest`, `earLobe`, ..., `reserved`), `value` (the byte), `raw` (hex) |
/// | `measurement` | `address`, `heartRate`, `is16Bit`, `sensorContact` (`notSupported`, `notDetected`, `detected`), `energyExpended` (kJ or null), `rrIntervals` (seconds), `rrIntervalsRaw` (1/1024 s), `raw` (hex) |
/// | `disconnected` | `address`, `reason`, `willReconnect` |
/// | `error` | `operation`, `message`, `address`, `raw` (hex of the value that failed to decode, or null) |
/// | `published` | `restored` (the daemon kept the service from an earlier process: not published again), `localName` (advertised, or null) |
/// | `subscribers` | `characteristic`, `subscribed` (a central subscribed / the last one left) |
/// | `controlPoint` | `raw` (hex of the write to 0x2A39), `action` (`resetEnergyExpended`, `forwarded`, `refused`) |
/// | `accessory` | `event` (`opened`, `interrupted`, `reopened`, `closed`), `source` (`serial:` and the serial number or device node), `session`, `detail` |
///
/// A serial sensor's measurements have `address` `serial:<serial number or device node>`.
struct OutputLine: Sendable, Equatable {
    /// Wall clock, milliseconds since the Unix epoch (what `time` shows).
    var timeMs: Int64
    /// CLOCK_MONOTONIC in nanoseconds (the clock of vigild's deadlines).
    var monotonicNs: UInt64
    var record: Record

    enum Record: Sendable, Equatable {
        case started(pid: Int, app: String, launchReason: String, state: String, restoreIdentifier: String, address: String?)
        case lifecycle(notification: String, state: String)
        case restored(peripherals: [String], address: String?, connected: Bool, subscribed: Bool, scanServices: [String]?)
        case bluetoothState(String)
        case scanning(services: [String])
        case discovered(address: String, name: String?, rssi: Int?)
        case connecting(address: String)
        case connected(address: String)
        case subscribed(address: String, service: String, characteristic: String)
        case bodySensorLocation(address: String, location: BodySensorLocation, raw: [UInt8])
        case measurement(address: String, measurement: HeartRateMeasurement, raw: [UInt8])
        case disconnected(address: String, reason: String, willReconnect: Bool)
        case error(operation: String, message: String, address: String?, raw: [UInt8]?)
        case published(restored: Bool, localName: String?)
        case subscribers(characteristic: String, subscribed: Bool)
        case controlPoint(raw: [UInt8], action: String)
        case accessory(event: String, source: String, session: Int?, detail: String?)

        var kind: String {
            switch self {
            case .started: "started"
            case .lifecycle: "lifecycle"
            case .restored: "restored"
            case .bluetoothState: "bluetoothState"
            case .scanning: "scanning"
            case .discovered: "discovered"
            case .connecting: "connecting"
            case .connected: "connected"
            case .subscribed: "subscribed"
            case .bodySensorLocation: "bodySensorLocation"
            case .measurement: "measurement"
            case .disconnected: "disconnected"
            case .error: "error"
            case .published: "published"
            case .subscribers: "subscribers"
            case .controlPoint: "controlPoint"
            case .accessory: "accessory"
            }
        }
    }

    init(timeMs: Int64, monotonicNs: UInt64, record: Record) {
        self.timeMs = timeMs
        self.monotonicNs = monotonicNs
        self.record = record
    }

    /// Stamped now.
    init(_ record: Record) {
        self.init(timeMs: Self.wallClockMs(), monotonicNs: Self.monotonicNs(), record: record)
    }

    static func wallClockMs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    static func monotonicNs() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// The line, without its newline.
    func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Every field is a string, number, bool, array or null: encoding cannot fail.
        let data = (try? encoder.encode(self)) ?? Data(#"{"kind":"error","message":"unencodable line"}"#.utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses a line written by `json()` (tests, tools).
    init(json: String) throws {
        self = try JSONDecoder().decode(OutputLine.self, from: Data(json.utf8))
    }
}

// MARK: JSON

extension OutputLine: Codable {
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        func put<T: Encodable>(_ key: String, _ value: T) throws { try c.encode(value, forKey: Key(key)) }
        try put("kind", record.kind)
        try put("time", Timestamp.iso8601(ms: timeMs))
        try put("monotonicNs", monotonicNs)
        switch record {
        case let .started(pid, app, launchReason, state, restoreIdentifier, address):
            try put("pid", pid)
            try put("app", app)
            try put("launchReason", launchReason)
            try put("state", state)
            try put("restoreIdentifier", restoreIdentifier)
            try put("address", address)
        case let .lifecycle(notification, state):
            try put("notification", notification)
            try put("state", state)
        case let .restored(peripherals, address, connected, subscribed, scanServices):
            try put("peripherals", peripherals)
            try put("address", address)
            try put("connected", connected)
            try put("subscribed", subscribed)
            try put("scanServices", scanServices)
        case let .bluetoothState(state):
            try put("state", state)
        case let .scanning(services):
            try put("services", services)
        case let .discovered(address, name, rssi):
            try put("address", address)
            try put("name", name)
            try put("rssi", rssi)
        case let .connecting(address), let .connected(address):
            try put("address", address)
        case let .subscribed(address, service, characteristic):
            try put("address", address)
            try put("service", service)
            try put("characteristic", characteristic)
        case let .bodySensorLocation(address, location, raw):
            try put("address", address)
            try put("location", location.name)
            try put("value", Int(location.rawValue))
            try put("raw", Hex.string(raw))
        case let .measurement(address, m, raw):
            try put("address", address)
            try put("heartRate", m.heartRate)
            try put("is16Bit", m.is16Bit)
            try put("sensorContact", m.sensorContact)
            try put("energyExpended", m.energyExpended)
            try put("rrIntervals", m.rrIntervals)
            try put("rrIntervalsRaw", m.rrIntervalsRaw)
            try put("raw", Hex.string(raw))
        case let .disconnected(address, reason, willReconnect):
            try put("address", address)
            try put("reason", reason)
            try put("willReconnect", willReconnect)
        case let .error(operation, message, address, raw):
            try put("operation", operation)
            try put("message", message)
            try put("address", address)
            try put("raw", raw.map(Hex.string))
        case let .published(restored, localName):
            try put("restored", restored)
            try put("localName", localName)
        case let .subscribers(characteristic, subscribed):
            try put("characteristic", characteristic)
            try put("subscribed", subscribed)
        case let .controlPoint(raw, action):
            try put("raw", Hex.string(raw))
            try put("action", action)
        case let .accessory(event, source, session, detail):
            try put("event", event)
            try put("source", source)
            try put("session", session)
            try put("detail", detail)
        }
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        func get<T: Decodable>(_ key: String, as type: T.Type = T.self) throws -> T { try c.decode(T.self, forKey: Key(key)) }
        func maybe<T: Decodable>(_ key: String, as type: T.Type = T.self) throws -> T? {
            try c.decodeIfPresent(T.self, forKey: Key(key))
        }
        func bytes(_ key: String) throws -> [UInt8] {
            let text: String = try get(key)
            guard let bytes = Hex.bytes(text) else {
                throw DecodingError.dataCorruptedError(forKey: Key(key), in: c, debugDescription: "not hex: \(text)")
            }
            return bytes
        }
        let time: String = try get("time")
        guard let ms = Timestamp.parseISO8601(time) else {
            throw DecodingError.dataCorruptedError(forKey: Key("time"), in: c, debugDescription: "not an ISO 8601 time: \(time)")
        }
        timeMs = ms
        monotonicNs = try get("monotonicNs")
        let kind: String = try get("kind")
        switch kind {
        case "started":
            record = .started(
                pid: try get("pid"), app: try get("app"), launchReason: try get("launchReason"), state: try get("state"),
                restoreIdentifier: try get("restoreIdentifier"), address: try maybe("address"))
        case "lifecycle":
            record = .lifecycle(notification: try get("notification"), state: try get("state"))
        case "restored":
            record = .restored(
                peripherals: try get("peripherals"), address: try maybe("address"), connected: try get("connected"),
                subscribed: try get("subscribed"), scanServices: try maybe("scanServices"))
        case "bluetoothState":
            record = .bluetoothState(try get("state"))
        case "scanning":
            record = .scanning(services: try get("services"))
        case "discovered":
            record = .discovered(address: try get("address"), name: try maybe("name"), rssi: try maybe("rssi"))
        case "connecting":
            record = .connecting(address: try get("address"))
        case "connected":
            record = .connected(address: try get("address"))
        case "subscribed":
            record = .subscribed(address: try get("address"), service: try get("service"), characteristic: try get("characteristic"))
        case "bodySensorLocation":
            let value: Int = try get("value")
            guard let byte = UInt8(exactly: value) else {
                throw DecodingError.dataCorruptedError(forKey: Key("value"), in: c, debugDescription: "not a byte: \(value)")
            }
            record = .bodySensorLocation(address: try get("address"), location: BodySensorLocation(rawValue: byte), raw: try bytes("raw"))
        case "measurement":
            let measurement = HeartRateMeasurement(
                heartRate: try get("heartRate"), is16Bit: try get("is16Bit"), sensorContact: try get("sensorContact"),
                energyExpended: try maybe("energyExpended"), rrIntervalsRaw: try get("rrIntervalsRaw"))
            record = .measurement(address: try get("address"), measurement: measurement, raw: try bytes("raw"))
        case "disconnected":
            record = .disconnected(address: try get("address"), reason: try get("reason"), willReconnect: try get("willReconnect"))
        case "error":
            let raw: String? = try maybe("raw")
            record = .error(
                operation: try get("operation"), message: try get("message"), address: try maybe("address"),
                raw: try raw.map { _ in try bytes("raw") })
        case "published":
            record = .published(restored: try get("restored"), localName: try maybe("localName"))
        case "subscribers":
            record = .subscribers(characteristic: try get("characteristic"), subscribed: try get("subscribed"))
        case "controlPoint":
            record = .controlPoint(raw: try bytes("raw"), action: try get("action"))
        case "accessory":
            record = .accessory(
                event: try get("event"), source: try get("source"), session: try maybe("session"), detail: try maybe("detail"))
        default:
            throw DecodingError.dataCorruptedError(forKey: Key("kind"), in: c, debugDescription: "unknown kind '\(kind)'")
        }
    }
}

/// Lowercase hex without separators, as the lab's peers log values.
enum Hex {
    static func string(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func bytes(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let high = nibble(chars[i]), let low = nibble(chars[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }
}

/// `2025-11-21T09:27:03.512Z`: UTC, milliseconds, no locale or formatter state.
enum Timestamp {
    static func iso8601(ms: Int64) -> String {
        var seconds = time_t(ms.floorDiv(1000))
        let millis = Int(ms - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String { String(value).leftPadded(to: width) }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))"
            + "T\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))"
            + ".\(String(millis).leftPadded(to: 3))Z"
    }

    /// Parses exactly the form `iso8601(ms:)` writes.
    static func parseISO8601(_ text: String) -> Int64? {
        let u = Array(text.utf8)
        guard u.count == 24, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"), u[10] == UInt8(ascii: "T"),
            u[13] == UInt8(ascii: ":"), u[16] == UInt8(ascii: ":"), u[19] == UInt8(ascii: "."), u[23] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for c in u[range] {
                guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int32(c - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), let millis = number(20..<23),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = month - 1
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        return Int64(timegm(&parts)) * 1000 + Int64(millis)
    }
}

extension Int64 {
    /// Division rounding towards minus infinity (times before 1970 stay correct).
    fileprivate func floorDiv(_ divisor: Int64) -> Int64 {
        let q = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? q - 1 : q
    }
}

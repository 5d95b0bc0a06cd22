// Bluetooth LE advertisement monitors: broadcast sensors whose readings are
// in their advertisements (docs/protocol.md, "Advertisement monitors").
//
// A monitor is a set of patterns on advertising data; a device that matches
// one is "found" (`ble.monitor.found`), every advertisement it sends after
// that is a reading (`ble.monitor.advertisements`, batched), and when none
// has come for the monitor's `lostTimeout` it is "lost" (`ble.monitor.lost`).

/// One pattern on advertising data. A device matches a monitor when any of
/// its patterns matches (BlueZ's `or_patterns`).
public struct MonitorPattern: Codable, Sendable, Equatable, Hashable {
    /// `manufacturer` (company id and a prefix of its data), `service` (a
    /// service data UUID and a prefix of its data), `name` (a prefix of the
    /// local name), or `uuid` (an advertised service UUID).
    public var type: String
    /// `manufacturer`: the company identifier (0...65535).
    public var company: Int?
    /// `service`, `uuid`: the service UUID (16-bit short form allowed).
    public var uuid: String?
    /// `manufacturer`, `service`: the first bytes of the data, as hex ("" or absent: any data).
    public var prefix: String?
    /// `name`: the first characters of the local name.
    public var name: String?

    public init(type: String, company: Int? = nil, uuid: String? = nil, prefix: String? = nil, name: String? = nil) {
        self.type = type
        self.company = company
        self.uuid = uuid
        self.prefix = prefix
        self.name = name
    }

    public static func manufacturer(_ company: Int, prefix: [UInt8] = []) -> MonitorPattern {
        MonitorPattern(type: "manufacturer", company: company, prefix: prefix.isEmpty ? nil : GATTHex.string(prefix))
    }

    public static func serviceData(_ uuid: String, prefix: [UInt8] = []) -> MonitorPattern {
        MonitorPattern(type: "service", uuid: uuid, prefix: prefix.isEmpty ? nil : GATTHex.string(prefix))
    }

    public static func localName(_ prefix: String) -> MonitorPattern { MonitorPattern(type: "name", name: prefix) }

    public static func serviceUUID(_ uuid: String) -> MonitorPattern { MonitorPattern(type: "uuid", uuid: uuid) }

    public static let types: Set<String> = ["manufacturer", "service", "name", "uuid"]
}

/// Request: start (or replace) the monitor `monitor` of this client. Reply:
/// `Done`. Allowed in the background without a service UUID: a monitor is
/// bounded by its patterns.
public struct StartMonitor: Message, Equatable {
    public static let type = "ble.monitor.start"
    /// The client's name for it (1-64 characters), in its events.
    public var monitor: String
    public var patterns: [MonitorPattern]
    /// A device is found only from an advertisement at least this strong (dBm).
    public var rssiFound: Int?
    /// Advertisements weaker than this (dBm) count as not heard, so a device
    /// that stays below it is lost after `lostTimeout`.
    public var rssiLost: Int?
    /// Seconds without a matching advertisement after which a found device
    /// is lost (default 10, 1...3600).
    public var lostTimeout: Double?
    /// Deliver every advertisement of a found device (default true); false:
    /// only found and lost.
    public var advertisements: Bool?

    public init(
        monitor: String, patterns: [MonitorPattern], rssiFound: Int? = nil, rssiLost: Int? = nil,
        lostTimeout: Double? = nil, advertisements: Bool? = nil
    ) {
        self.monitor = monitor
        self.patterns = patterns
        self.rssiFound = rssiFound
        self.rssiLost = rssiLost
        self.lostTimeout = lostTimeout
        self.advertisements = advertisements
    }

    public static let defaultLostTimeout = 10.0
    public static let lostTimeoutRange = 1.0...3600.0
    /// The most monitors one client may have, and patterns one monitor may hold.
    public static let maxMonitors = 16
    public static let maxPatterns = 16
}

/// Request: stop the monitor `monitor` (stopping one that is not running is
/// not an error). Reply: `Done`.
public struct StopMonitor: Message, Equatable {
    public static let type = "ble.monitor.stop"
    public var monitor: String
    public init(monitor: String) { self.monitor = monitor }
}

/// Request: this client's monitors and how they run. Reply: `MonitorList`.
public struct ListMonitors: Message, Equatable {
    public static let type = "ble.monitors"
    public init() {}
}

public struct MonitorList: Message, Equatable {
    public static let type = "reply"
    public var monitors: [MonitorInfo]
    public init(monitors: [MonitorInfo]) { self.monitors = monitors }
}

public struct MonitorInfo: Codable, Sendable, Equatable {
    public var monitor: String
    public var patterns: [MonitorPattern]
    /// `active`: discovery with duplicate data on (every advertisement);
    /// see docs/bluetooth.md for why not BlueZ's passive AdvertisementMonitor1.
    public var scanning: String
    /// The addresses found and not lost since.
    public var found: [String]
    /// Advertisements delivered, and lost because the client fell behind.
    public var delivered: Int
    public var lost: Int
    public init(monitor: String, patterns: [MonitorPattern], scanning: String, found: [String], delivered: Int, lost: Int) {
        self.monitor = monitor
        self.patterns = patterns
        self.scanning = scanning
        self.found = found
        self.delivered = delivered
        self.lost = lost
    }
}

public enum MonitorEventKind {
    /// A device matched: `monitor`, `peripheral`, `rssi` (if known), `name` (if known).
    public static let found = "ble.monitor.found"
    /// No matching advertisement for `lostTimeout`: `monitor`, `peripheral`.
    public static let lost = "ble.monitor.lost"
    /// Advertisements of found devices: `monitor`, `framing` ("adv1"), and
    /// `lost` (advertisements dropped before this batch, when > 0); the body
    /// is `AdvertisementRecords`.
    public static let advertisements = "ble.monitor.advertisements"
}

/// One advertisement as data: when it was received, from whom, how strong,
/// and its advertising data as AD structures.
public struct AdvertisementRecord: Sendable, Equatable {
    /// CLOCK_REALTIME when vigild received it, in nanoseconds since 1970.
    public var receivedAt: UInt64
    /// "AA:BB:CC:DD:EE:FF".
    public var address: String
    public var randomAddress: Bool
    /// dBm; nil when BlueZ did not report one.
    public var rssi: Int?
    /// AD structures, each `length, type, data` (Core Specification Vol 3
    /// Part C §11), rebuilt from what BlueZ reports (see docs/bluetooth.md).
    public var data: [UInt8]

    public init(receivedAt: UInt64, address: String, randomAddress: Bool = false, rssi: Int?, data: [UInt8]) {
        self.receivedAt = receivedAt
        self.address = address
        self.randomAddress = randomAddress
        self.rssi = rssi
        self.data = data
    }

    /// The AD structures as (type, data), in order; a cut-short tail is left out.
    public var structures: [(type: UInt8, data: [UInt8])] {
        var result: [(UInt8, [UInt8])] = []
        var offset = 0
        while offset < data.count {
            let length = Int(data[offset])
            guard length > 0, offset + 1 + length <= data.count else { break }
            result.append((data[offset + 1], Array(data[offset + 2..<offset + 1 + length])))
            offset += 1 + length
        }
        return result
    }

    /// Company id -> data, from AD type 0xFF.
    public var manufacturerData: [Int: [UInt8]] {
        var result: [Int: [UInt8]] = [:]
        for structure in structures where structure.type == 0xFF && structure.data.count >= 2 {
            result[Int(structure.data[0]) | Int(structure.data[1]) << 8] = Array(structure.data.dropFirst(2))
        }
        return result
    }

    /// The complete (0x09) or shortened (0x08) local name.
    public var localName: String? {
        structures.first { $0.type == 0x09 || $0.type == 0x08 }.map { String(decoding: $0.data, as: UTF8.self) }
    }
}

/// The body of a `ble.monitor.advertisements` event (`framing: "adv1"`):
/// records one after another, each
///
/// - `u16le n`: the length of the rest of the record;
/// - `u64le` receive time (ns since 1970, CLOCK_REALTIME);
/// - 6 bytes of address, most significant first; `u8` address type (0 public, 1 random);
/// - `i8` RSSI in dBm (127: not known);
/// - n - 16 bytes of AD structures.
public enum AdvertisementRecords {
    public static let framing = "adv1"
    static let fixedLength = 16
    /// An advertising data part is at most 255 bytes (extended advertising 1650): bounded to fit u16.
    public static let maxDataLength = 0xFFFF - fixedLength

    public static func append(_ record: AdvertisementRecord, to bytes: inout [UInt8]) {
        let data = record.data.prefix(maxDataLength)
        let length = fixedLength + data.count
        bytes.append(UInt8(truncatingIfNeeded: length))
        bytes.append(UInt8(truncatingIfNeeded: length >> 8))
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: record.receivedAt >> UInt64(shift))) }
        bytes.append(contentsOf: addressBytes(record.address) ?? [0, 0, 0, 0, 0, 0])
        bytes.append(record.randomAddress ? 1 : 0)
        let rssi = record.rssi.map { max(-128, min(126, $0)) } ?? 127
        bytes.append(UInt8(bitPattern: Int8(rssi)))
        bytes.append(contentsOf: data)
    }

    public static func encode(_ records: [AdvertisementRecord]) -> [UInt8] {
        var bytes: [UInt8] = []
        for record in records { append(record, to: &bytes) }
        return bytes
    }

    /// Throws `invalidArgument` for an unknown framing or a body that is not whole records.
    public static func decode(_ body: [UInt8], attributes: [String: JSONValue]) throws(ProtocolError) -> [AdvertisementRecord] {
        guard attributes["framing"] == .string(framing) else {
            throw ProtocolError(.invalidArgument, "\(MonitorEventKind.advertisements): unknown framing \(attributes["framing"].map { "\($0)" } ?? "(none)")")
        }
        var records: [AdvertisementRecord] = []
        var offset = 0
        while offset < body.count {
            guard body.count - offset >= 2 else {
                throw ProtocolError(.invalidArgument, "\(MonitorEventKind.advertisements): a record is cut short at byte \(offset) of \(body.count)")
            }
            let length = Int(body[offset]) | Int(body[offset + 1]) << 8
            let start = offset + 2
            guard length >= fixedLength, body.count - start >= length else {
                throw ProtocolError(.invalidArgument, "\(MonitorEventKind.advertisements): a record of \(length) bytes at byte \(offset) of \(body.count) is malformed")
            }
            var time: UInt64 = 0
            for index in 0..<8 { time |= UInt64(body[start + index]) << UInt64(8 * index) }
            let address = body[start + 8..<start + 14].map { byte in
                let text = String(byte, radix: 16, uppercase: true)
                return text.count == 1 ? "0" + text : text
            }.joined(separator: ":")
            let rssiByte = Int8(bitPattern: body[start + 15])
            records.append(AdvertisementRecord(
                receivedAt: time, address: address, randomAddress: body[start + 14] == 1,
                rssi: rssiByte == 127 ? nil : Int(rssiByte), data: Array(body[start + fixedLength..<start + length])))
            offset = start + length
        }
        return records
    }

    static func addressBytes(_ address: String) -> [UInt8]? {
        let parts = address.split(separator: ":")
        guard parts.count == 6 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard part.count == 2, let byte = UInt8(part, radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }
}

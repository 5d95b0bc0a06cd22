import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit
import VigilProtocol

/// `vigilctl ble monitor`: an advertisement monitor on this connection; prints
/// found, lost, and every advertisement of a found device, until the timeout
/// or Ctrl-C (the monitor ends with the connection).
struct BleMonitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "monitor",
        abstract: "Monitor advertisements by pattern and print every one of each matching device.",
        discussion: """
            Patterns (any may match): --manufacturer COMPANY[:HEXPREFIX] (company id, decimal or 0x hex), \
            --service-data UUID[:HEXPREFIX], --name PREFIX, --uuid UUID. Each line: time received, \
            address, RSSI, then manufacturer data, service data and name. With --json, one JSON object a line.
            """
    )

    @OptionGroup var options: GlobalOptions

    @Option(name: .customLong("manufacturer"), help: "Manufacturer data of this company, starting with the prefix (e.g. 0x0499:05).")
    var manufacturers: [String] = []

    @Option(name: .customLong("service-data"), help: "Service data of this UUID, starting with the prefix (e.g. fcd2:40).")
    var serviceData: [String] = []

    @Option(name: .customLong("name"), help: "A local name starting with this.")
    var names: [String] = []

    @Option(name: .customLong("uuid"), help: "An advertised service UUID.")
    var uuids: [String] = []

    @Option(help: "Found only from an advertisement at least this strong (dBm).")
    var rssiFound: Int?

    @Option(help: "Advertisements weaker than this (dBm) count as not heard.")
    var rssiLost: Int?

    @Option(help: "Seconds without an advertisement before a device is lost (default 10).")
    var lostTimeout: Double?

    @Option(help: "Stop after this many seconds (default: until interrupted).")
    var timeout: Double?

    func patterns() throws -> [MonitorPattern] {
        func split(_ text: String) -> (String, [UInt8]) {
            let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
            return (parts.first ?? "", parts.count > 1 ? GATTHex.bytes(parts[1]) ?? [] : [])
        }
        var result: [MonitorPattern] = []
        for text in manufacturers {
            let (company, prefix) = split(text)
            let value = company.lowercased().hasPrefix("0x") ? Int(company.dropFirst(2), radix: 16) : Int(company)
            guard let value else { throw ValidationError("'\(company)' is not a company identifier") }
            result.append(.manufacturer(value, prefix: prefix))
        }
        for text in serviceData {
            let (uuid, prefix) = split(text)
            result.append(.serviceData(uuid, prefix: prefix))
        }
        result += names.map(MonitorPattern.localName) + uuids.map(MonitorPattern.serviceUUID)
        guard !result.isEmpty else { throw ValidationError("give at least one pattern (--manufacturer, --service-data, --name, --uuid)") }
        return result
    }

    func run() async throws {
        let patterns = try patterns()
        let client = try await options.connect()
        try await requireBluetooth(client)
        let events = client.bluetoothEvents()
        try await client.startMonitor(StartMonitor(
            monitor: "vigilctl", patterns: patterns, rssiFound: rssiFound, rssiLost: rssiLost, lostTimeout: lostTimeout))
        let json = options.json
        let ended: Void? = await race(timeout) {
            for await event in events {
                switch event {
                case let .monitorFound(_, peripheral, rssi, name):
                    var members: [String: JSONValue] = ["event": "found", "peripheral": .string(peripheral)]
                    if let rssi { members["rssi"] = .number(Double(rssi)) }
                    if let name { members["name"] = .string(name) }
                    emitLine(json ? MonitorLine.json(members)
                        : "found \(peripheral)" + (rssi.map { " \($0) dBm" } ?? "") + (name.map { " \($0)" } ?? ""))
                case let .monitorLost(_, peripheral):
                    emitLine(json ? MonitorLine.json(["event": "lost", "peripheral": .string(peripheral)]) : "lost \(peripheral)")
                case let .advertisementsLost(_, count):
                    emitLine(json ? MonitorLine.json(["event": "dropped", "count": .number(Double(count))]) : "dropped \(count) advertisement(s)")
                case let .advertisement(_, record):
                    emitLine(json ? MonitorLine.json(MonitorLine.members(record)) : MonitorLine.text(record))
                default:
                    continue
                }
            }
        }
        guard ended == nil else { throw ProtocolError(.disconnected, "vigild closed the connection") }
        try await client.stopMonitor("vigilctl")
    }
}

enum MonitorLine {
    static func members(_ record: AdvertisementRecord) -> [String: JSONValue] {
        var members: [String: JSONValue] = [
            "event": "advertisement", "time": .number(Double(record.receivedAt) / 1e9), "peripheral": .string(record.address),
            "data": .string(GATTHex.string(record.data)),
            "manufacturerData": .object(Dictionary(uniqueKeysWithValues: record.manufacturerData.map {
                (String($0.key), JSONValue.string(GATTHex.string($0.value)))
            })),
        ]
        if let rssi = record.rssi { members["rssi"] = .number(Double(rssi)) }
        if let name = record.localName { members["name"] = .string(name) }
        return members
    }

    static func text(_ record: AdvertisementRecord) -> String {
        let seconds = Double(record.receivedAt) / 1e9
        var parts = [cFormat("%.3f", seconds), record.address, record.rssi.map { "\($0) dBm" } ?? "- dBm"]
        for (company, data) in record.manufacturerData.sorted(by: { $0.key < $1.key }) {
            parts.append(cFormat("mfr 0x%04x ", Int(company)) + GATTHex.string(data))
        }
        for structure in record.structures where structure.type == 0x16 && structure.data.count >= 2 {
            let uuid = cFormat("%04x", Int(structure.data[0]) | Int(structure.data[1]) << 8)
            parts.append("svc \(uuid) \(GATTHex.string(Array(structure.data.dropFirst(2))))")
        }
        if let name = record.localName { parts.append("name \(name)") }
        return parts.joined(separator: " ")
    }

    /// One line: compact, keys sorted (whole numbers without a fraction).
    static func json(_ members: [String: JSONValue]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(members) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

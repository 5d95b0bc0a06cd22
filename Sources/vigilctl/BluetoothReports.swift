import FoundationEssentials
import Glibc
import VigilKit
import VigilProtocol

/// `vigilctl ble devices`: one line per peripheral the daemon knows.
struct PeripheralTable {
    let peripherals: [PeripheralInfo]

    init(_ peripherals: [PeripheralInfo]) { self.peripherals = peripherals }

    var text: String {
        var table = Table(headers: ["ADDRESS", "ADAPTER", "TYPE", "NAME", "RSSI", "STATE", "BOND", "MTU", "SERVICES"])
        for peripheral in peripherals {
            table.rows.append([
                peripheral.address, peripheral.adapter ?? "-", peripheral.addressType, dashIfEmpty(peripheral.name ?? ""),
                peripheral.rssi.map(String.init) ?? "-", peripheral.state, Self.bond(peripheral),
                peripheral.mtu.map(String.init) ?? "-",
                dashIfEmpty(peripheral.serviceUUIDs.map(GATTUUID.short).joined(separator: ",")),
            ])
        }
        return table.text
    }

    /// "bonded", "paired" (keys not stored), "-"; "+trusted" when trusted.
    static func bond(_ peripheral: PeripheralInfo) -> String {
        let bond = peripheral.bonded == true ? "bonded" : peripheral.paired == true ? "paired" : "-"
        guard peripheral.trusted == true else { return bond }
        return bond == "-" ? "trusted" : bond + "+trusted"
    }
}

/// `vigilctl ble scan`: one line per advertisement, for people or (with `--json`) for scripts.
struct DiscoveryLine {
    let peripheral: PeripheralInfo

    var text: String {
        let rssi = peripheral.rssi.map { "\($0) dBm" } ?? "- dBm"
        let services = peripheral.serviceUUIDs.map(GATTUUID.short).joined(separator: ",")
        var line = "\(formatTime(Date().timeIntervalSince1970))  \(peripheral.address)  \(rssi.padding(to: 8))  "
            + "\(peripheral.name ?? "(no name)")"
        if !services.isEmpty { line += "  services: \(services)" }
        if !peripheral.manufacturerData.isEmpty {
            line += "  manufacturer: " + peripheral.manufacturerData.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        return line
    }

    /// One compact JSON object: the peripheral's members.
    func json() throws -> String { try compactJSON(peripheral) }
}

/// `vigilctl ble gatt`: the tree of services, characteristics and descriptors.
struct GATTTree {
    let services: [GATTServiceInfo]

    init(_ services: [GATTServiceInfo]) { self.services = services }

    var text: String {
        guard !services.isEmpty else { return "no services" }
        var lines: [String] = []
        for service in services {
            lines.append("service \(GATTNames.label(service.uuid, GATTNames.services))\(service.primary ? "" : " (secondary)")")
            for characteristic in service.characteristics {
                let notifying = characteristic.notifying ? " (subscribed)" : ""
                // Only a UUID that occurs twice needs its instance said (`--instance N`).
                let twins = service.characteristics.filter { $0.uuid == characteristic.uuid }.count
                let instance = twins > 1 ? " instance \(characteristic.instance ?? 0)" : ""
                let handle = characteristic.handle.map { " handle 0x" + String($0, radix: 16) } ?? ""
                lines.append(
                    "  characteristic \(GATTNames.label(characteristic.uuid, GATTNames.characteristics))\(instance)  "
                        + "[\(characteristic.properties.joined(separator: ", "))]\(notifying)\(handle)")
                for descriptor in characteristic.descriptors {
                    lines.append("    descriptor \(GATTNames.label(descriptor.uuid, GATTNames.descriptors))")
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// `vigilctl ble read` and `notify` with `--json`: a value and what it is of.
struct ValueRecord: Encodable {
    var peripheral: String
    var service: String
    var characteristic: String
    /// Which characteristic of that UUID, when not the first.
    var instance: Int?
    var descriptor: String?
    /// Lowercase hex, two digits per byte.
    var value: String
    /// Seconds since 1970, for notifications.
    var time: Double?
}

/// `ble connect`/`disconnect --json`: where the link stands when vigilctl is
/// done (`connected`, `pending`: the daemon connects when it is in range,
/// `cancelled`).
struct LinkRecord: Encodable {
    var peripheral: String
    var state: String
}

/// Names of the standard UUIDs people meet most, for display.
enum GATTNames {
    /// `180d Heart Rate`, or the short form alone, or the full UUID if it is not on the Bluetooth base.
    static func label(_ uuid: String, _ names: [String: String]) -> String {
        let short = GATTUUID.short(uuid)
        return names[short].map { "\(short) \($0)" } ?? short
    }

    static let services: [String: String] = [
        "1800": "Generic Access", "1801": "Generic Attribute", "1802": "Immediate Alert", "1803": "Link Loss",
        "1804": "Tx Power", "1805": "Current Time", "1809": "Health Thermometer", "180a": "Device Information",
        "180d": "Heart Rate", "180f": "Battery", "1810": "Blood Pressure", "1812": "Human Interface Device",
        "1814": "Running Speed and Cadence", "1816": "Cycling Speed and Cadence", "1818": "Cycling Power",
        "1819": "Location and Navigation", "181a": "Environmental Sensing", "181c": "User Data",
        "181d": "Weight Scale", "1822": "Pulse Oximeter", "1826": "Fitness Machine",
    ]

    static let characteristics: [String: String] = [
        "2a00": "Device Name", "2a01": "Appearance", "2a04": "Peripheral Preferred Connection Parameters",
        "2a05": "Service Changed", "2a06": "Alert Level", "2a07": "Tx Power Level", "2a19": "Battery Level",
        "2a1c": "Temperature Measurement", "2a23": "System ID", "2a24": "Model Number String",
        "2a25": "Serial Number String", "2a26": "Firmware Revision String", "2a27": "Hardware Revision String",
        "2a28": "Software Revision String", "2a29": "Manufacturer Name String", "2a2b": "Current Time",
        "2a37": "Heart Rate Measurement", "2a38": "Body Sensor Location", "2a39": "Heart Rate Control Point",
        "2a4d": "Report", "2a50": "PnP ID", "2a53": "RSC Measurement", "2a5b": "CSC Measurement",
        "2a63": "Cycling Power Measurement", "2a6d": "Pressure", "2a6e": "Temperature", "2a6f": "Humidity",
        "2aa6": "Central Address Resolution", "2b29": "Client Supported Features", "2b2a": "Database Hash",
    ]

    static let descriptors: [String: String] = [
        "2900": "Characteristic Extended Properties", "2901": "Characteristic User Description",
        "2902": "Client Characteristic Configuration", "2903": "Server Characteristic Configuration",
        "2904": "Characteristic Presentation Format", "2905": "Characteristic Aggregate Format",
    ]
}

enum Hex {
    static func string(_ bytes: [UInt8]) -> String {
        bytes.map { cFormat("%02x", $0) }.joined()
    }

    /// Bytes from hex as people write it: `0x0102`, `01 02`, `01:02`, `0102`.
    static func bytes(_ text: String) -> [UInt8]? {
        var digits = text.lowercased()
        if digits.hasPrefix("0x") { digits.removeFirst(2) }
        digits.removeAll { $0 == " " || $0 == ":" || $0 == "-" }
        guard digits.count % 2 == 0, digits.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            bytes.append(UInt8(digits[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }
}

/// One line of JSON, keys sorted, for line-by-line output.
func compactJSON<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

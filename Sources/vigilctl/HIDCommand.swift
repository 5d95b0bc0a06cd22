import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit
import VigilProtocol

/// `vigilctl accessory hid`: a session with a HID accessory for a person or
/// a rig: its report descriptor, feature reports read and sent, output
/// reports sent, then input reports printed one per line in hex until
/// `--reports` of them came (or the session ends). Requests run in the
/// order of the options' kinds: descriptor, set-feature, get-feature, output.
struct AccessoryHID: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hid",
        abstract: "Reports of a HID accessory: descriptor, feature and output reports, input reports as hex lines."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The accessory's connection id, as `vigilctl accessories` lists it.")
    var connectionID: UInt64

    @Option(name: .customLong("protocol"), help: "One of the accessory's protocol strings.")
    var protocolString: String

    @Flag(help: "Print the report descriptor (hex) first.")
    var descriptor = false

    @Option(help: ArgumentHelp("Send a feature report, report id first (repeatable).", valueName: "HEX"))
    var setFeature: [String] = []

    @Option(help: ArgumentHelp("Read feature report ID with room for LEN bytes, the id included, and print it (repeatable).", valueName: "ID:LEN"))
    var getFeature: [String] = []

    @Option(help: ArgumentHelp("Send an output report, report id first (repeatable).", valueName: "HEX"))
    var output: [String] = []

    @Option(help: ArgumentHelp("Print this many input reports, then close (default: none; -1: until the session ends).", valueName: "N"))
    var reports = 0

    static func bytes(_ hex: String) throws -> [UInt8] {
        let digits = hex.filter { !$0.isWhitespace && $0 != ":" }
        guard digits.count % 2 == 0, !digits.isEmpty else { throw ValidationError("'\(hex)' is not an even count of hex digits") }
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { throw ValidationError("'\(hex)' is not hex") }
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    static func featureRequest(_ text: String) throws -> (id: UInt8, length: Int) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let id = UInt8(parts[0]), let length = Int(parts[1]), (1...16_384).contains(length) else {
            throw ValidationError("--get-feature takes ID:LEN (id 0-255, length 1-16384), not '\(text)'")
        }
        return (id, length)
    }

    /// One line on stdout, unbuffered: a rig reads each as it comes.
    static func emit(_ line: String) {
        StandardStreams.writeOut(Array((line + "\n").utf8))
    }

    static func hex(_ bytes: [UInt8]) -> String {
        GATTHex.string(bytes)
    }

    func validate() throws {
        for value in setFeature + output { _ = try Self.bytes(value) }
        for value in getFeature { _ = try Self.featureRequest(value) }
        guard reports >= -1 else { throw ValidationError("--reports must be -1 or more") }
    }

    func run() async throws {
        let client = try await options.connect()
        let session = try await client.openSession(connectionID: connectionID, protocol: protocolString)
        guard session.accessory.isHID else {
            try? await client.closeSession(session.id)
            SessionTerminal.fail("accessory \(connectionID) is not a HID device: use `vigilctl accessory open`")
        }
        if descriptor {
            Self.emit("descriptor \(Self.hex(try await client.hidReportDescriptor(session: session.id)))")
        }
        for value in setFeature {
            try await client.setHIDFeatureReport(try Self.bytes(value), session: session.id)
        }
        for value in getFeature {
            let (id, length) = try Self.featureRequest(value)
            Self.emit("feature \(Self.hex(try await client.hidFeatureReport(session: session.id, id: id, length: length)))")
        }
        for value in output {
            try await client.write(try Self.bytes(value), session: session.id)
        }
        var remaining = reports
        if remaining != 0 {
            reading: for await item in session.output {
                switch item {
                case let .data(bytes):
                    for report in try SessionRecords.split(bytes) {
                        Self.emit("report \(Self.hex(report))")
                        remaining -= 1
                        if remaining == 0 { break reading }
                    }
                case let .closed(reason):
                    SessionTerminal.fail("session \(session.id) closed: \(reason)")
                case let .waitingToReopen(reason):
                    SessionTerminal.note("session \(session.id) waits for its accessory to return: \(reason)")
                case .lines:
                    break
                }
            }
        }
        try await client.closeSession(session.id)
    }
}

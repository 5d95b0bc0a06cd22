import ArgumentParser
import VigilKit

/// `vigilctl accessory open`: a terminal onto an accessory, for manual
/// hardware work. stdin goes to the device, each chunk's write awaited before
/// the next is read, so a fast producer on stdin is held back at the device's
/// pace; the device's bytes go to stdout raw. Ends at EOF on stdin, once every
/// write is done (exit 0), or when the session ends otherwise (the reason on
/// stderr, exit 1).
struct AccessoryOpen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "A terminal onto an accessory: stdin to the device, the device to stdout."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The accessory's connection id, as `vigilctl accessories` lists it.")
    var connectionID: UInt64

    @Option(name: .customLong("protocol"), help: "One of the accessory's protocol strings.")
    var protocolString: String

    @Option(help: ArgumentHelp("Line settings overriding the accessory's.", valueName: "\"9600 8N1\""))
    var lineSettings: String?

    @Option(help: ArgumentHelp("Baud rate, any from 50 to 20000000 (a rate outside the termios table is set with BOTHER).", valueName: "N"))
    var baud: Int?

    @Flag(help: "Leave DTR and RTS up when the port is closed (clear HUPCL), so later opens do not reset an Arduino or ESP32.")
    var noHupcl = false

    @Option(help: ArgumentHelp("After opening, drop DTR and RTS for MS milliseconds, then raise them: resets a board with an auto-reset circuit.", valueName: "MS"))
    var resetPulse: Int?

    @Option(help: ArgumentHelp("After opening (and any reset pulse), send a break of MS milliseconds.", valueName: "MS"))
    var sendBreak: Int?

    @Flag(help: "Report changes of CTS, DSR, DCD and RI on stderr (where the driver has modem lines).")
    var watchLines = false

    func validate() throws {
        if let resetPulse, !(1...10_000).contains(resetPulse) { throw ValidationError("--reset-pulse must be 1 to 10000 ms") }
        if let baud, !(50...20_000_000).contains(baud) { throw ValidationError("--baud must be 50 to 20000000") }
    }

    /// `--line-settings` with `--baud` and `--no-hupcl` added (their tokens replace any of the same kind).
    var effectiveLineSettings: String? {
        guard baud != nil || noHupcl else { return lineSettings }
        var tokens = (lineSettings ?? "").split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
        if let baud {
            tokens.removeAll { Int($0) != nil }
            tokens.insert(String(baud), at: 0)
        }
        if noHupcl {
            tokens.removeAll { ["hupcl", "nohupcl", "-hupcl"].contains($0.lowercased()) }
            tokens.append("nohupcl")
        }
        return tokens.joined(separator: " ")
    }

    static func describe(_ lines: SessionLines) -> String {
        [("DTR", lines.dtr), ("RTS", lines.rts), ("CTS", lines.cts), ("DSR", lines.dsr), ("DCD", lines.dcd), ("RI", lines.ri)]
            .map { "\($0.0) \($0.1 ? "up" : "down")" }.joined(separator: ", ")
    }

    func run() async throws {
        let client = try await options.connect()
        let lineSettings = effectiveLineSettings
        let session = try await client.openSession(connectionID: connectionID, protocol: protocolString, lineSettings: lineSettings)
        let accessory = session.accessory
        if accessory.isHID {
            try? await client.closeSession(session.id)
            SessionTerminal.fail("accessory \(connectionID) is a HID device: its data are reports, use `vigilctl accessory hid`")
        }
        if let resetPulse {
            try await client.sessionLines(session.id, dtr: false, rts: false)
            try await Task.sleep(for: .milliseconds(resetPulse))
            let lines = try await client.sessionLines(session.id, dtr: true, rts: true)
            SessionTerminal.note("reset pulse of \(resetPulse) ms sent; lines now \(Self.describe(lines))")
        }
        if let sendBreak {
            try await client.sendBreak(session: session.id, milliseconds: sendBreak)
            SessionTerminal.note("break of \(sendBreak) ms sent")
        }
        if watchLines {
            let lines = try await client.watchSessionLines(session.id)
            SessionTerminal.note("watching the modem lines; now \(Self.describe(lines))")
        }
        SessionTerminal.note("session \(session.id) with \(accessory.name) at \(accessory.deviceNode) for \(protocolString) (\(lineSettings ?? accessory.lineSettings)); EOF (Ctrl-D) ends it")
        try await SessionTerminal(client: client, session: session.id, output: session.output, name: "session \(session.id)",
                                  waitsFor: "its accessory to return").run()
    }
}

/// Line settings of a serial port: speed, framing and flow control.
///
/// Settings come from udev properties (`VIGIL_SERIAL="115200 8N1 rtscts"`),
/// from vigild's config and from an app opening a session, so they have one
/// text form, parsed by `init(parsing:)` and produced by `description`.
/// Values are checked when parsed, decoded or applied, never silently clamped:
/// a wrong speed gives garbage on the wire that nobody could debug.
public struct SerialSettings: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Bits per second: one of `supportedBaudRates`, or any rate in
    /// `customBaudRates` (set with termios2 and BOTHER, e.g. 250000 for 3D
    /// printers or 1250000; the driver picks the nearest its clock can make).
    public var baudRate: Int
    /// 5 to 8.
    public var dataBits: Int
    public var parity: Parity
    /// 1 or 2.
    public var stopBits: Int
    public var flowControl: FlowControl
    /// HUPCL: whether the last close of the port drops DTR and RTS (which
    /// resets an Arduino or ESP32 whose auto-reset circuit watches DTR). nil
    /// keeps what the driver has; `false` (text `nohupcl`) makes the port
    /// leave the lines up when closed, so later opens do not reset the
    /// device. Linux still raises DTR at every open: only a port closed with
    /// HUPCL off (or never dropped) avoids the low-to-high edge.
    public var hangupOnClose: Bool?

    public enum Parity: String, Sendable, Hashable, Codable, CaseIterable {
        case none, even, odd

        /// The letter in "8N1".
        var letter: Character {
            switch self {
            case .none: "N"
            case .even: "E"
            case .odd: "O"
            }
        }
    }

    public enum FlowControl: String, Sendable, Hashable, Codable, CaseIterable {
        /// No flow control: a full buffer on either side loses bytes.
        case none
        /// Hardware flow control on the RTS/CTS lines (CRTSCTS).
        case rtsCts = "rtscts"
        /// Software flow control: XOFF (0x13) and XON (0x11) in the byte
        /// stream, both ways, so those two bytes cannot be data.
        case xonXoff = "xonxoff"
    }

    /// The speeds Linux has a termios constant for (B50 ... B4000000).
    public static let supportedBaudRates: [Int] = baudConstants.map(\.rate)

    /// Any rate in this range is accepted; one outside the table is set
    /// with BOTHER (termios2), where the driver supports it.
    public static let customBaudRates = 50...20_000_000

    /// Whether `baudRate` needs BOTHER (no termios constant).
    public var isCustomBaudRate: Bool { !Self.supportedBaudRates.contains(baudRate) }

    /// 115200 8N1, no flow control: what most USB CDC-ACM and FTDI accessories expect.
    public static let `default` = SerialSettings()

    /// Builds settings without checking them; `validate()`, `SerialPort.open`
    /// and `apply` check them.
    public init(
        baudRate: Int = 115_200,
        dataBits: Int = 8,
        parity: Parity = .none,
        stopBits: Int = 1,
        flowControl: FlowControl = .none,
        hangupOnClose: Bool? = nil
    ) {
        self.baudRate = baudRate
        self.dataBits = dataBits
        self.parity = parity
        self.stopBits = stopBits
        self.flowControl = flowControl
        self.hangupOnClose = hangupOnClose
    }

    /// Parses the text form: whitespace- or comma-separated tokens in any
    /// order, each kind at most once; what is left out keeps its default.
    ///
    /// - a number: the baud rate, e.g. `9600`;
    /// - framing: data bits, parity letter (N, E, O), stop bits, e.g. `8N1`, `7e2`;
    /// - flow control: `none`, `rtscts` (also `crtscts`, `hw`),
    ///   `xonxoff` (also `ixon`, `sw`);
    /// - `hupcl` or `nohupcl` (also `-hupcl`): whether closing drops DTR.
    ///
    /// The error names the offending token.
    public init(parsing text: String) throws(SerialSettingsError) {
        self.init()
        var seen = Set<String>()
        func once(_ kind: String, _ token: String) throws(SerialSettingsError) {
            guard seen.insert(kind).inserted else { throw .duplicate(kind: kind, token: token) }
        }
        let tokens = text.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" || $0 == "\n" })
        for token in tokens.map(String.init) {
            let lowered = token.lowercased()
            if let rate = Int(token) {
                try once("baud rate", token)
                baudRate = rate
            } else if let hangup = Self.hangupNames[lowered] {
                try once("hupcl", token)
                hangupOnClose = hangup
            } else if let flow = Self.flowControlNames[lowered] {
                try once("flow control", token)
                flowControl = flow
            } else if let framing = Self.parseFraming(token) {
                try once("framing", token)
                (dataBits, parity, stopBits) = framing
            } else {
                throw .unknownToken(token)
            }
            do throws(SerialSettingsError) {
                try validate()
            } catch {
                throw .invalidToken(token, error)
            }
        }
    }

    /// "115200 8N1", with the flow control appended unless it is `none`,
    /// then `hupcl` or `nohupcl` when set.
    public var description: String {
        var text = "\(baudRate) \(dataBits)\(parity.letter)\(stopBits)"
        if flowControl != .none { text += " \(flowControl.rawValue)" }
        if let hangupOnClose { text += hangupOnClose ? " hupcl" : " nohupcl" }
        return text
    }

    /// Throws the first value that cannot be put on a Linux serial line.
    public func validate() throws(SerialSettingsError) {
        guard Self.customBaudRates.contains(baudRate) else { throw .unsupportedBaudRate(baudRate) }
        guard (5...8).contains(dataBits) else { throw .invalidDataBits(dataBits) }
        guard stopBits == 1 || stopBits == 2 else { throw .invalidStopBits(stopBits) }
    }

    // Decoding checks the values too: a config file is as untrusted as a string.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = SerialSettings()
        self.init(
            baudRate: try container.decodeIfPresent(Int.self, forKey: .baudRate) ?? defaults.baudRate,
            dataBits: try container.decodeIfPresent(Int.self, forKey: .dataBits) ?? defaults.dataBits,
            parity: try container.decodeIfPresent(Parity.self, forKey: .parity) ?? defaults.parity,
            stopBits: try container.decodeIfPresent(Int.self, forKey: .stopBits) ?? defaults.stopBits,
            flowControl: try container.decodeIfPresent(FlowControl.self, forKey: .flowControl) ?? defaults.flowControl,
            hangupOnClose: try container.decodeIfPresent(Bool.self, forKey: .hangupOnClose))
        try validate()
    }

    private static let hangupNames: [String: Bool] = ["hupcl": true, "nohupcl": false, "-hupcl": false]

    private static let flowControlNames: [String: FlowControl] = [
        "none": .none, "rtscts": .rtsCts, "crtscts": .rtsCts, "hw": .rtsCts,
        "xonxoff": .xonXoff, "ixon": .xonXoff, "sw": .xonXoff,
    ]

    /// "8N1" -> (8, .none, 1); nil if the token is not shaped like framing at all.
    /// Shaped-but-wrong values ("9N1", "8N3") parse here and fail in `validate`.
    private static func parseFraming(_ token: String) -> (Int, Parity, Int)? {
        let characters = Array(token.uppercased())
        guard characters.count == 3,
              let dataBits = characters[0].wholeNumberValue,
              let stopBits = characters[2].wholeNumberValue,
              let parity = Parity.allCases.first(where: { $0.letter == characters[1] })
        else { return nil }
        return (dataBits, parity, stopBits)
    }
}

/// Why a serial setting was refused, naming the value or token at fault.
public enum SerialSettingsError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Not a token of any kind, e.g. "8X1" or "fast".
    case unknownToken(String)
    /// A token of the right shape with a value out of range, e.g. "9N1" or "123".
    indirect case invalidToken(String, SerialSettingsError)
    /// A second baud rate, framing or flow control.
    case duplicate(kind: String, token: String)
    /// Outside `customBaudRates`.
    case unsupportedBaudRate(Int)
    case invalidDataBits(Int)
    case invalidStopBits(Int)

    public var description: String {
        switch self {
        case .unknownToken(let token):
            "serial settings: unknown token \"\(token)\" (expected a baud rate such as 115200, "
                + "framing such as 8N1, flow control: none, rtscts, xonxoff, or hupcl/nohupcl)"
        case .invalidToken(let token, let error):
            "\(error) in \"\(token)\""
        case .duplicate(let kind, let token):
            "serial settings: \"\(token)\" is a second \(kind)"
        case .unsupportedBaudRate(let rate):
            "serial settings: unsupported baud rate \(rate) (must be \(SerialSettings.customBaudRates.lowerBound) "
                + "to \(SerialSettings.customBaudRates.upperBound))"
        case .invalidDataBits(let bits):
            "serial settings: \(bits) data bits (must be 5 to 8)"
        case .invalidStopBits(let bits):
            "serial settings: \(bits) stop bits (must be 1 or 2)"
        }
    }
}

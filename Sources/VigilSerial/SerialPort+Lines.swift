internal import CVigilShim
import Glibc
import SystemPackage
import VigilSystem

/// The modem-control lines of a serial port: DTR and RTS are ours to drive,
/// CTS, DSR, DCD and RI are the device's (TIOCMGET's bits).
public struct ModemLines: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// Data Terminal Ready (output): an Arduino's or ESP32's auto-reset.
    public static let dtr = ModemLines(rawValue: Int32(TIOCM_DTR))
    /// Request To Send (output): an ESP32's boot-mode strap, RS-485 direction.
    public static let rts = ModemLines(rawValue: Int32(TIOCM_RTS))
    /// Clear To Send (input).
    public static let cts = ModemLines(rawValue: Int32(TIOCM_CTS))
    /// Data Set Ready (input).
    public static let dsr = ModemLines(rawValue: Int32(TIOCM_DSR))
    /// Data Carrier Detect (input).
    public static let dcd = ModemLines(rawValue: Int32(TIOCM_CAR))
    /// Ring Indicator (input).
    public static let ri = ModemLines(rawValue: Int32(TIOCM_RNG))

    /// The lines the daemon drives.
    public static let outputs: ModemLines = [.dtr, .rts]
    /// The lines the device drives, whose changes are watched.
    public static let inputs: ModemLines = [.cts, .dsr, .dcd, .ri]

    /// Every line with its name, in a fixed order (the protocol's member names).
    public static let named: [(name: String, line: ModemLines)] = [
        ("dtr", .dtr), ("rts", .rts), ("cts", .cts), ("dsr", .dsr), ("dcd", .dcd), ("ri", .ri),
    ]

    /// "dtr rts cts" (the lines that are up), or "none".
    public var description: String {
        let up = Self.named.filter { contains($0.line) }.map(\.name)
        return up.isEmpty ? "none" : up.joined(separator: " ")
    }
}

/// How many times each input line changed since the driver loaded
/// (TIOCGICOUNT): a change shorter than any polling interval still shows.
public struct ModemLineCounters: Sendable, Hashable {
    public var cts: Int
    public var dsr: Int
    public var ri: Int
    public var dcd: Int

    public init(cts: Int = 0, dsr: Int = 0, ri: Int = 0, dcd: Int = 0) {
        self.cts = cts
        self.dsr = dsr
        self.ri = ri
        self.dcd = dcd
    }

    /// The input lines whose count differs from `earlier`.
    public func changed(since earlier: ModemLineCounters) -> ModemLines {
        var lines: ModemLines = []
        if cts != earlier.cts { lines.insert(.cts) }
        if dsr != earlier.dsr { lines.insert(.dsr) }
        if ri != earlier.ri { lines.insert(.ri) }
        if dcd != earlier.dcd { lines.insert(.dcd) }
        return lines
    }
}

/// RS-485 half-duplex settings (TIOCSRS485): the driver turns the
/// transceiver's direction with RTS around each transmission.
public struct RS485Settings: Sendable, Hashable, Codable {
    public var enabled: Bool
    /// RTS is up (logical 1) while sending; else down while sending.
    public var rtsOnSend: Bool
    /// RTS is up after sending.
    public var rtsAfterSend: Bool
    /// Milliseconds between raising RTS and the first bit.
    public var delayBeforeSend: Int
    /// Milliseconds between the last bit and dropping RTS.
    public var delayAfterSend: Int
    /// Receive while sending (hear one's own echo).
    public var receiveDuringSend: Bool

    public init(
        enabled: Bool = true, rtsOnSend: Bool = true, rtsAfterSend: Bool = false, delayBeforeSend: Int = 0,
        delayAfterSend: Int = 0, receiveDuringSend: Bool = false
    ) {
        self.enabled = enabled
        self.rtsOnSend = rtsOnSend
        self.rtsAfterSend = rtsAfterSend
        self.delayBeforeSend = delayBeforeSend
        self.delayAfterSend = delayAfterSend
        self.receiveDuringSend = receiveDuringSend
    }

    /// Delays the kernel accepts (it clamps to 100 ms; refused here instead).
    public static let delays = 0...100

    var raw: vigil_rs485 {
        var flags: UInt32 = 0
        if enabled { flags |= UInt32(VIGIL_RS485_ENABLED) }
        if rtsOnSend { flags |= UInt32(VIGIL_RS485_RTS_ON_SEND) }
        if rtsAfterSend { flags |= UInt32(VIGIL_RS485_RTS_AFTER_SEND) }
        if receiveDuringSend { flags |= UInt32(VIGIL_RS485_RX_DURING_TX) }
        return vigil_rs485(
            flags: flags, delay_rts_before_send: UInt32(delayBeforeSend), delay_rts_after_send: UInt32(delayAfterSend))
    }

    init(_ raw: vigil_rs485) {
        self.init(
            enabled: raw.flags & UInt32(VIGIL_RS485_ENABLED) != 0,
            rtsOnSend: raw.flags & UInt32(VIGIL_RS485_RTS_ON_SEND) != 0,
            rtsAfterSend: raw.flags & UInt32(VIGIL_RS485_RTS_AFTER_SEND) != 0,
            delayBeforeSend: Int(raw.delay_rts_before_send), delayAfterSend: Int(raw.delay_rts_after_send),
            receiveDuringSend: raw.flags & UInt32(VIGIL_RS485_RX_DURING_TX) != 0)
    }
}

/// Why a line operation failed.
public enum SerialLineError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The driver has no such control (ENOTTY, EINVAL, EOPNOTSUPP): a pty has
    /// no modem lines, most USB adapters no RS-485, CDC-ACM no line counters.
    case notSupported(path: String, operation: String)
    /// A value out of range (an RS-485 delay, a break's length).
    case invalidValue(String)
    /// Any other failure, e.g. the device is gone (EIO).
    case failed(SystemError)

    public var description: String {
        switch self {
        case let .notSupported(path, operation): "\(path): the driver does not support \(operation)"
        case let .invalidValue(text): text
        case let .failed(error): "\(error)"
        }
    }
}

extension SerialPort {
    /// Runs an ioctl-shaped call; "the driver has no such control" is its own error.
    private func lineCall(_ operation: String, _ call: () -> Int32) throws(SerialLineError) {
        while true {
            if call() == 0 { return }
            let error = errno
            switch error {
            case EINTR: continue
            case ENOTTY, EINVAL, EOPNOTSUPP, 515 /* ENOIOCTLCMD */:
                throw .notSupported(path: path, operation: operation)
            default: throw .failed(SystemError(Errno(rawValue: error), "ioctl(\(operation))", path: path))
            }
        }
    }

    /// The lines' state now (TIOCMGET).
    public func modemLines() throws(SerialLineError) -> ModemLines {
        var bits: Int32 = 0
        try lineCall("modem lines (TIOCMGET)") { ioctl(fd, UInt(TIOCMGET), &bits) }
        return ModemLines(rawValue: bits)
    }

    /// Raises (`up`) or drops the given output lines (TIOCMBIS / TIOCMBIC),
    /// leaving the others as they are.
    public func setModemLines(_ lines: ModemLines, up: Bool) throws(SerialLineError) {
        var bits = lines.intersection(.outputs).rawValue
        guard bits != 0 else { return }
        try lineCall(up ? "raising DTR/RTS (TIOCMBIS)" : "dropping DTR/RTS (TIOCMBIC)") {
            ioctl(fd, UInt(up ? TIOCMBIS : TIOCMBIC), &bits)
        }
    }

    /// Sets DTR and/or RTS (nil leaves a line as it is) in one TIOCMSET, so
    /// both change at once: an ESP32's auto-reset circuit reads the pair, and
    /// a USB adapter then sends one control request, not one per line.
    public func setModemLines(dtr: Bool?, rts: Bool?) throws(SerialLineError) {
        guard dtr != nil || rts != nil else { return }
        var lines = try modemLines()
        if let dtr { if dtr { lines.insert(.dtr) } else { lines.remove(.dtr) } }
        if let rts { if rts { lines.insert(.rts) } else { lines.remove(.rts) } }
        var bits = lines.rawValue
        try lineCall("setting DTR/RTS (TIOCMSET)") { ioctl(fd, UInt(TIOCMSET), &bits) }
    }

    /// Starts (TIOCSBRK) or ends (TIOCCBRK) a break: the line held at space.
    /// Non-blocking, unlike tcsendbreak: the caller times the break (the
    /// daemon with a loop timer).
    public func setBreak(_ on: Bool) throws(SerialLineError) {
        try lineCall(on ? "break (TIOCSBRK)" : "break (TIOCCBRK)") { ioctl(fd, UInt(on ? TIOCSBRK : TIOCCBRK)) }
    }

    /// The driver's counts of input-line changes (TIOCGICOUNT), or why not.
    public func modemLineCounters() throws(SerialLineError) -> ModemLineCounters {
        var raw = vigil_modem_counters()
        try lineCall("modem line counters (TIOCGICOUNT)") { vigil_serial_modem_counters(fd, &raw) }
        return ModemLineCounters(cts: Int(raw.cts), dsr: Int(raw.dsr), ri: Int(raw.rng), dcd: Int(raw.dcd))
    }

    /// RS-485 settings as the driver has them (TIOCGRS485).
    public func rs485() throws(SerialLineError) -> RS485Settings {
        var raw = vigil_rs485()
        try lineCall("RS-485 (TIOCGRS485)") { vigil_serial_get_rs485(fd, &raw) }
        return RS485Settings(raw)
    }

    /// Applies RS-485 settings (TIOCSRS485); returns what the driver took
    /// (it may drop flags it cannot do).
    @discardableResult
    public func setRS485(_ settings: RS485Settings) throws(SerialLineError) -> RS485Settings {
        guard RS485Settings.delays.contains(settings.delayBeforeSend), RS485Settings.delays.contains(settings.delayAfterSend) else {
            throw .invalidValue("RS-485 delays must be \(RS485Settings.delays.lowerBound) to \(RS485Settings.delays.upperBound) ms")
        }
        var raw = settings.raw
        try lineCall("RS-485 (TIOCSRS485)") { vigil_serial_set_rs485(fd, &raw) }
        return RS485Settings(raw)
    }
}

import Glibc

extension SerialSettings {
    /// Rate -> termios constant. Other rates go through termios2 and BOTHER
    /// (`SerialPort.apply`), which glibc's termios cannot express.
    static let baudConstants: [(rate: Int, speed: speed_t)] = [
        (50, speed_t(B50)), (75, speed_t(B75)), (110, speed_t(B110)), (134, speed_t(B134)),
        (150, speed_t(B150)), (200, speed_t(B200)), (300, speed_t(B300)), (600, speed_t(B600)),
        (1200, speed_t(B1200)), (1800, speed_t(B1800)), (2400, speed_t(B2400)), (4800, speed_t(B4800)),
        (9600, speed_t(B9600)), (19200, speed_t(B19200)), (38400, speed_t(B38400)),
        (57600, speed_t(B57600)), (115_200, speed_t(B115200)), (230_400, speed_t(B230400)),
        (460_800, speed_t(B460800)), (500_000, speed_t(B500000)), (576_000, speed_t(B576000)),
        (921_600, speed_t(B921600)), (1_000_000, speed_t(B1000000)), (1_152_000, speed_t(B1152000)),
        (1_500_000, speed_t(B1500000)), (2_000_000, speed_t(B2000000)), (2_500_000, speed_t(B2500000)),
        (3_000_000, speed_t(B3000000)), (3_500_000, speed_t(B3500000)), (4_000_000, speed_t(B4000000)),
    ]

    /// A raw-mode termios with these settings, starting from `base` so that
    /// fields this type does not model (e.g. HUPCL) keep the driver's values.
    ///
    /// Raw mode (cfmakeraw): no echo, no line editing, no CR/LF mapping, no
    /// signals from ^C, so every byte arrives as sent. VMIN=1, VTIME=0: a
    /// read waits for at least one byte, and on a non-blocking fd an empty
    /// port is EAGAIN, never a 0 that would look like end-of-file.
    func termios(from base: termios) throws(SerialSettingsError) -> termios {
        try validate()
        var result = base
        cfmakeraw(&result)
        result.c_cflag &= ~(tcflag_t(CSIZE | PARENB | PARODD | CSTOPB) | tcflag_t(CRTSCTS))
        result.c_cflag |= tcflag_t(CLOCAL | CREAD)  // ignore modem lines (DCD) for open and reads
        let size = switch dataBits {
        case 5: tcflag_t(CS5)
        case 6: tcflag_t(CS6)
        case 7: tcflag_t(CS7)
        default: tcflag_t(CS8)
        }
        result.c_cflag |= size
        switch parity {
        case .none: break
        // INPCK without IGNPAR/PARMRK: a byte with a bad parity bit reads as
        // NUL and counts in `LineCounters.parity`, so the loss is visible.
        case .even: result.c_cflag |= tcflag_t(PARENB); result.c_iflag |= tcflag_t(INPCK)
        case .odd: result.c_cflag |= tcflag_t(PARENB | PARODD); result.c_iflag |= tcflag_t(INPCK)
        }
        if stopBits == 2 { result.c_cflag |= tcflag_t(CSTOPB) }
        result.c_iflag &= ~tcflag_t(IXON | IXOFF | IXANY)
        switch flowControl {
        case .none: break
        case .rtsCts: result.c_cflag |= tcflag_t(CRTSCTS)
        case .xonXoff: result.c_iflag |= tcflag_t(IXON | IXOFF)
        }
        withUnsafeMutableBytes(of: &result.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
            cc[Int(VSTART)] = 0x11
            cc[Int(VSTOP)] = 0x13
        }
        if let hangupOnClose {
            if hangupOnClose { result.c_cflag |= tcflag_t(HUPCL) } else { result.c_cflag &= ~tcflag_t(HUPCL) }
        }
        // A custom rate is set afterwards with BOTHER; B38400 stands in until then.
        let speed = Self.baudConstants.first { $0.rate == baudRate }?.speed ?? speed_t(B38400)
        cfsetispeed(&result, speed)
        cfsetospeed(&result, speed)
        return result
    }

    /// What a termios says, or nil for a speed outside the table (unless
    /// `rate`, read with termios2, says what it is).
    init?(termios: termios, rate customRate: Int? = nil) {
        let speed = withUnsafePointer(to: termios) { cfgetospeed($0) }
        guard let rate = Self.baudConstants.first(where: { $0.speed == speed })?.rate ?? customRate else { return nil }
        let cflag = termios.c_cflag
        let dataBits = switch cflag & tcflag_t(CSIZE) {
        case tcflag_t(CS5): 5
        case tcflag_t(CS6): 6
        case tcflag_t(CS7): 7
        default: 8
        }
        let parity: Parity = cflag & tcflag_t(PARENB) == 0 ? .none
            : cflag & tcflag_t(PARODD) != 0 ? .odd : .even
        let flowControl: FlowControl = cflag & tcflag_t(CRTSCTS) != 0 ? .rtsCts
            : termios.c_iflag & tcflag_t(IXON) != 0 ? .xonXoff : .none
        self.init(
            baudRate: rate, dataBits: dataBits, parity: parity,
            stopBits: cflag & tcflag_t(CSTOPB) != 0 ? 2 : 1, flowControl: flowControl)
    }
}

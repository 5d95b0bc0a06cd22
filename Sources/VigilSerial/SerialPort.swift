internal import CVigilShim
import Glibc
import Synchronization
import SystemPackage
import VigilSystem

/// What one non-blocking read of a serial port gave.
public enum SerialRead: Sendable, Hashable {
    /// This many bytes (at least 1) were read into the buffer.
    case bytes(Int)
    /// Nothing to read yet: wait for the fd to become readable.
    case wouldBlock
    /// The device is gone (unplugged USB adapter, closed pty controller):
    /// end-of-file or EIO. Final: close the port and report a disconnect.
    /// Reading again would return the same at once, forever, which is how
    /// daemons end up spinning at 100% CPU.
    case hangup
}

/// A serial device (USB CDC-ACM, USB-serial adapter, UART, or a pty's device
/// side), opened for exclusive, raw, non-blocking use by an event loop.
///
/// Owned: closed on `close()` or deinit. Reads and writes never block;
/// "would block" and "hung up" are values, not errors, because they are the
/// normal flow of a session. Usable from any thread, one reader and one
/// writer at a time (the daemon uses it from its loop thread only).
///
/// On a pty (tests, the lab, benchmarks) the kernel accepts but ignores
/// baud rate, parity, data bits and RTS/CTS, forces 8 data bits and has no
/// line counters; XON/XOFF works. Under umockdev the tty ioctls it does not
/// emulate (TIOCEXCL) fail with ENOTTY; `open` tolerates that and reports it
/// in `isExclusive`.
public final class SerialPort: Sendable {
    /// Invalid after `close()`; the number may then be reused by another file.
    public let fd: Int32
    public let path: String
    /// Whether TIOCEXCL took: then nobody else (gpsd, ModemManager, a stray
    /// `cat`) can open the device while we hold it, except root.
    public let isExclusive: Bool
    private let isClosed = Atomic(false)
    /// Latched so that every later read reports `.hangup` without a syscall.
    private let hasHungUp = Atomic(false)

    private init(fd: Int32, path: String, isExclusive: Bool) {
        self.fd = fd
        self.path = path
        self.isExclusive = isExclusive
    }

    deinit {
        close()
    }

    /// Opens `path` (a device node or a symlink such as /dev/serial/by-id/...)
    /// and applies `settings`.
    ///
    /// O_NONBLOCK so neither open (waiting for carrier) nor reads block the
    /// loop; O_NOCTTY so the device never becomes the daemon's controlling
    /// terminal (a hang-up would then send it SIGHUP); O_CLOEXEC so apps
    /// spawned by the daemon do not inherit it.
    public static func open(path: String, settings: SerialSettings = .default) throws -> SerialPort {
        try settings.validate()
        // A node that is gone (unplugged again) fails here, with the same ENOENT,
        // and not in open(2): umockdev's preload leaks a socket for every failed
        // open of a /dev node and aborts the process past ~50 of them.
        try check("open", path: path) { access(path, F_OK) }
        let fd = try check("open", path: path) { Glibc.open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC) }
        var exclusive = true
        if ioctl(fd, UInt(TIOCEXCL)) != 0 {
            let error = errno
            guard error == ENOTTY else {
                _ = Glibc.close(fd)
                throw SystemError(Errno(rawValue: error), "ioctl(TIOCEXCL)", path: path)
            }
            exclusive = false  // umockdev's emulated ttys
        }
        let port = SerialPort(fd: fd, path: path, isExclusive: exclusive)
        try port.apply(settings)
        return port
    }

    /// Takes `fd` (owned from now on) as the open port of `path`, if it still is
    /// one: the same device as `path` names now, not hung up. Used for a port
    /// an earlier daemon left open (the port keeper); its unread input and its
    /// exclusive lock are intact. Returns nil (and closes `fd`) otherwise.
    /// Applies `settings` again, without flushing anything.
    public static func adopt(fd: Int32, path: String, settings: SerialSettings = .default) -> SerialPort? {
        var held = stat()
        var named = stat()
        var state = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard fstat(fd, &held) == 0, stat(path, &named) == 0, held.st_rdev == named.st_rdev,
              (held.st_mode & S_IFMT) == S_IFCHR, poll(&state, 1, 0) >= 0,
              state.revents & Int16(POLLHUP | POLLERR | POLLNVAL) == 0,
              fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0
        else {
            _ = Glibc.close(fd)
            return nil
        }
        let port = SerialPort(fd: fd, path: path, isExclusive: ioctl(fd, UInt(TIOCEXCL)) == 0)
        guard (try? port.apply(settings)) != nil else { return nil }  // closed by deinit
        return port
    }

    /// Lets other programs open the device again (TIOCNXCL), while this file
    /// stays open: for ports a stopping daemon leaves with its port keeper.
    public func releaseExclusivity() {
        _ = ioctl(fd, UInt(TIOCNXCL))
    }

    /// Applies new line settings at once (TCSANOW): bytes in flight may be
    /// garbled by the change, as on any UART.
    public func apply(_ settings: SerialSettings) throws {
        var current = termios()
        try check("tcgetattr", path: path) { tcgetattr(fd, &current) }
        var wanted = try settings.termios(from: current)
        try check("tcsetattr", path: path) { tcsetattr(fd, TCSANOW, &wanted) }
        if settings.isCustomBaudRate, vigil_serial_set_speed(fd, UInt32(settings.baudRate)) != 0 {
            let error = errno
            if error == ENOTTY || error == EINVAL {
                throw SerialLineError.notSupported(path: path, operation: "a baud rate of \(settings.baudRate) (BOTHER)")
            }
            throw SystemError(Errno(rawValue: error), "ioctl(TCSETS2, BOTHER \(settings.baudRate))", path: path)
        }
    }

    /// The settings the driver reports now. On a pty these are not what was
    /// applied: it always says 8 data bits and no parity.
    public func currentSettings() throws -> SerialSettings? {
        var current = termios()
        try check("tcgetattr", path: path) { tcgetattr(fd, &current) }
        var rate: UInt32 = 0
        let custom = vigil_serial_get_speed(fd, &rate) == 0 ? Int(rate) : nil
        return SerialSettings(termios: current, rate: custom)
    }

    /// Whether the last close drops DTR and RTS (HUPCL), as the driver has it now.
    public func hangsUpOnClose() throws -> Bool {
        var current = termios()
        try check("tcgetattr", path: path) { tcgetattr(fd, &current) }
        return current.c_cflag & tcflag_t(HUPCL) != 0
    }

    /// Reads what is available, up to `buffer.count` (which must not be 0).
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> SerialRead {
        precondition(!buffer.isEmpty, "a zero-byte read cannot tell data from end-of-file")
        if hasHungUp.load(ordering: .relaxed) { return .hangup }
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count > 0 { return .bytes(count) }
            // With VMIN=1, 0 is end-of-file, never "empty".
            let error = count == 0 ? EIO : errno
            switch error {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case EIO, ENXIO, ENODEV:
                hasHungUp.store(true, ordering: .relaxed)
                return .hangup
            default: throw SystemError(Errno(rawValue: error), "read", path: path)
            }
        }
    }

    /// Bytes written (possibly fewer than given), or nil when the driver's
    /// output buffer is full: back-pressure, wait for the fd to be writable.
    /// A device that is gone throws `SerialPortError.hungUp`.
    public func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        if bytes.isEmpty { return 0 }
        if hasHungUp.load(ordering: .relaxed) { throw SerialPortError.hungUp(path: path) }
        while true {
            let count = Glibc.write(fd, bytes.baseAddress, bytes.count)
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            case EIO, ENXIO, ENODEV:
                hasHungUp.store(true, ordering: .relaxed)
                throw SerialPortError.hungUp(path: path)
            default: throw SystemError(Errno(rawValue: errno), "write", path: path)
            }
        }
    }

    /// Writes everything, polling for room when the buffer is full. Blocks:
    /// for tests and tools, not for the daemon's loop.
    public func writeAll(_ bytes: some Sequence<UInt8>) throws {
        let bytes = Array(bytes)
        try bytes.withUnsafeBytes { all in
            var remaining = all
            while !remaining.isEmpty {
                guard let count = try write(remaining) else {
                    var request = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    try check("poll", path: path) { poll(&request, 1, -1) }
                    if request.revents & Int16(POLLHUP | POLLERR) != 0 { throw SerialPortError.hungUp(path: path) }
                    continue
                }
                remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
            }
        }
    }

    /// The driver's error counters (TIOCGICOUNT), or nil where it keeps none:
    /// ptys, umockdev and most USB CDC-ACM devices (ENOTTY/EINVAL), or when
    /// the device is gone. 16550-style UARTs, FTDI and some other USB-serial
    /// drivers have them; a growing `overrun` or `bufferOverrun` is lost data.
    public func lineCounters() -> LineCounters? {
        var raw = vigil_line_counters()
        guard vigil_serial_line_counters(fd, &raw) == 0 else { return nil }
        return LineCounters(raw)
    }

    /// Bytes the driver holds: received but not read, and written but not
    /// yet sent (TIOCINQ/FIONREAD and TIOCOUTQ).
    public func queuedBytes() throws -> (input: Int, output: Int) {
        var input: Int32 = 0
        var output: Int32 = 0
        try check("ioctl(TIOCINQ)", path: path) { ioctl(fd, UInt(FIONREAD), &input) }
        try check("ioctl(TIOCOUTQ)", path: path) { ioctl(fd, UInt(TIOCOUTQ), &output) }
        return (Int(input), Int(output))
    }

    /// Waits until everything written has been sent (tcdrain). Blocks even
    /// on this non-blocking fd, for as long as flow control holds the line:
    /// never call it on the event loop.
    public func drain() throws {
        try check("tcdrain", path: path) { tcdrain(fd) }
    }

    public enum FlushQueue: Sendable {
        case input, output, both
    }

    /// Discards unread input and/or unsent output (tcflush).
    public func flush(_ queue: FlushQueue = .both) throws {
        let selector = switch queue {
        case .input: TCIFLUSH
        case .output: TCOFLUSH
        case .both: TCIOFLUSH
        }
        try check("tcflush", path: path) { tcflush(fd, selector) }
    }

    /// Idempotent and thread-safe; remove any event-loop watch on `fd` first.
    /// The kernel drops the exclusive lock with the last close.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = Glibc.close(fd)
    }
}

/// Serial failures that are part of a session's normal life.
public enum SerialPortError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The device went away (EIO, ENXIO, ENODEV, or a pty whose controller closed).
    case hungUp(path: String)

    public var description: String {
        switch self {
        case .hungUp(let path): "\(path): the device is gone (hung up)"
        }
    }
}

/// A serial line's error counters since the driver loaded (TIOCGICOUNT).
/// Compare two readings: only differences mean anything.
public struct LineCounters: Sendable, Hashable {
    public var rx: Int
    public var tx: Int
    /// Bytes lost because the UART's hardware FIFO overflowed.
    public var overrun: Int
    /// Bytes lost because the tty layer's buffer was full (nobody read fast enough).
    public var bufferOverrun: Int
    public var parity: Int
    public var frame: Int
    public var breaks: Int

    public init(rx: Int = 0, tx: Int = 0, overrun: Int = 0, bufferOverrun: Int = 0,
                parity: Int = 0, frame: Int = 0, breaks: Int = 0) {
        self.rx = rx
        self.tx = tx
        self.overrun = overrun
        self.bufferOverrun = bufferOverrun
        self.parity = parity
        self.frame = frame
        self.breaks = breaks
    }

    init(_ raw: vigil_line_counters) {
        self.init(
            rx: Int(raw.rx), tx: Int(raw.tx), overrun: Int(raw.overrun), bufferOverrun: Int(raw.buf_overrun),
            parity: Int(raw.parity), frame: Int(raw.frame), breaks: Int(raw.brk))
    }

    /// Bytes the driver knows it lost or mangled.
    public var errors: Int { overrun + bufferOverrun + parity + frame }
}


internal import CVigilShim
import Glibc
import SystemPackage
import VigilSystem

/// What one non-blocking read of a hidraw node gave.
public enum HIDRead: Sendable, Hashable {
    /// One whole input report of this many bytes (its report id first when
    /// the device numbers its reports).
    case report(Int)
    /// No report queued: wait for the fd to become readable.
    case wouldBlock
    /// The device is gone (unplugged, its driver unbound).
    case hangup
}

/// A hidraw node (/dev/hidrawN): each read(2) returns exactly one input
/// report, each write(2) sends one output report, and feature reports and
/// the report descriptor go through ioctls. Errors are values
/// (`SystemError`: errno, call, path).
public final class HIDDevice {
    public let fd: Int32
    public let path: String
    private var isClosed = false
    private var hasHungUp = false

    /// The largest report a read can return: the kernel's HID_MAX_BUFFER_SIZE
    /// (16 KiB since Linux 5.x; 4 KiB before). A read into a smaller buffer
    /// would cut a report.
    public static let maxReportSize = 16_384
    /// HID_MAX_DESCRIPTOR_SIZE.
    public static let maxDescriptorSize = 4_096

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close() }

    /// Opens a hidraw node read-write, non-blocking and close-on-exec.
    public static func open(path: String) throws(SystemError) -> HIDDevice {
        // A node that is gone fails here, not in open(2) (umockdev's preload
        // leaks a socket per failed open of a /dev node).
        guard access(path, F_OK) == 0 else { throw SystemError(Errno(rawValue: errno), "open", path: path) }
        let fd = Glibc.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw SystemError(Errno(rawValue: errno), "open", path: path) }
        return HIDDevice(fd: fd, path: path)
    }

    /// Wraps a descriptor already open on a hidraw node (or, in tests, a
    /// SOCK_SEQPACKET socket, which keeps message boundaries the same way).
    public static func adopting(fd: Int32, path: String) -> HIDDevice {
        HIDDevice(fd: fd, path: path)
    }

    /// Reads one input report into `buffer` (which should hold
    /// `maxReportSize`: a shorter buffer cuts a longer report).
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> HIDRead {
        precondition(!buffer.isEmpty, "a zero-byte read cannot tell a report from end-of-file")
        if hasHungUp { return .hangup }
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count > 0 { return .report(count) }
            let error = count == 0 ? EIO : errno
            switch error {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            // hidraw's read gives EIO once its device is gone (and 0 from a test's socket).
            case EIO, ENXIO, ENODEV, ESHUTDOWN, ECONNRESET:
                hasHungUp = true
                return .hangup
            default: throw SystemError(Errno(rawValue: error), "read", path: path)
            }
        }
    }

    /// Sends one output report (report id first; 0 when the device has
    /// none). Returns the count taken (the whole report), or nil when the
    /// node takes nothing now. A device that is gone throws EIO/ENODEV.
    public func write(_ report: UnsafeRawBufferPointer) throws(SystemError) -> Int? {
        if report.isEmpty { return 0 }
        while true {
            let count = Glibc.write(fd, report.baseAddress, report.count)
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            case let error: throw SystemError(Errno(rawValue: error), "write (output report)", path: path)
            }
        }
    }

    /// The report descriptor (HIDIOCGRDESC).
    public func reportDescriptor() throws(SystemError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: Self.maxDescriptorSize)
        let count = buffer.withUnsafeMutableBufferPointer { vigil_hidraw_descriptor(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw SystemError(Errno(rawValue: errno), "ioctl(HIDIOCGRDESC)", path: path) }
        return Array(buffer.prefix(Int(count)))
    }

    /// Bus type and USB ids as the kernel has them (HIDIOCGRAWINFO).
    public func info() throws(SystemError) -> (bus: UInt32, vendorID: UInt16, productID: UInt16) {
        var bus: UInt32 = 0
        var vendor: Int16 = 0
        var product: Int16 = 0
        guard vigil_hidraw_info(fd, &bus, &vendor, &product) == 0 else {
            throw SystemError(Errno(rawValue: errno), "ioctl(HIDIOCGRAWINFO)", path: path)
        }
        return (bus, UInt16(bitPattern: vendor), UInt16(bitPattern: product))
    }

    /// Reads feature report `reportID` (HIDIOCGFEATURE) with room for
    /// `length` bytes, the report id included; the report as the device gave it.
    public func featureReport(id reportID: UInt8, length: Int) throws(SystemError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max(1, min(length, Self.maxReportSize)))
        buffer[0] = reportID
        let count = buffer.withUnsafeMutableBufferPointer { vigil_hidraw_get_feature(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw SystemError(Errno(rawValue: errno), "ioctl(HIDIOCGFEATURE)", path: path) }
        return Array(buffer.prefix(Int(count)))
    }

    /// Sends a feature report (HIDIOCSFEATURE), report id first. Returns the
    /// count the driver took.
    @discardableResult
    public func setFeatureReport(_ report: [UInt8]) throws(SystemError) -> Int {
        let count = report.withUnsafeBufferPointer { vigil_hidraw_set_feature(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw SystemError(Errno(rawValue: errno), "ioctl(HIDIOCSFEATURE)", path: path) }
        return Int(count)
    }

    public func close() {
        guard !isClosed else { return }
        isClosed = true
        _ = Glibc.close(fd)
    }
}

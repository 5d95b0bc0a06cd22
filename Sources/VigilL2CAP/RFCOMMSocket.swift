import CBluetooth
import Glibc
import Synchronization
import SystemPackage
import VigilSystem

/// An RFCOMM server channel number (1-30): which serial port service on a
/// BR/EDR device a connection reaches (an SPP service's SDP record names it).
public struct RFCOMMChannel: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let value: UInt8

    public static let valid: ClosedRange<Int> = 1...30

    /// A channel number, or an error naming the range.
    public init(_ value: Int) throws(L2CAPError) {
        guard Self.valid.contains(value), let byte = UInt8(exactly: value) else {
            throw .invalidArgument("RFCOMM channel \(value) is outside 1-30")
        }
        self.value = byte
    }

    public static func < (a: RFCOMMChannel, b: RFCOMMChannel) -> Bool { a.value < b.value }
    public var description: String { "\(value)" }
}

/// What one `RFCOMMSocket.receive` gave.
public enum RFCOMMReceive: Sendable, Equatable {
    case bytes(Int)
    case wouldBlock
    /// The peer closed the channel, or the link went; everything it sent before is read.
    case closed
}

/// An RFCOMM connection (Bluetooth Classic serial, SPP): an AF_BLUETOOTH,
/// BTPROTO_RFCOMM, SOCK_STREAM socket. A byte stream with the kernel's
/// credit-based flow control: while nobody reads, the receive queue fills
/// and the kernel stops giving the peer credits, so the peer waits and
/// nothing is lost. Non-blocking; owned: closed on `close()` or deinit.
public final class RFCOMMSocket: Sendable {
    public let fd: Int32
    private let isClosed = Atomic(false)

    init(adopting fd: Int32) {
        self.fd = fd
    }

    deinit {
        close()
    }

    public func close() {
        if !isClosed.exchange(true, ordering: .acquiringAndReleasing) { _ = Glibc.close(fd) }
    }

    static func makeSocket() throws(L2CAPError) -> Int32 {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        return try l2capCheck("socket(AF_BLUETOOTH, SOCK_STREAM, BTPROTO_RFCOMM)") { socket(AF_BLUETOOTH, type, BTPROTO_RFCOMM) }
    }

    /// Whether this kernel offers RFCOMM sockets at all; the error says why not.
    public static func probe() -> L2CAPError? {
        do {
            let fd = try makeSocket()
            _ = Glibc.close(fd)
            return nil
        } catch {
            return error
        }
    }

    /// Starts connecting to `channel` on the BR/EDR device at `address` (the
    /// kernel pages the device if no link is up). Returns at once: watch for
    /// `.writable`, then `connectResult()` says how it ended.
    /// `source`: the adapter's address (nil: any; the kernel picks one).
    public static func connect(
        to address: BluetoothDeviceAddress, channel: RFCOMMChannel, from source: BluetoothDeviceAddress? = nil,
        security: L2CAPSecurity? = nil
    ) throws(L2CAPError) -> RFCOMMSocket {
        let socket = RFCOMMSocket(adopting: try makeSocket())
        if let source { try socket.bind(source, channel: 0) }
        if let security {
            var value = bt_security(level: security.rawValue, key_size: 0)
            try l2capCheck("setsockopt(BT_SECURITY, \(security))") {
                setsockopt(socket.fd, vigil_sol_bluetooth, BT_SECURITY, &value, socklen_t(MemoryLayout<bt_security>.size))
            }
        }
        var remote = sockaddr_rc()
        remote.rc_family = sa_family_t(AF_BLUETOOTH)
        remote.rc_bdaddr = address.bdaddr
        remote.rc_channel = channel.value
        let result = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket.fd, $0, socklen_t(MemoryLayout<sockaddr_rc>.size)) }
        }
        if result != 0 && errno != EINPROGRESS && errno != EINTR {
            throw .from(SystemError(Errno(rawValue: errno), "connect to \(address) RFCOMM channel \(channel)"))
        }
        return socket
    }

    private func bind(_ address: BluetoothDeviceAddress, channel: UInt8) throws(L2CAPError) {
        var local = sockaddr_rc()
        local.rc_family = sa_family_t(AF_BLUETOOTH)
        local.rc_bdaddr = address.bdaddr
        local.rc_channel = channel
        try l2capCheck("bind RFCOMM") {
            withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_rc>.size)) }
            }
        }
    }

    /// After `.writable` on a connecting socket: nil when the channel is open,
    /// else why it failed (ECONNREFUSED: nothing listens on that channel;
    /// EHOSTDOWN: the device did not answer the page; EACCES: security).
    public func connectResult() -> L2CAPError? {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 {
            return .from(SystemError(Errno(rawValue: errno), "getsockopt(SO_ERROR)"))
        }
        return error == 0 ? nil : .system(SystemError(Errno(rawValue: error), "connect"))
    }

    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(L2CAPError) -> RFCOMMReceive {
        while true {
            let count = Glibc.recv(fd, buffer.baseAddress, buffer.count, 0)
            if count > 0 { return .bytes(count) }
            if count == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case ECONNRESET, ENOTCONN, ETIMEDOUT, ECONNABORTED, EPIPE, EHOSTDOWN: return .closed
            default: throw .from(SystemError(Errno(rawValue: errno), "recv"))
            }
        }
    }

    /// Sends what fits of `bytes`; nil when the kernel takes nothing now
    /// (the peer gave no credits): wait for `.writable`.
    public func send(_ bytes: UnsafeRawBufferPointer) throws(L2CAPError) -> Int? {
        while true {
            let count = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw .from(SystemError(Errno(rawValue: errno), "send"))
            }
        }
    }
}

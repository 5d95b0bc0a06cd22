import CBluetooth
import Glibc
import Synchronization
import SystemPackage
import VigilSystem

/// What one `BluetoothSocket.receive` gave.
public enum BluetoothReceive: Sendable, Equatable {
    /// `count` bytes: on L2CAP one SDU, on RFCOMM what the stream had.
    /// `truncated` (L2CAP): the buffer was smaller than the SDU, whose tail
    /// is lost (size the buffer by `receiveMTU`). `dropCounter` (L2CAP): the
    /// socket's count of SDUs that found its receive queue full
    /// (SO_RXQ_OVFL, see `countDrops`), when the kernel reported it.
    case data(count: Int, truncated: Bool, dropCounter: UInt32?)
    case wouldBlock
    /// The channel is closed (the peer closed it, or the link went) and
    /// everything it delivered has been read.
    case closed
}

/// A Bluetooth channel or listener socket: L2CAP (AF_BLUETOOTH,
/// BTPROTO_L2CAP, SOCK_SEQPACKET: one SDU per send/receive, LE credit-based
/// flow control) or RFCOMM (BTPROTO_RFCOMM, SOCK_STREAM: a byte stream with
/// RFCOMM's credits). What differs is the address family's socket address
/// and the connect parameters (`L2CAPSocket.swift`, `RFCOMMSocket.swift`);
/// reading, writing, the connect's outcome, accepting and closing are one
/// path. Non-blocking; owned: closed on `close()` or deinit.
public final class BluetoothSocket: Sendable {
    public enum Kind: Sendable, Hashable, CustomStringConvertible {
        case l2cap, rfcomm

        var socketType: Int32 {
            switch self {
            case .l2cap: Int32(SOCK_SEQPACKET.rawValue)
            case .rfcomm: Int32(SOCK_STREAM.rawValue)
            }
        }

        var protocolNumber: Int32 {
            switch self {
            case .l2cap: BTPROTO_L2CAP
            case .rfcomm: BTPROTO_RFCOMM
            }
        }

        public var description: String {
            switch self {
            case .l2cap: "L2CAP"
            case .rfcomm: "RFCOMM"
            }
        }
    }

    public let fd: Int32
    public let kind: Kind
    private let isClosed = Atomic(false)

    init(adopting fd: Int32, kind: Kind) {
        self.fd = fd
        self.kind = kind
    }

    deinit {
        close()
    }

    public func close() {
        if !isClosed.exchange(true, ordering: .acquiringAndReleasing) { _ = Glibc.close(fd) }
    }

    static func make(_ kind: Kind) throws(BluetoothSocketError) -> BluetoothSocket {
        let type = kind.socketType | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = try bluetoothCheck("socket(AF_BLUETOOTH, \(kind))") { socket(AF_BLUETOOTH, type, kind.protocolNumber) }
        return BluetoothSocket(adopting: fd, kind: kind)
    }

    /// Whether this kernel offers sockets of `kind` at all; the error says why not.
    public static func probe(_ kind: Kind = .l2cap) -> BluetoothSocketError? {
        do {
            _ = try make(kind)
            return nil
        } catch {
            return error
        }
    }

    /// `bind`, `connect` or `getsockname` with the protocol's socket address.
    func withAddress<Address, Result>(
        _ address: inout Address, _ call: (UnsafeMutablePointer<sockaddr>, socklen_t) -> Result
    ) -> Result {
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call($0, socklen_t(MemoryLayout<Address>.size)) }
        }
    }

    /// Starts a connect to `remote`; returns at once (EINPROGRESS): watch the
    /// socket for `.writable`, then `connectResult()` says how it ended.
    func startConnect<Address>(to remote: inout Address, _ what: String) throws(BluetoothSocketError) {
        let result = withAddress(&remote) { Glibc.connect(fd, $0, $1) }
        if result != 0 && errno != EINPROGRESS && errno != EINTR {
            throw .from(SystemError(Errno(rawValue: errno), what))
        }
    }

    func bind<Address>(_ local: inout Address, _ what: String) throws(BluetoothSocketError) {
        try bluetoothCheck(what) { withAddress(&local) { Glibc.bind(fd, $0, $1) } }
    }

    func listen(backlog: Int32) throws(BluetoothSocketError) {
        try bluetoothCheck("listen") { Glibc.listen(fd, backlog) }
    }

    /// After `.writable` on a connecting socket: nil when the channel is open,
    /// else why it failed (ECONNREFUSED: nothing listens there; EHOSTDOWN:
    /// the device did not answer; EACCES: security; ETIMEDOUT, ...).
    public func connectResult() -> BluetoothSocketError? {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 {
            return .from(SystemError(Errno(rawValue: errno), "getsockopt(SO_ERROR)"))
        }
        return error == 0 ? nil : .system(SystemError(Errno(rawValue: error), "connect"))
    }

    /// A channel a device opened to this listener, with the socket address
    /// it came from (`Address`: sockaddr_l2 or sockaddr_rc); nil when none is waiting.
    func accept<Address>(_ remote: inout Address) throws(BluetoothSocketError) -> BluetoothSocket? {
        while true {
            var length = socklen_t(MemoryLayout<Address>.size)
            let accepted = withUnsafeMutablePointer(to: &remote) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(self.fd, $0, &length) }
            }
            if accepted >= 0 {
                // accept4 needs _GNU_SOURCE, which Glibc's module does not see.
                _ = fcntl(accepted, F_SETFD, FD_CLOEXEC)
                _ = fcntl(accepted, F_SETFL, fcntl(accepted, F_GETFL) | O_NONBLOCK)
                return BluetoothSocket(adopting: accepted, kind: kind)
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw .from(SystemError(Errno(rawValue: errno), "accept"))
            }
        }
    }

    // MARK: Options

    public func setSecurity(_ level: L2CAPSecurity) throws(BluetoothSocketError) {
        var value = bt_security(level: level.rawValue, key_size: 0)
        try bluetoothCheck("setsockopt(BT_SECURITY, \(level))") {
            setsockopt(fd, vigil_sol_bluetooth, BT_SECURITY, &value, socklen_t(MemoryLayout<bt_security>.size))
        }
    }

    public func security() throws(BluetoothSocketError) -> L2CAPSecurity? {
        var value = bt_security()
        var length = socklen_t(MemoryLayout<bt_security>.size)
        try bluetoothCheck("getsockopt(BT_SECURITY)") { getsockopt(fd, vigil_sol_bluetooth, BT_SECURITY, &value, &length) }
        return L2CAPSecurity(rawValue: value.level)
    }

    /// SO_RCVBUF: how much the kernel queues for this socket (doubled by the
    /// kernel, capped by net.core.rmem_max).
    public func setReceiveBuffer(_ bytes: Int32) throws(BluetoothSocketError) {
        var value = bytes
        try bluetoothCheck("setsockopt(SO_RCVBUF)") { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size)) }
    }

    // MARK: Data

    /// Reads into `buffer`: on L2CAP one SDU (size the buffer by
    /// `receiveMTU()`, or the SDU's tail is lost and `truncated` says so), on
    /// RFCOMM what fits.
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(BluetoothSocketError) -> BluetoothReceive {
        var drops: UInt32 = 0
        var hasDrops: Int32 = 0
        var truncated: Int32 = 0
        while true {
            let count = vigil_bluetooth_recv(fd, buffer.baseAddress, buffer.count, 0, &drops, &hasDrops, &truncated)
            if count > 0 { return .data(count: count, truncated: truncated != 0, dropCounter: hasDrops != 0 ? drops : nil) }
            if count == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            // The channel or its link went: what the peer sent before is read by now.
            case ECONNRESET, ENOTCONN, ETIMEDOUT, ECONNABORTED, EPIPE, EHOSTDOWN: return .closed
            default: throw .from(SystemError(Errno(rawValue: errno), "recvmsg"))
            }
        }
    }

    /// Sends `bytes`: on L2CAP as one SDU (at most `sendMTU()` bytes: the
    /// kernel refuses longer ones with EMSGSIZE), on RFCOMM what fits. nil
    /// when the channel has no credits or buffer left: wait for `.writable`.
    public func send(_ bytes: UnsafeRawBufferPointer) throws(BluetoothSocketError) -> Int? {
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

import CBluetooth
import Glibc
import Synchronization
import SystemPackage
import VigilSystem

/// Options set on an L2CAP socket before it connects or listens (the kernel
/// negotiates with them; changing them afterwards has no effect).
public struct L2CAPOptions: Sendable, Hashable {
    /// BT_RCVMTU: the largest SDU this side accepts (LE: 23-65535). nil: the
    /// kernel's default (672).
    public var receiveMTU: UInt16?
    /// BT_SECURITY: what the link must have before the channel opens. nil:
    /// the kernel's default (low: no encryption).
    public var security: L2CAPSecurity?

    public init(receiveMTU: UInt16? = nil, security: L2CAPSecurity? = nil) {
        self.receiveMTU = receiveMTU
        self.security = security
    }
}

/// What one `receive` gave.
public enum L2CAPReceive: Sendable, Equatable {
    /// One SDU of `count` bytes. `truncated`: the buffer was smaller than the
    /// SDU, whose tail is lost (size the buffer by `receiveMTU`).
    /// `dropCounter`: the socket's count of SDUs that found its receive queue
    /// full (SO_RXQ_OVFL, see `countDrops`), when the kernel reported it.
    case sdu(count: Int, truncated: Bool, dropCounter: UInt32?)
    case wouldBlock
    /// The channel is closed (the peer disconnected it, or the link went)
    /// and everything it delivered has been read.
    case closed
}

/// A connection-oriented L2CAP channel or listener: an AF_BLUETOOTH,
/// BTPROTO_L2CAP, SOCK_SEQPACKET socket (on LE: credit-based flow control,
/// one SDU per send/receive). Non-blocking; owned: closed on `close()` or deinit.
public final class L2CAPSocket: Sendable {
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
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        return try l2capCheck("socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)") { socket(AF_BLUETOOTH, type, BTPROTO_L2CAP) }
    }

    /// Whether this kernel offers L2CAP sockets at all; the error says why not.
    public static func probe() -> L2CAPError? {
        do {
            let fd = try makeSocket()
            _ = Glibc.close(fd)
            return nil
        } catch {
            return error
        }
    }

    /// Starts connecting to `psm` on the device at `address` (for LE, over its
    /// existing link, or the kernel makes one). Returns at once: watch the
    /// socket for `.writable`, then `connectResult()` says how it ended.
    /// `source`: the adapter's address (nil: any; the kernel picks the adapter).
    public static func connect(
        to address: BluetoothDeviceAddress, type: BluetoothAddressType, psm: L2CAPPSM,
        from source: BluetoothDeviceAddress? = nil, options: L2CAPOptions = L2CAPOptions()
    ) throws(L2CAPError) -> L2CAPSocket {
        let socket = L2CAPSocket(adopting: try makeSocket())
        // Bound first: the kernel takes BT_RCVMTU only on a socket it knows is LE.
        try socket.bind(source ?? .any, type: type.isLE ? .lePublic : .bredr, psm: nil)
        try socket.apply(options)
        var remote = sockaddr_l2()
        remote.l2_family = sa_family_t(AF_BLUETOOTH)
        remote.l2_psm = psm.value.littleEndian
        remote.l2_bdaddr = address.bdaddr
        remote.l2_bdaddr_type = type.rawValue
        let result = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket.fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
        if result != 0 && errno != EINPROGRESS && errno != EINTR {
            throw .from(SystemError(Errno(rawValue: errno), "connect to \(address) PSM \(psm)"))
        }
        return socket
    }

    /// After `.writable` on a connecting socket: nil when the channel is open,
    /// else why it failed (ECONNREFUSED: no such PSM on the device; ETIMEDOUT, ...).
    public func connectResult() -> L2CAPError? {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 {
            return .from(SystemError(Errno(rawValue: errno), "getsockopt(SO_ERROR)"))
        }
        return error == 0 ? nil : .system(SystemError(Errno(rawValue: error), "connect"))
    }

    /// Listens for channels on `psm` (nil: the kernel picks a free dynamic
    /// one, 128-255 on LE; `psm` then tells which). `source`: the adapter
    /// (`.any`: every adapter). Watch for `.readable`, then `accept()`.
    public static func listen(
        psm: L2CAPPSM?, on source: BluetoothDeviceAddress = .any, type: BluetoothAddressType = .lePublic,
        options: L2CAPOptions = L2CAPOptions(), backlog: Int32 = 8
    ) throws(L2CAPError) -> L2CAPSocket {
        let socket = L2CAPSocket(adopting: try makeSocket())
        try socket.bind(source, type: type, psm: psm)
        try socket.apply(options)  // after bind: BT_RCVMTU needs an LE socket
        try l2capCheck("listen") { Glibc.listen(socket.fd, backlog) }
        return socket
    }

    private func bind(_ address: BluetoothDeviceAddress, type: BluetoothAddressType, psm: L2CAPPSM?) throws(L2CAPError) {
        var local = sockaddr_l2()
        local.l2_family = sa_family_t(AF_BLUETOOTH)
        local.l2_psm = (psm?.value ?? 0).littleEndian
        local.l2_bdaddr = address.bdaddr
        local.l2_bdaddr_type = type.rawValue
        try l2capCheck("bind PSM \(psm.map { "\($0)" } ?? "(dynamic)")") {
            withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
            }
        }
    }

    /// A channel a device opened to this listener, with the device's address;
    /// nil when none is waiting.
    public func accept() throws(L2CAPError) -> (socket: L2CAPSocket, peer: BluetoothDeviceAddress, type: BluetoothAddressType)? {
        var remote = sockaddr_l2()
        var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
        while true {
            let fd = withUnsafeMutablePointer(to: &remote) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(self.fd, $0, &length) }
            }
            if fd >= 0 {
                // accept4 needs _GNU_SOURCE, which Glibc's module does not see.
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                let type = BluetoothAddressType(rawValue: remote.l2_bdaddr_type) ?? .lePublic
                return (L2CAPSocket(adopting: fd), BluetoothDeviceAddress(remote.l2_bdaddr), type)
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw .from(SystemError(Errno(rawValue: errno), "accept"))
            }
        }
    }

    /// The PSM this socket is bound to (a listener's dynamic PSM included).
    public func localPSM() throws(L2CAPError) -> L2CAPPSM {
        var local = sockaddr_l2()
        var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
        try l2capCheck("getsockname") {
            withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        }
        return L2CAPPSM(bound: UInt16(littleEndian: local.l2_psm))
    }

    // MARK: Options

    private func apply(_ options: L2CAPOptions) throws(L2CAPError) {
        if let mtu = options.receiveMTU {
            guard mtu >= 23 else { throw .invalidArgument("receive MTU \(mtu) is below LE's minimum of 23") }
            try setOption(BT_RCVMTU, UInt16(mtu), "BT_RCVMTU")
        }
        if let security = options.security { try setSecurity(security) }
    }

    public func setSecurity(_ level: L2CAPSecurity) throws(L2CAPError) {
        var value = bt_security(level: level.rawValue, key_size: 0)
        try l2capCheck("setsockopt(BT_SECURITY, \(level))") {
            setsockopt(fd, vigil_sol_bluetooth, BT_SECURITY, &value, socklen_t(MemoryLayout<bt_security>.size))
        }
    }

    public func security() throws(L2CAPError) -> L2CAPSecurity? {
        var value = bt_security()
        var length = socklen_t(MemoryLayout<bt_security>.size)
        try l2capCheck("getsockopt(BT_SECURITY)") { getsockopt(fd, vigil_sol_bluetooth, BT_SECURITY, &value, &length) }
        return L2CAPSecurity(rawValue: value.level)
    }

    /// BT_RCVMTU: the largest SDU the peer may send (after the channel opened:
    /// what was negotiated).
    public func receiveMTU() throws(L2CAPError) -> Int { Int(try option(BT_RCVMTU, "BT_RCVMTU")) }
    /// BT_SNDMTU: the largest SDU `send` takes (the peer's MTU).
    public func sendMTU() throws(L2CAPError) -> Int { Int(try option(BT_SNDMTU, "BT_SNDMTU")) }

    /// SO_RXQ_OVFL: every `receive` reports the socket's count of SDUs that
    /// found its receive queue full. Kernels that give LE credits back
    /// whether or not the queue has room (before 6.10, unless backported)
    /// drop those; newer ones hold them back (`l2cap_chan_rx_avail`) and
    /// count them all the same, so the count says the reader fell behind,
    /// not that anything was lost.
    public func countDrops() throws(L2CAPError) {
        var on: Int32 = 1
        try l2capCheck("setsockopt(SO_RXQ_OVFL)") { setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, socklen_t(MemoryLayout<Int32>.size)) }
    }

    /// SO_RCVBUF: how much the kernel queues for this socket (doubled by the
    /// kernel, capped by net.core.rmem_max).
    public func setReceiveBuffer(_ bytes: Int32) throws(L2CAPError) {
        var value = bytes
        try l2capCheck("setsockopt(SO_RCVBUF)") { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size)) }
    }

    private func setOption(_ name: Int32, _ value: UInt16, _ label: String) throws(L2CAPError) {
        var value = value
        try l2capCheck("setsockopt(\(label))") { setsockopt(fd, vigil_sol_bluetooth, name, &value, socklen_t(MemoryLayout<UInt16>.size)) }
    }

    private func option(_ name: Int32, _ label: String) throws(L2CAPError) -> UInt16 {
        var value: UInt16 = 0
        var length = socklen_t(MemoryLayout<UInt16>.size)
        try l2capCheck("getsockopt(\(label))") { getsockopt(fd, vigil_sol_bluetooth, name, &value, &length) }
        return value
    }

    // MARK: Data

    /// Reads one SDU into `buffer` (size it by `receiveMTU()`, or the SDU's
    /// tail is lost and `truncated` says so).
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(L2CAPError) -> L2CAPReceive {
        var drops: UInt32 = 0
        var hasDrops: Int32 = 0
        var truncated: Int32 = 0
        while true {
            let count = vigil_l2cap_recv(fd, buffer.baseAddress, buffer.count, 0, &drops, &hasDrops, &truncated)
            if count > 0 { return .sdu(count: count, truncated: truncated != 0, dropCounter: hasDrops != 0 ? drops : nil) }
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

    /// Sends `sdu` as one SDU (at most `sendMTU()` bytes: the kernel refuses
    /// longer ones with EMSGSIZE). nil when the channel has no credits or
    /// buffer left: wait for `.writable`.
    public func send(_ sdu: UnsafeRawBufferPointer) throws(L2CAPError) -> Int? {
        while true {
            let count = Glibc.send(fd, sdu.baseAddress, sdu.count, Int32(MSG_NOSIGNAL))
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw .from(SystemError(Errno(rawValue: errno), "send"))
            }
        }
    }
}

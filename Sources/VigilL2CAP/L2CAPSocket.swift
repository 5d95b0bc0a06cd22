import CBluetooth
import Glibc
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

/// L2CAP's side of a `BluetoothSocket`: connection-oriented channels to a
/// PSM (sockaddr_l2), their MTUs and drop counting.
extension BluetoothSocket {
    /// Starts connecting to `psm` on the device at `address` (for LE, over its
    /// existing link, or the kernel makes one). Returns at once: watch the
    /// socket for `.writable`, then `connectResult()` says how it ended
    /// (ECONNREFUSED: no such PSM on the device).
    /// `source`: the adapter's address (nil: any; the kernel picks the adapter).
    public static func connect(
        to address: BluetoothDeviceAddress, type: BluetoothAddressType, psm: L2CAPPSM,
        from source: BluetoothDeviceAddress? = nil, options: L2CAPOptions = L2CAPOptions()
    ) throws(BluetoothSocketError) -> BluetoothSocket {
        let socket = try make(.l2cap)
        // Bound first: the kernel takes BT_RCVMTU only on a socket it knows is LE.
        try socket.bindL2CAP(source ?? .any, type: type.isLE ? .lePublic : .bredr, psm: nil)
        try socket.apply(options)
        var remote = sockaddr_l2()
        remote.l2_family = sa_family_t(AF_BLUETOOTH)
        remote.l2_psm = psm.value.littleEndian
        remote.l2_bdaddr = address.bdaddr
        remote.l2_bdaddr_type = type.rawValue
        try socket.startConnect(to: &remote, "connect to \(address) PSM \(psm)")
        return socket
    }

    /// Listens for channels on `psm` (nil: the kernel picks a free dynamic
    /// one, 128-255 on LE; `localPSM` then tells which). `source`: the adapter
    /// (`.any`: every adapter). Watch for `.readable`, then `acceptL2CAP()`.
    public static func listen(
        psm: L2CAPPSM?, on source: BluetoothDeviceAddress = .any, type: BluetoothAddressType = .lePublic,
        options: L2CAPOptions = L2CAPOptions(), backlog: Int32 = 8
    ) throws(BluetoothSocketError) -> BluetoothSocket {
        let socket = try make(.l2cap)
        try socket.bindL2CAP(source, type: type, psm: psm)
        try socket.apply(options)  // after bind: BT_RCVMTU needs an LE socket
        try socket.listen(backlog: backlog)
        return socket
    }

    private func bindL2CAP(_ address: BluetoothDeviceAddress, type: BluetoothAddressType, psm: L2CAPPSM?) throws(BluetoothSocketError) {
        var local = sockaddr_l2()
        local.l2_family = sa_family_t(AF_BLUETOOTH)
        local.l2_psm = (psm?.value ?? 0).littleEndian
        local.l2_bdaddr = address.bdaddr
        local.l2_bdaddr_type = type.rawValue
        try bind(&local, "bind PSM \(psm.map { "\($0)" } ?? "(dynamic)")")
    }

    /// A channel a device opened to this L2CAP listener, with the device's
    /// address; nil when none is waiting.
    public func acceptL2CAP() throws(BluetoothSocketError) -> (socket: BluetoothSocket, peer: BluetoothDeviceAddress, type: BluetoothAddressType)? {
        var remote = sockaddr_l2()
        guard let socket = try accept(&remote) else { return nil }
        return (socket, BluetoothDeviceAddress(remote.l2_bdaddr), BluetoothAddressType(rawValue: remote.l2_bdaddr_type) ?? .lePublic)
    }

    /// The PSM this socket is bound to (a listener's dynamic PSM included).
    public func localPSM() throws(BluetoothSocketError) -> L2CAPPSM {
        var local = sockaddr_l2()
        var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
        try bluetoothCheck("getsockname") {
            withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        }
        return L2CAPPSM(bound: UInt16(littleEndian: local.l2_psm))
    }

    private func apply(_ options: L2CAPOptions) throws(BluetoothSocketError) {
        if let mtu = options.receiveMTU {
            guard mtu >= 23 else { throw .invalidArgument("receive MTU \(mtu) is below LE's minimum of 23") }
            try setOption(BT_RCVMTU, UInt16(mtu), "BT_RCVMTU")
        }
        if let security = options.security { try setSecurity(security) }
    }

    /// BT_RCVMTU: the largest SDU the peer may send (after the channel opened:
    /// what was negotiated).
    public func receiveMTU() throws(BluetoothSocketError) -> Int { Int(try option(BT_RCVMTU, "BT_RCVMTU")) }
    /// BT_SNDMTU: the largest SDU `send` takes (the peer's MTU).
    public func sendMTU() throws(BluetoothSocketError) -> Int { Int(try option(BT_SNDMTU, "BT_SNDMTU")) }

    /// SO_RXQ_OVFL: every `receive` reports the socket's count of SDUs that
    /// found its receive queue full. Kernels that give LE credits back
    /// whether or not the queue has room (before 6.10, unless backported)
    /// drop those; newer ones hold them back (`l2cap_chan_rx_avail`) and
    /// count them all the same, so the count says the reader fell behind,
    /// not that anything was lost.
    public func countDrops() throws(BluetoothSocketError) {
        var on: Int32 = 1
        try bluetoothCheck("setsockopt(SO_RXQ_OVFL)") { setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, socklen_t(MemoryLayout<Int32>.size)) }
    }

    private func setOption(_ name: Int32, _ value: UInt16, _ label: String) throws(BluetoothSocketError) {
        var value = value
        try bluetoothCheck("setsockopt(\(label))") { setsockopt(fd, vigil_sol_bluetooth, name, &value, socklen_t(MemoryLayout<UInt16>.size)) }
    }

    private func option(_ name: Int32, _ label: String) throws(BluetoothSocketError) -> UInt16 {
        var value: UInt16 = 0
        var length = socklen_t(MemoryLayout<UInt16>.size)
        try bluetoothCheck("getsockopt(\(label))") { getsockopt(fd, vigil_sol_bluetooth, name, &value, &length) }
        return value
    }
}

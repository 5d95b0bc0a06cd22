import CBluetooth
import Glibc
import SystemPackage
import VigilSystem

/// An RFCOMM server channel number (1-30): which serial port service on a
/// BR/EDR device a connection reaches (an SPP service's SDP record names it).
public struct RFCOMMChannel: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let value: UInt8

    public static let valid: ClosedRange<Int> = 1...30

    /// A channel number, or an error naming the range.
    public init(_ value: Int) throws(BluetoothSocketError) {
        guard Self.valid.contains(value), let byte = UInt8(exactly: value) else {
            throw .invalidArgument("RFCOMM channel \(value) is outside 1-30")
        }
        self.value = byte
    }

    /// A channel the kernel reported (a bound or accepted socket's), not checked.
    public init(bound value: UInt8) {
        self.value = value
    }

    public static func < (a: RFCOMMChannel, b: RFCOMMChannel) -> Bool { a.value < b.value }
    public var description: String { "\(value)" }
}

/// RFCOMM's side of a `BluetoothSocket` (Bluetooth Classic serial, SPP):
/// a byte stream to a server channel (sockaddr_rc), with the kernel's
/// credit-based flow control: while nobody reads, the receive queue fills
/// and the kernel stops giving the peer credits, so the peer waits and
/// nothing is lost.
extension BluetoothSocket {
    /// Starts connecting to `channel` on the BR/EDR device at `address` (the
    /// kernel pages the device if no link is up). Returns at once: watch for
    /// `.writable`, then `connectResult()` says how it ended (ECONNREFUSED:
    /// nothing listens on that channel; EHOSTDOWN: the device did not answer
    /// the page; EACCES: security).
    /// `source`: the adapter's address (nil: any; the kernel picks one).
    public static func connect(
        to address: BluetoothDeviceAddress, channel: RFCOMMChannel, from source: BluetoothDeviceAddress? = nil,
        security: L2CAPSecurity? = nil
    ) throws(BluetoothSocketError) -> BluetoothSocket {
        let socket = try make(.rfcomm)
        if let source { try socket.bindRFCOMM(source, channel: 0) }
        if let security { try socket.setSecurity(security) }
        var remote = sockaddr_rc()
        remote.rc_family = sa_family_t(AF_BLUETOOTH)
        remote.rc_bdaddr = address.bdaddr
        remote.rc_channel = channel.value
        try socket.startConnect(to: &remote, "connect to \(address) RFCOMM channel \(channel)")
        return socket
    }

    /// Listens for RFCOMM connections on `channel` (nil: the kernel picks a
    /// free one; `localChannel` tells which). `source`: the adapter (`.any`:
    /// every adapter). Watch for `.readable`, then `acceptRFCOMM()`.
    public static func listen(
        channel: RFCOMMChannel?, on source: BluetoothDeviceAddress = .any, security: L2CAPSecurity? = nil, backlog: Int32 = 8
    ) throws(BluetoothSocketError) -> BluetoothSocket {
        let socket = try make(.rfcomm)
        try socket.bindRFCOMM(source, channel: channel?.value ?? 0)
        if let security { try socket.setSecurity(security) }
        try socket.listen(backlog: backlog)
        return socket
    }

    private func bindRFCOMM(_ address: BluetoothDeviceAddress, channel: UInt8) throws(BluetoothSocketError) {
        var local = sockaddr_rc()
        local.rc_family = sa_family_t(AF_BLUETOOTH)
        local.rc_bdaddr = address.bdaddr
        local.rc_channel = channel
        try bind(&local, "bind RFCOMM channel \(channel == 0 ? "(any free)" : "\(channel)")")
    }

    /// A connection a device made to this RFCOMM listener, with the device's
    /// address; nil when none is waiting.
    public func acceptRFCOMM() throws(BluetoothSocketError) -> (socket: BluetoothSocket, peer: BluetoothDeviceAddress)? {
        var remote = sockaddr_rc()
        guard let socket = try accept(&remote) else { return nil }
        return (socket, BluetoothDeviceAddress(remote.rc_bdaddr))
    }

    /// An RFCOMM connection someone else accepted and handed over (bluetoothd,
    /// through `Profile1.NewConnection`): made non-blocking and close-on-exec,
    /// owned from now on.
    public static func adopting(rfcomm fd: Int32) -> BluetoothSocket {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        return BluetoothSocket(adopting: fd, kind: .rfcomm)
    }

    /// The RFCOMM channel this socket is bound to (a listener's free channel included).
    public func localChannel() throws(BluetoothSocketError) -> RFCOMMChannel {
        var local = sockaddr_rc()
        var length = socklen_t(MemoryLayout<sockaddr_rc>.size)
        try bluetoothCheck("getsockname") {
            withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        }
        return RFCOMMChannel(bound: local.rc_channel)
    }
}

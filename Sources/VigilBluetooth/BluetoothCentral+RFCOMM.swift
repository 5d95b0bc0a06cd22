import VigilProtocol

/// What opening an RFCOMM channel needs from the central: BlueZ must know
/// the device (paired, or at least discovered), and the kernel needs the
/// adapter's address. Unlike an L2CAP channel on LE, no link is asked for
/// first: the kernel pages a BR/EDR device itself when the channel connects.
public struct ClassicTarget: Sendable, Equatable {
    public let address: String
    public let adapterAddress: String?
    public let paired: Bool
    /// The service UUIDs BlueZ read from the device's SDP records (normalized).
    public let serviceUUIDs: [String]
}

extension BluetoothCentral {
    /// The device `raw` names, or why no channel can be opened to it:
    /// Bluetooth is not powered on (`unavailable`), BlueZ does not know the
    /// device (`notFound`), or it is an LE-only device (`invalidArgument`).
    public func classicTarget(address raw: String) throws(ProtocolError) -> ClassicTarget {
        let address = try Self.address(raw)
        guard state == .poweredOn else {
            throw ProtocolError(.unavailable, "Bluetooth is \(state.rawValue); no RFCOMM channel can be opened")
        }
        // Through the default adapter: an RFCOMM request names no adapter (yet).
        guard let adapter, let device = tree.device(address: address, adapter: adapter.path) else {
            throw ProtocolError(.notFound, "BlueZ does not know \(address): pair it first (or discover it)")
        }
        if device.addressType == "random" {
            throw ProtocolError(.invalidArgument, "\(address) is an LE device (random address): RFCOMM needs a BR/EDR device")
        }
        return ClassicTarget(address: address, adapterAddress: adapter.address, paired: device.paired, serviceUUIDs: device.serviceUUIDs)
    }
}

import VigilProtocol

/// What opening an L2CAP channel needs from the central: the link must be one
/// this client asked for and that is up, and the kernel needs the device's
/// address type (BlueZ knows it) and the adapter's address.
public struct L2CAPTarget: Sendable, Equatable {
    public let address: String
    /// BlueZ's `AddressType`: "public" or "random".
    public let addressType: String
    public let adapterAddress: String?
}

extension BluetoothCentral {
    /// The link `client` may open a channel on, or why not: Bluetooth is not
    /// powered on (`unavailable`), the client never asked to connect, or the
    /// link is not up (`notConnected`).
    public func l2capTarget(_ client: BluetoothClient, address raw: String) throws(ProtocolError) -> L2CAPTarget {
        let address = try Self.address(raw)
        guard state == .poweredOn else {
            throw ProtocolError(.unavailable, "Bluetooth is \(state.rawValue); no L2CAP channel can be opened")
        }
        guard clients[client]?.connects.contains(address) == true else {
            throw ProtocolError(.notConnected, "not connected to \(address): ask for the connection first (ble.connect)")
        }
        guard let device = self.device(address), device.connected else {
            throw ProtocolError(.notConnected, "\(address) is not connected yet (the connect request is pending)")
        }
        return L2CAPTarget(address: address, addressType: device.addressType, adapterAddress: adapter?.address)
    }

    /// Whether `client` wants `address` connected (a channel that asked to
    /// reopen waits for that and the link).
    public func wantsLink(_ client: BluetoothClient, address: String) -> Bool {
        clients[client]?.connects.contains(address) == true
    }
}

extension BluetoothCentral {
    /// Whether BlueZ reports the link to `address` up.
    public func linkIsUp(_ address: String) -> Bool {
        self.device(address)?.connected ?? false
    }
}

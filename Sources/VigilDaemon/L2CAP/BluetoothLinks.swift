import VigilBluetooth
import VigilProtocol

/// What L2CAP needs of the Bluetooth central, and no more: where a client's
/// link to a peripheral is (to connect a channel over it), whether the
/// client still wants that link (a `reopen` channel waits for it), and
/// whether it is up. The Bluetooth component provides it (found with
/// `DaemonServices.components(_:)`); it tells L2CAP a link came up, or a
/// client ended, through `BluetoothLinkObserver`.
protocol BluetoothLinks {
    /// Whether Bluetooth runs (false: disabled in the config).
    var isEnabled: Bool { get }
    func l2capTarget(_ client: BluetoothClient, address: String) throws(ProtocolError) -> L2CAPTarget
    func wantsLink(_ client: BluetoothClient, address: String) -> Bool
    func linkIsUp(_ address: String) -> Bool
    /// A BR/EDR device BlueZ knows, for an RFCOMM channel.
    func classicTarget(address: String) throws(ProtocolError) -> ClassicTarget
    /// A serial port service in bluetoothd's SDP server, its connections
    /// handed to `connected` (on the loop); kept across bluetoothd restarts.
    func publishSerialService(
        _ spec: SerialServiceSpec, for client: BluetoothClient, connected: @escaping @Sendable (SerialConnection) -> Void, failed: @escaping @Sendable (String) -> Void)
    func unpublishSerialService(_ uuid: String)
}

extension DaemonServices {
    /// The central's links, while Bluetooth runs.
    var bluetoothLinks: (any BluetoothLinks)? {
        components(BluetoothLinks.self).first { $0.isEnabled }
    }
}

import VigilBluetooth
import VigilProtocol

/// What L2CAP needs of the Bluetooth central, and no more: where a client's
/// link to a peripheral is (to connect a channel over it), whether the
/// client still wants that link (a `reopen` channel waits for it), and
/// whether it is up. The Bluetooth side provides it (`DaemonServices.bluetoothLinks`);
/// it tells L2CAP a link came up through `DaemonComponent.bluetoothLinkConnected`.
protocol BluetoothLinks {
    func l2capTarget(_ client: BluetoothClient, address: String) throws(ProtocolError) -> L2CAPTarget
    func wantsLink(_ client: BluetoothClient, address: String) -> Bool
    func linkIsUp(_ address: String) -> Bool
}

import VigilBluetooth
import VigilProtocol

/// The central's side of `BluetoothLinks`: L2CAP reaches the central's
/// links through this and nothing else. The central runs on the loop, as
/// every caller does.
struct CentralLinks: BluetoothLinks {
    let central: BluetoothCentral

    func l2capTarget(_ client: BluetoothClient, address: String) throws(ProtocolError) -> L2CAPTarget {
        let outcome: Result<L2CAPTarget, ProtocolError> = central.assumeIsolated { central in
            do throws(ProtocolError) { return .success(try central.l2capTarget(client, address: address)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    func wantsLink(_ client: BluetoothClient, address: String) -> Bool {
        central.assumeIsolated { $0.wantsLink(client, address: address) }
    }

    func linkIsUp(_ address: String) -> Bool {
        central.assumeIsolated { $0.linkIsUp(address) }
    }
}

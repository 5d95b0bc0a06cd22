import VigilBluetooth
import VigilProtocol

/// The central's links as L2CAP needs them (`BluetoothLinks`), and nothing
/// more of the central: L2CAP finds this with `DaemonServices.components(_:)`.
extension BluetoothComponent: BluetoothLinks {
    var isEnabled: Bool { central != nil }

    func l2capTarget(_ client: BluetoothClient, address: String) throws(ProtocolError) -> L2CAPTarget {
        guard let central else { throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config") }
        let outcome: Result<L2CAPTarget, ProtocolError> = central.assumeIsolated { central in
            do throws(ProtocolError) { return .success(try central.l2capTarget(client, address: address)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    func classicTarget(address: String) throws(ProtocolError) -> ClassicTarget {
        guard let central else { throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config") }
        let outcome: Result<ClassicTarget, ProtocolError> = central.assumeIsolated { central in
            do throws(ProtocolError) { return .success(try central.classicTarget(address: address)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    func publishSerialService(
        _ spec: SerialServiceSpec, for client: BluetoothClient, connected: @escaping @Sendable (SerialConnection) -> Void, failed: @escaping @Sendable (String) -> Void
    ) {
        central?.assumeIsolated { $0.publishSerialService(spec, for: client, connected: connected, failed: failed) }
    }

    func unpublishSerialService(_ uuid: String) {
        central?.assumeIsolated { $0.unpublishSerialService(uuid) }
    }

    func wantsLink(_ client: BluetoothClient, address: String) -> Bool {
        central?.assumeIsolated { $0.wantsLink(client, address: address) } ?? false
    }

    func linkIsUp(_ address: String) -> Bool {
        central?.assumeIsolated { $0.linkIsUp(address) } ?? false
    }
}

import VigilBluetooth
import VigilLifecycle
import VigilProtocol

/// L2CAP's place in the component list while its code is still the core's
/// (`DaemonCore+L2CAP*.swift`): requests, links and clients reach it through
/// the same hooks the L2CAP component will implement. Goes when L2CAP
/// becomes a component of the stream-session layer.
final class L2CAPBridge: BluetoothLinkObserver {
    let name = "l2cap"
    let requestTypes: Set<String> = [
        OpenL2CAPChannel.type, PublishL2CAPChannel.type, ListL2CAP.type, UnpublishL2CAPChannel.type,
    ]
    /// The core, whose code L2CAP still is (set at start).
    private unowned var core: DaemonCore!

    /// After the Bluetooth component (earlier in the list): the published PSMs listen again.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        core = services as? DaemonCore
        core.assumeIsolated { $0.resumeL2CAP() }
    }

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let connectionID = connection.id
        let outcome: Result<Bool, ProtocolError> = core.assumeIsolated { core in
            guard let connection = core.connections[connectionID] else { return .success(true) }
            guard let central = core.central else {
                return .failure(ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config", id: message.id))
            }
            do throws(ProtocolError) {
                return .success(try core.handleL2CAPRequest(message, client: BluetoothClient(requester), connection: connection, central: central))
            } catch {
                return .failure(error)
            }
        }
        _ = try outcome.get()
    }

    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S) {
        guard snapshot.bluetooth != nil else { return }
        snapshot.bluetooth?.l2cap = core.assumeIsolated { $0.savedL2CAP() }
    }

    func bluetoothLinkConnected<S: DaemonServices>(_ address: String, client: BluetoothClient, services: isolated S) {
        core.assumeIsolated { $0.l2capLinkConnected(address, client: client) }
    }

    func bluetoothClientEnded<S: DaemonServices>(_ client: BluetoothClient, keep: Bool, services: isolated S) {
        guard !keep else { return }
        core.assumeIsolated { $0.l2capClientEnded(client) }
    }
}

extension DaemonCore {
    /// A Bluetooth event for a client, as the Bluetooth component delivers its own.
    func deliverBluetoothEvent(_ kind: String, _ attributes: [String: JSONValue], _ body: [UInt8], mode: BackgroundMode, to client: BluetoothClient) {
        component(BluetoothComponent.self)?.deliver(kind, attributes, body, mode: mode, to: client, services: self)
    }
}

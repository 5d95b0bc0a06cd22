import VigilProtocol

/// Clients' peripheral managers: registration with restoration, and what a
/// client's end does to its services.
extension BluetoothPeripheral {
    public func register(_ client: BluetoothClient, restoreIdentifier: String?) async -> PeripheralRegistered {
        let state = await central.state
        if let kept = clients[client] {
            if let restoreIdentifier, kept.restoreIdentifier == restoreIdentifier, !kept.isEmpty {
                let subscribed = kept.services.flatMap { service in
                    service.characteristics.values.filter(\.notifying).map {
                        SubscribedCharacteristic(service: $0.service, characteristic: $0.uuid)
                    }
                }
                return PeripheralRegistered(
                    state: state,
                    restored: PeripheralRestoredState(
                        services: kept.services.map(\.definition), advertisement: kept.advertisement?.data, subscribed: subscribed))
            }
            await withdrawAll(client)
        }
        clients[client] = PeripheralClientState(restoreIdentifier: restoreIdentifier)
        return PeripheralRegistered(state: state)
    }

    /// The client's process ended: an app that may be relaunched (not
    /// force-quit) keeps its services and advertising; requests for it then
    /// relaunch it. A control client's go with its connection.
    public func clientEnded(_ client: BluetoothClient, keep: Bool) async {
        guard let state = clients[client], !state.isEmpty else {
            clients[client] = nil
            return
        }
        if keep {
            log("bluetooth: \(client) ended; its \(state.services.count) service(s) stay published")
            return
        }
        await withdrawAll(client)
        clients[client] = nil
    }

    private func withdrawAll(_ client: BluetoothClient) async {
        guard let state = clients[client] else { return }
        clients[client]?.services = []
        clients[client]?.advertisement = nil
        for service in state.services { await unpublish(service) }
        if let advertisement = state.advertisement {
            await withdraw(advertisement)
            log("bluetooth: \(client)'s advertising withdrawn")
        }
        for (id, request) in pending where request.client == client {
            loop.cancelTimer(request.timer)
            request.call.replyError(name: "org.bluez.Error.Failed", message: "the app's services were withdrawn")
            pending[id] = nil
        }
    }

    /// Clients with services published (who a remote central's pairing prompt goes to).
    func publishingClients() -> [BluetoothClient] {
        clients.filter { !$0.value.services.isEmpty }.map(\.key)
    }

    public func restoreIdentifiers(of client: BluetoothClient) -> [String] {
        guard let state = clients[client], !state.isEmpty, let identifier = state.restoreIdentifier else { return [] }
        return [identifier]
    }
}

extension PeripheralClientState {
    var isEmpty: Bool { services.isEmpty && advertisement == nil }
}

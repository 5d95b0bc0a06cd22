import VigilProtocol

/// Clients come and go: a manager registers (restoring what the daemon kept
/// for it), and a client's end either keeps its links for a relaunch or
/// gives them up.
extension BluetoothCentral {
    /// A client's central manager. An app relaunched with the same restore
    /// identifier gets back what its earlier process left: connected and
    /// pending peripherals with their services and subscriptions, and its scan.
    public func register(_ client: BluetoothClient, restoreIdentifier: String?) -> CentralRegistered {
        let kept = clients[client]
        var restored: CentralRestoredState?
        if let kept, let restoreIdentifier, kept.restoreIdentifier == restoreIdentifier, !kept.isEmpty {
            restored = restorationState(of: client, kept)
            // Announced again by connectedChanged below if still connected: a
            // restored app learns of links from willRestoreState, not events.
        } else if kept != nil {
            // A different (or no) identifier: nothing is restored, and what the
            // earlier process asked for ends now.
            forget(client)
        }
        clients[client, default: CentralClientState()].restoreIdentifier = restoreIdentifier
        return CentralRegistered(state: state, restored: restored)
    }

    func restorationState(of client: BluetoothClient, _ kept: CentralClientState) -> CentralRestoredState {
        let peripherals = kept.connects.sorted().map { address -> RestoredPeripheral in
            guard let device = self.device(address) else {
                return RestoredPeripheral(peripheral: PeripheralInfo(address: address, state: "connecting"), services: [])
            }
            let services = device.servicesResolved ? services(of: device, for: client) : []
            return RestoredPeripheral(peripheral: peripheralInfo(device), services: services)
        }
        return CentralRestoredState(
            peripherals: peripherals, scanServices: kept.scan?.services.map { $0.sorted() },
            scanAllowsDuplicates: kept.scan.map(\.allowDuplicates))
    }

    /// The client's process ended. `keep`: it may be relaunched and restore
    /// (an app with a restore identifier that was not force-quit), so its
    /// links, pending connects, subscriptions and scan stay, and their events
    /// go on queueing (and relaunch it). Otherwise all of it ends.
    public func clientEnded(_ client: BluetoothClient, keep: Bool) {
        // Its pairing prompts: cancelled now rather than at their deadline,
        // unless a relaunch may answer them.
        if !keep { promptsOfEndedClient(client) }
        guard let state = clients[client] else { return }
        if keep && state.restoreIdentifier != nil {
            log("bluetooth: \(client) ended; keeping \(state.connects.count) link(s) and \(state.subscriptions.count) subscription(s) for its relaunch")
            return
        }
        forget(client)
        clients[client] = nil
    }

    private func forget(_ client: BluetoothClient) {
        guard let state = clients[client] else { return }
        clients[client] = CentralClientState(restoreIdentifier: state.restoreIdentifier)
        for monitor in state.monitors.values { if let timer = monitor.lostTimer { loop.cancelTimer(timer) } }
        for address in state.connects.union(state.subscriptions.keys.map(\.peripheral)) {
            reconcileNotifications(address)
            reconcileLink(address)
        }
        reconcileDiscovery()
    }

    /// The restore identifier kept for a client with something to restore.
    public func restoreIdentifiers(of client: BluetoothClient) -> [String] {
        guard let state = clients[client], !state.isEmpty, let identifier = state.restoreIdentifier else { return [] }
        return [identifier]
    }
}

extension CentralClientState {
    var isEmpty: Bool { scan == nil && connects.isEmpty && subscriptions.isEmpty && monitors.isEmpty && pairs.isEmpty }
}

import VigilKit

/// What the bridge decides, without doing it: events in, actions out. The
/// `Bridge` actor carries the actions out against the daemon and reports what
/// came of them; tests drive this alone.
///
/// The bridge follows one monitor (`target`): the `--address` option, the
/// peripheral the daemon restored, or the first one a scan for 0x180D finds.
/// It asks once for the connection and once for the subscription; the daemon
/// keeps both across disconnects, suspension and relaunches, so a reconnect
/// needs nothing from the app.
struct BridgePlanner: Sendable, Equatable {
    enum Action: Sendable, Equatable {
        case write(OutputLine.Record)
        case scan(services: [String])
        case stopScan
        case connect(String)
        /// GATT work on a connected monitor, in this order: discover services,
        /// read Body Sensor Location, subscribe to Heart Rate Measurement.
        case setUp(address: String, discover: Bool, readLocation: Bool, subscribe: Bool)
    }

    /// `--address`.
    let wantedAddress: String?
    /// The monitor followed, once known.
    private(set) var target: String?
    /// A scan or connect has been asked for (or restored).
    private(set) var started = false
    private(set) var scanning = false
    private(set) var connected = false
    /// The daemon holds our subscription to 0x2A37 of `target`.
    private(set) var subscribed = false
    /// Body Sensor Location is read once per process.
    private(set) var locationRead = false
    /// The target's GATT tree, once discovered (or restored).
    private(set) var services: [GATTServiceInfo]?
    private(set) var adapterState: BluetoothState = .unknown
    /// The adapter was off (or resetting) since the scan or connect was asked for.
    private var adapterWasLost = false

    init(wantedAddress: String?) {
        self.wantedAddress = wantedAddress
    }

    /// The manager exists and no restored state came first: start if the adapter is on.
    mutating func begin(state: BluetoothState) -> [Action] {
        guard !started else { return [] }
        adapterState = state
        return state == .poweredOn ? start() : []
    }

    mutating func handle(_ event: CentralEvent) -> [Action] {
        switch event {
        case let .willRestoreState(restored): return restore(restored)
        case let .stateChanged(state): return adapterChanged(state)
        case let .discovered(info): return discovered(info)
        case let .connected(address): return connectedTo(address)
        case let .disconnected(address, reason, willReconnect):
            return disconnectedFrom(address, reason: reason, willReconnect: willReconnect)
        case let .valueUpdated(path, value): return valueUpdated(path, value)
        case let .addressChanged(identity, previous):
            // A bond resolved the monitor's private address: vigild moved the
            // connect request and subscription; follow it.
            if target.map({ $0.uppercased() == previous.uppercased() }) == true { target = identity }
            return []
        case .monitorFound, .monitorLost, .advertisement, .advertisementsLost:
            return []  // the bridge starts no advertisement monitor
        case .adapterStateChanged:
            // The bridge uses the default adapter, whose state is `.stateChanged`.
            return []
        case .pairingRequest, .pairingCancelled, .pairingEnded:
            // The bridge never calls `pair` (so no `.pairingEnded`). A monitor that needs a bond pairs with Just Works, which vigild
            // accepts for a device the bridge connects to; passkeys are not asked here.
            return []
        }
    }

    /// The adapter state as `CentralManager.state` says, before an event that is not `.stateChanged`.
    mutating func noteAdapterState(_ state: BluetoothState) {
        adapterState = state
    }

    // MARK: Results of actions

    /// Scan or connect failed: the next `begin` (a retry) or `.poweredOn` starts again.
    mutating func startFailed() {
        started = false
        scanning = false
        if wantedAddress == nil { target = nil }
    }

    mutating func servicesDiscovered(_ services: [GATTServiceInfo]) {
        self.services = services
    }

    /// Decodes a read of Body Sensor Location.
    mutating func locationValue(_ value: [UInt8], from address: String) -> [Action] {
        locationRead = true
        do {
            return [.write(.bodySensorLocation(address: address, location: try BodySensorLocation(bytes: value), raw: value))]
        } catch {
            return [.write(.error(operation: "decode body sensor location", message: error.description, address: address, raw: value))]
        }
    }

    /// The monitor has no Body Sensor Location (it is optional): do not ask again.
    mutating func locationUnavailable() { locationRead = true }

    mutating func subscriptionConfirmed(_ address: String) -> [Action] {
        subscribed = true
        return [.write(.subscribed(address: address, service: HeartRateService.service, characteristic: HeartRateService.measurement))]
    }

    /// A retry after a failure: start again, or finish the GATT set-up of a connected monitor.
    mutating func retry() -> [Action] {
        if !started { return adapterState == .poweredOn ? start() : [] }
        if connected, let target, !subscribed || !locationRead { return [setUp(target)] }
        return []
    }

    // MARK: Events

    private mutating func start() -> [Action] {
        started = true
        adapterWasLost = false
        if let wantedAddress {
            target = wantedAddress
            return [.write(.connecting(address: wantedAddress)), .connect(wantedAddress)]
        }
        scanning = true
        return [.write(.scanning(services: [HeartRateService.service])), .scan(services: [HeartRateService.service])]
    }

    /// Relaunched: pick up the monitor the daemon kept for us; rescan nothing.
    private mutating func restore(_ restored: CentralRestoredState) -> [Action] {
        let candidates = restored.peripherals
        let chosen: RestoredPeripheral? =
            if let wantedAddress {
                candidates.first { $0.peripheral.address.uppercased() == wantedAddress }
            } else if let target {
                candidates.first { $0.peripheral.address == target }
            } else {
                candidates.first { $0.services.hasHeartRateService || $0.peripheral.advertisesHeartRate } ?? candidates.first
            }
        var actions: [Action] = []
        if let chosen {
            let address = chosen.peripheral.address
            target = address
            started = true
            connected = chosen.peripheral.state == "connected"
            if !chosen.services.isEmpty { services = chosen.services }
            subscribed = chosen.services.characteristic(HeartRateService.measurement, of: HeartRateService.service)?.notifying ?? false
            actions.append(.write(.restored(
                peripherals: candidates.map(\.peripheral.address), address: address, connected: connected,
                subscribed: subscribed, scanServices: restored.scanServices)))
            if restored.scanServices != nil || scanning {
                scanning = false
                actions.append(.stopScan)
            }
            if connected, !subscribed { actions.append(setUp(address)) }
        } else {
            if restored.scanServices != nil {
                // The daemon goes on scanning for us: wait for `.discovered`.
                started = true
                scanning = true
            }
            actions.append(.write(.restored(
                peripherals: candidates.map(\.peripheral.address), address: nil, connected: false, subscribed: false,
                scanServices: restored.scanServices)))
            if !started, adapterState == .poweredOn { actions += start() }
        }
        return actions
    }

    private mutating func adapterChanged(_ state: BluetoothState) -> [Action] {
        adapterState = state
        var actions: [Action] = [.write(.bluetoothState(state.rawValue))]
        guard state == .poweredOn else {
            if state != .unknown, started {
                adapterWasLost = true
                connected = false
            }
            return actions
        }
        if !started {
            actions += start()
        } else if adapterWasLost {
            // Back from an adapter power cycle: ask again for what we follow (the
            // daemon's requests survive this; asking twice is harmless).
            adapterWasLost = false
            if let target, !connected {
                actions += [.write(.connecting(address: target)), .connect(target)]
            } else if scanning {
                actions += [.write(.scanning(services: [HeartRateService.service])), .scan(services: [HeartRateService.service])]
            }
        }
        return actions
    }

    private mutating func discovered(_ info: PeripheralInfo) -> [Action] {
        // The scan is filtered by the daemon; an empty list means it did not say.
        guard scanning, target == nil, info.serviceUUIDs.isEmpty || info.advertisesHeartRate else { return [] }
        scanning = false
        target = info.address
        return [
            .write(.discovered(address: info.address, name: info.name, rssi: info.rssi)), .stopScan,
            .write(.connecting(address: info.address)), .connect(info.address),
        ]
    }

    private mutating func connectedTo(_ address: String) -> [Action] {
        guard address == target else { return [] }
        connected = true
        var actions: [Action] = [.write(.connected(address: address))]
        if !subscribed || !locationRead { actions.append(setUp(address)) }
        return actions
    }

    private func setUp(_ address: String) -> Action {
        .setUp(address: address, discover: services == nil, readLocation: !locationRead, subscribe: !subscribed)
    }

    private mutating func disconnectedFrom(_ address: String, reason: String, willReconnect: Bool) -> [Action] {
        guard address == target else { return [] }
        connected = false
        var actions: [Action] = [.write(.disconnected(address: address, reason: reason, willReconnect: willReconnect))]
        if !willReconnect {
            // The daemon dropped our connect request (and the subscription with it):
            // ask again, so that the bridge keeps its place.
            subscribed = false
            actions += [.write(.connecting(address: address)), .connect(address)]
        }
        // willReconnect: the daemon reconnects and renews the subscription by itself.
        return actions
    }

    private func valueUpdated(_ path: CharacteristicPath, _ value: [UInt8]) -> [Action] {
        guard path.matches(service: HeartRateService.service, characteristic: HeartRateService.measurement) else { return [] }
        do {
            let measurement = try HeartRateMeasurement(bytes: value)
            return [.write(.measurement(address: path.peripheral, measurement: measurement, raw: value))]
        } catch {
            return [.write(.error(
                operation: "decode heart rate measurement", message: error.description, address: path.peripheral, raw: value))]
        }
    }
}

extension PeripheralInfo {
    var advertisesHeartRate: Bool { serviceUUIDs.contains { GATTUUID.matches($0, HeartRateService.service) } }
}

import VigilKit

/// What the bridge decides as a heart-rate monitor itself (`--republish`):
/// the Heart Rate Service it publishes through the daemon's peripheral role,
/// without doing it. Events in, actions out; `Republisher` carries them out.
///
/// - Published once: at the first `poweredOn`, unless the daemon restored
///   the service (a relaunch: it is still published, and advertised).
/// - 0x2A37 (notify) carries each measurement the bridge receives, byte for
///   byte as the source sent it (a serial sensor's line encoded). When the
///   daemon's transmit queue is full (`updateValue` false) the latest value
///   is kept and sent on `.readyToUpdate`; a newer measurement replaces it.
/// - 0x2A38 (read) is a fixed value: the daemon answers it, the bridge is not woken.
/// - 0x2A39 (write) 0x01 resets Energy Expended: the source does it (the BLE
///   monitor's own control point, or the serial sensor's offset).
struct RepublishPlanner: Sendable, Equatable {
    enum Action: Sendable, Equatable {
        case write(OutputLine.Record)
        case publish(GATTServiceDefinition)
        case advertise(AdvertisementData)
        case update([UInt8])
        /// Reset Energy Expended at the source, then answer the request (when it needs an answer).
        case resetEnergy(ATTRequest)
        case respond(ATTRequest, value: [UInt8], error: ATTError?)
    }

    static let localName = "Vigil HRM Bridge"
    /// GAP appearance 0x0341: heart rate sensor, heart rate belt.
    static let appearance = 833

    let location: BodySensorLocation
    private(set) var servicePublished = false
    private(set) var advertising = false
    /// A publish is under way (or failed and waits for a retry).
    private(set) var publishing = false
    private(set) var state: BluetoothState = .unknown
    /// The last measurement value, and whether it still has to go out.
    private(set) var latest: [UInt8]?
    private(set) var unsent = false
    private(set) var subscribed = false

    init(location: BodySensorLocation) {
        self.location = location
    }

    var service: GATTServiceDefinition {
        GATTServiceDefinition(uuid: HeartRateService.service, characteristics: [
            GATTCharacteristicDefinition(uuid: HeartRateService.measurement, properties: ["notify"]),
            GATTCharacteristicDefinition(uuid: HeartRateService.bodySensorLocation, fixedValue: [location.rawValue]),
            GATTCharacteristicDefinition(uuid: HeartRateService.controlPoint, properties: ["write"]),
        ])
    }

    var advertisement: AdvertisementData {
        AdvertisementData(localName: Self.localName, serviceUUIDs: ["180d"], appearance: Self.appearance)
    }

    /// Right after the manager exists: what it already has (restored) and the adapter's state.
    mutating func begin(state: BluetoothState, services: [GATTServiceDefinition], advertisement: AdvertisementData?) -> [Action] {
        self.state = state
        var actions: [Action] = []
        if services.contains(where: { GATTUUID.matches($0.uuid, HeartRateService.service) }) {
            servicePublished = true
            advertising = advertisement != nil
            actions.append(.write(.published(restored: true, localName: advertisement?.localName)))
        }
        return actions + publishIfNeeded()
    }

    mutating func handle(_ event: PeripheralManagerEvent) -> [Action] {
        switch event {
        case let .willRestoreState(restored):
            // `begin` has seen the restored services already (the manager's
            // `services` start from them); the subscriptions are news.
            if !servicePublished, restored.services.contains(where: { GATTUUID.matches($0.uuid, HeartRateService.service) }) {
                servicePublished = true
                advertising = restored.advertisement != nil
            }
            subscribed = restored.subscribed.contains { GATTUUID.matches($0.characteristic, HeartRateService.measurement) }
            return []
        case let .stateChanged(state):
            self.state = state
            return publishIfNeeded()
        case let .readRequest(request):
            // Not expected: 0x2A38 is fixed (the daemon answers) and 0x2A37 is notify-only.
            if request.matches(service: HeartRateService.service, characteristic: HeartRateService.bodySensorLocation) {
                return [.respond(request, value: Array([location.rawValue].dropFirst(request.offset)), error: nil)]
            }
            return [.respond(request, value: [], error: .readNotPermitted)]
        case let .writeRequest(request, value):
            return controlPointWrite(request, value)
        case let .subscribed(_, characteristic):
            guard GATTUUID.matches(characteristic, HeartRateService.measurement) else { return [] }
            subscribed = true
            return [.write(.subscribers(characteristic: characteristic, subscribed: true))]
        case let .unsubscribed(_, characteristic):
            guard GATTUUID.matches(characteristic, HeartRateService.measurement) else { return [] }
            subscribed = false
            return [.write(.subscribers(characteristic: characteristic, subscribed: false))]
        case .readyToUpdate:
            guard unsent, let latest else { return [] }
            return [.update(latest)]
        }
    }

    /// A measurement from the source (its 0x2A37 value): send it to the subscribers.
    mutating func measurement(_ value: [UInt8]) -> [Action] {
        latest = value
        unsent = true
        return [.update(value)]
    }

    /// `updateValue`'s answer for `value`: sent (or nobody subscribed), or the queue is full.
    mutating func updated(_ value: [UInt8], sent: Bool) {
        if sent, value == latest { unsent = false }
    }

    /// Publishing (or advertising) failed: try again later.
    mutating func publishFailed() {
        publishing = false
    }

    mutating func serviceAdded() {
        servicePublished = true
    }

    mutating func advertisingStarted() {
        advertising = true
        publishing = false
    }

    /// The service and the advertisement, when the adapter is on and they are not out yet.
    mutating func publishIfNeeded() -> [Action] {
        guard state == .poweredOn, !publishing, !servicePublished || !advertising else { return [] }
        publishing = true
        var actions: [Action] = []
        if !servicePublished { actions.append(.publish(service)) }
        actions.append(.advertise(advertisement))
        return actions
    }

    private func controlPointWrite(_ request: ATTRequest, _ value: [UInt8]) -> [Action] {
        guard request.matches(service: HeartRateService.service, characteristic: HeartRateService.controlPoint) else {
            return request.needsResponse ? [.respond(request, value: [], error: .writeNotPermitted)] : []
        }
        guard value == [0x01] else {
            // HRS answers 0x80 (Control Point Not Supported); the daemon's nearest is requestNotSupported.
            var actions: [Action] = [.write(.controlPoint(raw: value, action: "refused"))]
            if request.needsResponse { actions.append(.respond(request, value: [], error: .requestNotSupported)) }
            return actions
        }
        return [.resetEnergy(request)]
    }
}

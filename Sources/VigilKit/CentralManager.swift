import VigilProtocol
import VigilSystem

/// Bluetooth LE in the central role, as `CBCentralManager`: scan, connect,
/// and the events of the adapter and of the app's peripherals, delivered in
/// one ordered stream.
///
/// ```swift
/// let central = try await CentralManager(application: app, restoreIdentifier: "hrm")
/// for await event in central.events {
///     switch event {
///     case let .willRestoreState(restored):      // relaunched in the background: first, if at all
///         adopt(restored.peripherals)
///     case .stateChanged(.poweredOn):
///         try await central.connect(strapAddress)   // never times out
///     case let .connected(address):
///         let strap = central.peripheral(address)
///         try await strap.setNotifyValue(true, service: "180d", characteristic: "2a37")
///     case let .valueUpdated(path, value):
///         try store(path, value)                 // done with it when the loop comes round
///         await app.finishedProcessing()
///     default:
///         break
///     }
/// }
/// ```
///
/// The daemon is the one central of the machine: it keeps the app's connect
/// requests, subscriptions and scan while the app is suspended or not
/// running, and wakes (or relaunches) an app with the `bluetooth-central`
/// background mode for its events. With a restore identifier, an app
/// relaunched that way gets what the daemon kept for it as
/// `.willRestoreState`, before any other event.
///
/// Create one `CentralManager` per `Application`, early at every launch:
/// Bluetooth events that arrive before it exists are held (not acknowledged),
/// and handed to it once it is created, after `willRestoreState`. A second
/// manager replaces the first (whose `events` then finish). After a daemon
/// restart (`.connectionRestored` in `Application.events`) the manager is
/// registered again, with the same restore identifier, before any request of
/// the app reaches the new daemon.
///
/// Failures are thrown as `ProtocolError`: `unavailable` (no adapter,
/// powered off, bluetoothd not running), `notFound`, `notConnected`,
/// `deviceError` (BlueZ or the device refused; the message names BlueZ's
/// error), `notPermitted`, `disconnected` (vigild is unreachable).
public final class CentralManager: Sendable {
    /// The identifier the daemon keeps the app's state under across relaunches, if any.
    public let restoreIdentifier: String?
    /// Everything about the adapter and the app's peripherals, in the daemon's
    /// order: `willRestoreState` first (if the daemon restored anything), then
    /// each event as it comes. Iterate it from one task only.
    ///
    /// Each event is acknowledged once the loop asks for the next one (or the
    /// manager is released): an app that dies, or is frozen and killed, while
    /// handling one gets it again at its next launch. The daemon batches the
    /// values of fast notifiers while the app is busy: such an event yields
    /// one `valueUpdated` per value, in order, and is acknowledged after the
    /// last (a process that dies in the middle gets the whole batch again). An event held and not
    /// finished holds back the acknowledgement of every later event of the
    /// app, so keep iterating. Cancelling the iterating task ends the stream.
    public let events: AsyncStream<CentralEvent>

    let application: Application
    private let status: CentralStatus

    /// Registers with the daemon (`ble.registerCentral`). With a restore
    /// identifier, an app relaunched in the background gets
    /// `.willRestoreState` as the first element of `events`, before any other
    /// Bluetooth event.
    public init(application: Application, restoreIdentifier: String? = nil) async throws {
        let router = application.session.router
        let status = CentralStatus(restoreIdentifier: restoreIdentifier)
        self.events = try await registerManager(
            RegisterCentral(restoreIdentifier: restoreIdentifier), expecting: CentralRegistered.self, on: application.session,
            route: { registered, continuation in
                router.register(central: CentralSink(continuation: continuation, status: status), registered)
            },
            unroute: { [weak router, weak status] in
                if let router, let status { router.unregister(central: status) }
            })
        self.restoreIdentifier = restoreIdentifier
        self.application = application
        self.status = status
    }

    deinit { application.session.router.unregister(central: status) }

    /// The adapter's state as last known: from the registration, then from
    /// each `ble.state` event, updated before `.stateChanged` is yielded.
    public var state: BluetoothState { status.state }

    /// Scans for peripherals advertising any of `services` (16-bit short forms
    /// such as `"180d"` are fine; nil: every peripheral, which only an app in
    /// the foreground may ask for). Replaces the app's earlier scan; the daemon
    /// keeps it while the app is suspended. Results come as `.discovered`.
    /// - Parameter allowDuplicates: every advertisement (RSSI updates), not just
    ///   the first of each peripheral; ignored in the background.
    /// `adapter`: the adapter to scan with, by name (`"hci1"`) or address;
    /// nil: the daemon's default. A missing one throws `notFound`.
    public func scanForPeripherals(withServices services: [String]?, allowDuplicates: Bool = false, adapter: String? = nil) async throws {
        _ = try await request(
            StartScan(services: services, allowDuplicates: allowDuplicates ? true : nil, adapter: adapter), expecting: Done.self)
    }

    public func stopScan() async throws {
        _ = try await request(StopScan(), expecting: Done.self)
    }

    /// Asks for a connection. Returns once the daemon took the request; it never
    /// times out: `.connected` comes when the peripheral is in range, possibly
    /// much later, possibly after a relaunch of the app. After a disconnect the
    /// request stays (`willReconnect`) until `cancelPeripheralConnection`.
    /// `adapter`: the adapter to connect through, by name or address; nil: the
    /// daemon's default. A peripheral is used through one adapter at a time.
    public func connect(_ address: String, adapter: String? = nil) async throws {
        _ = try await request(ConnectPeripheral(peripheral: address, adapter: adapter), expecting: Done.self)
    }

    /// Cancels a pending connect, or ends the app's use of the link (which stays
    /// up while another app uses it). Subscriptions of the app end with it.
    public func cancelPeripheralConnection(_ address: String) async throws {
        _ = try await request(CancelPeripheralConnection(peripheral: address), expecting: Done.self)
    }

    /// The peripherals the daemon knows: seen by a scan, or connected.
    public func knownPeripherals() async throws -> [PeripheralInfo] {
        try await request(ListPeripherals(), expecting: PeripheralList.self).peripherals
    }

    /// Pairs (bonds) with a peripheral BlueZ knows (seen by a scan, or asked
    /// to connect). Prompts its pairing needs come as `.pairingRequest`.
    /// Returns once BlueZ reports it paired (at once if it already was);
    /// throws `deviceError` naming BlueZ's error (`AuthenticationFailed`,
    /// `AuthenticationCanceled`, ...) and, where vigild knows, why (a prompt
    /// rejected, or not answered in time).
    @discardableResult
    public func pair(_ address: String) async throws -> PairingState {
        try await request(PairPeripheral(peripheral: address), expecting: PairingState.self)
    }

    /// Cancels this app's pairing in progress with the peripheral.
    public func cancelPairing(_ address: String) async throws {
        _ = try await request(CancelPairing(peripheral: address), expecting: Done.self)
    }

    /// Forgets the peripheral's bond (and BlueZ's record of it). An app may
    /// forget only peripherals it connects to or paired.
    public func forget(_ address: String) async throws {
        _ = try await request(ForgetPeripheral(peripheral: address), expecting: Done.self)
    }

    @discardableResult
    public func setTrusted(_ trusted: Bool, peripheral address: String) async throws -> PairingState {
        try await request(SetTrusted(peripheral: address, trusted: trusted), expecting: PairingState.self)
    }

    /// Answers a `.pairingRequest`: `passkey` for a `passkey` prompt, `pin`
    /// for a `pin` prompt; `accept` alone for `confirm` and `authorize`;
    /// `accept: false` rejects the pairing.
    public func respond(to prompt: PairingPrompt, accept: Bool, passkey: Int? = nil, pin: String? = nil) async throws {
        _ = try await request(PairingResponse(request: prompt.request, accept: accept, passkey: passkey, pin: pin), expecting: Done.self)
    }

    /// The peripheral at `address`, to use its GATT services (it must be connected for that).
    /// Starts (or replaces) an advertisement monitor: devices whose
    /// advertisements match any of `patterns` are reported found and lost, and
    /// (with `advertisements`) every advertisement of a found device comes as
    /// `.advertisement`, batched while the app is suspended. Allowed in the
    /// background; the app is woken or relaunched for its events.
    public func startMonitor(
        _ monitor: String, patterns: [MonitorPattern], rssiFound: Int? = nil, rssiLost: Int? = nil,
        lostTimeout: Double? = nil, advertisements: Bool = true
    ) async throws {
        _ = try await request(
            StartMonitor(
                monitor: monitor, patterns: patterns, rssiFound: rssiFound, rssiLost: rssiLost, lostTimeout: lostTimeout,
                advertisements: advertisements ? nil : false),
            expecting: Done.self)
    }

    public func stopMonitor(_ monitor: String) async throws {
        _ = try await request(StopMonitor(monitor: monitor), expecting: Done.self)
    }

    /// The app's monitors, the devices each has found, and its counts of
    /// advertisements delivered and lost.
    public func monitors() async throws -> [MonitorInfo] {
        try await request(ListMonitors(), expecting: MonitorList.self).monitors
    }

    public func peripheral(_ address: String) -> Peripheral {
        Peripheral(address: address, application: application)
    }

    private func request<Reply: Message>(_ message: some Message, expecting _: Reply.Type) async throws -> Reply {
        try await application.session.request(message, expecting: Reply.self)
    }
}

/// What a `CentralManager` reports, in order.
public enum CentralEvent: Sendable, Equatable {
    /// The app was relaunched and the daemon kept state for its restore
    /// identifier: its connections, pending connects and subscriptions (which
    /// go on), and its scan. Only ever the first event.
    case willRestoreState(CentralRestoredState)
    /// The adapter's state changed; `CentralManager.state` already says so.
    case stateChanged(BluetoothState)
    /// An advertisement matched the app's scan.
    case discovered(PeripheralInfo)
    /// A peripheral the app asked to connect to is connected (its address).
    /// The adapter is in the event's `ble.connected` attributes (`AppEvent.bluetoothContent`)
    /// and in `knownPeripherals()`.
    case connected(String)
    /// A peripheral of the app disconnected. `willReconnect`: the connect request
    /// stays pending, and the daemon connects again when the peripheral is back.
    case disconnected(String, reason: String, willReconnect: Bool)
    /// A value of a subscribed characteristic (a notification or indication).
    /// The path names services and characteristics by their full lowercase UUIDs.
    case valueUpdated(CharacteristicPath, [UInt8])
    /// BlueZ asks, during a pairing, what only the app (or its user) can
    /// answer: a passkey to type, a number to confirm, a passkey to show.
    /// Answer with `CentralManager.respond(to:accept:passkey:pin:)` within
    /// `prompt.timeout` seconds (prompts that need no answer, `displayPasskey`
    /// and `displayPin`, say what to type on the peripheral).
    case pairingRequest(PairingPrompt)
    /// A prompt ended unanswered: BlueZ cancelled it, or its deadline passed.
    case pairingCancelled(request: Int, peripheral: String, reason: String)
    /// A bonded peripheral's private address was resolved: BlueZ reports it
    /// under its identity address now (the first), was the second. The app's
    /// connect request and subscriptions moved with it.
    case addressChanged(String, previous: String)
    /// A pairing this app asked for, cut by the daemon's restart before its
    /// `pair` answered, was done by the daemon afterwards: its state, and
    /// why it failed if it did (docs/bluetooth.md, "Across restarts").
    case pairingEnded(PairingState, error: String?)
    /// A device matched the monitor (`CentralManager.startMonitor`).
    case monitorFound(monitor: String, peripheral: String, rssi: Int?, name: String?)
    /// No matching advertisement of a found device for the monitor's `lostTimeout`.
    case monitorLost(monitor: String, peripheral: String)
    /// One advertisement of a found device, as data, in the order received.
    case advertisement(monitor: String, AdvertisementRecord)
    /// The daemon dropped this many advertisements of the monitor because the
    /// app fell behind (its queue was full); comes before the next ones delivered.
    case advertisementsLost(monitor: String, count: Int)
    /// An adapter this app chose by name or address (not the default, which
    /// `stateChanged` follows) was powered off or on, vanished (`unsupported`)
    /// or came back. What the app asked of it waits for it; nothing moves to another adapter.
    case adapterStateChanged(adapter: String, BluetoothState)

    init(_ content: BluetoothEventContent, payload: [UInt8]) {
        switch content {
        case let .state(state): self = .stateChanged(state)
        case let .discovered(peripheral): self = .discovered(peripheral)
        case let .connected(peripheral, _): self = .connected(peripheral)
        case let .adapterState(adapter, state): self = .adapterStateChanged(adapter: adapter, state)
        case let .disconnected(peripheral, reason, willReconnect, _):
            self = .disconnected(peripheral, reason: reason, willReconnect: willReconnect)
        case let .notification(path): self = .valueUpdated(path, payload)
        case let .pairingRequest(prompt): self = .pairingRequest(prompt)
        case let .pairingCancelled(request, peripheral, reason):
            self = .pairingCancelled(request: request, peripheral: peripheral, reason: reason)
        case let .addressChanged(peripheral, previous): self = .addressChanged(peripheral, previous: previous)
        case let .pairingEnded(state, error): self = .pairingEnded(state, error: error)
        case let .monitorFound(monitor, peripheral, rssi, name):
            self = .monitorFound(monitor: monitor, peripheral: peripheral, rssi: rssi, name: name)
        case let .monitorLost(monitor, peripheral): self = .monitorLost(monitor: monitor, peripheral: peripheral)
        case let .advertisements(monitor, lost):
            // One record (a vigilctl push); a batch goes through `elements`.
            let record = (try? AdvertisementRecords.decode(payload, attributes: content.attributes))?.first
            self = record.map { .advertisement(monitor: monitor, $0) } ?? .advertisementsLost(monitor: monitor, count: lost)
        }
    }

    /// Every event one `ble.*` event or push stands for, in order (a batch of
    /// notifications or advertisements is many). Nil for a body that cannot be read.
    static func all(_ content: BluetoothEventContent, payload: [UInt8], attributes: [String: JSONValue]) -> [CentralEvent]? {
        switch content {
        case let .notification(path):
            guard let values = try? NotificationValues.decode(payload, attributes: attributes, path: path) else { return nil }
            return values.map { .valueUpdated($0.path, $0.value) }
        case let .advertisements(monitor, lost):
            guard let records = try? AdvertisementRecords.decode(payload, attributes: attributes) else { return nil }
            return (lost > 0 ? [.advertisementsLost(monitor: monitor, count: lost)] : [])
                + records.map { .advertisement(monitor: monitor, $0) }
        default:
            return [CentralEvent(content, payload: payload)]
        }
    }

    /// What a manager yields for one event, in order: a `ble.notification`
    /// carries one value or, framed, a batch (`NotificationValues`): one
    /// `valueUpdated` each. Nil for a notification whose body cannot be read.
    static func elements(_ content: BluetoothEventContent, _ event: AppEvent) -> [CentralEvent]? {
        all(content, payload: event.payload, attributes: event.attributes)
    }
}

extension AppEvent {
    /// The typed content of a Bluetooth event (`ble.*`), nil for other kinds.
    public var bluetoothContent: BluetoothEventContent? {
        (try? BluetoothEventContent(kind: kind, attributes: attributes)) ?? nil
    }
}

/// Where the router sends a central manager's events.
struct CentralSink: Sendable {
    var continuation: EventRouter.CentralContinuation
    var status: CentralStatus
}

/// What the central manager reports without a round trip, kept current by the router.
final class CentralStatus: Sendable {
    let restoreIdentifier: String?
    private let current = Locked(BluetoothState.unknown)

    init(restoreIdentifier: String?) { self.restoreIdentifier = restoreIdentifier }

    var state: BluetoothState { current.withLock { $0 } }
    func setState(_ state: BluetoothState) { current.withLock { $0 = state } }
}

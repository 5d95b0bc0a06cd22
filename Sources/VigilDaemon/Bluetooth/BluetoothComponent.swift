import VigilBluetooth
import VigilLifecycle
import VigilProtocol

/// Bluetooth LE through BlueZ: the central and peripheral roles
/// (`VigilBluetooth`), their `ble.*` requests, and their events carried to
/// apps through their event queues (waking them with `bluetooth-central` or
/// `bluetooth-peripheral`) and to vigilctl as pushes. What apps asked of
/// Bluetooth is its part of the state file.
///
/// Components that act on Bluetooth links (L2CAP channels) are told of them
/// through `BluetoothLinkObserver`, and reach the central only through
/// `central`.
final class BluetoothComponent: DaemonComponent {
    let name = "bluetooth"
    let requestTypes = BluetoothComponent.centralRequests.union(BluetoothComponent.peripheralRequests)
        .union(BluetoothComponent.pairingRequests).union(BluetoothComponent.monitorRequests)

    /// nil while stopped or disabled by the config.
    private(set) var central: BluetoothCentral?
    private(set) var peripheral: BluetoothPeripheral?
    /// The roles' delegate (they hold it weakly).
    private var events: (any BluetoothDelegate)?
    /// Per client and monitor: advertisements delivered and lost (BluetoothComponent+Monitors).
    var monitorDeliveries: [BluetoothClient: [String: MonitorDeliveries]] = [:]

    /// The requests whose effect is in the state file (`save`).
    static let intentRequests: Set<String> = [
        RegisterCentral.type, StartScan.type, StopScan.type, ConnectPeripheral.type, CancelPeripheralConnection.type,
        SetNotify.type, RegisterPeripheral.type, AddService.type, RemoveService.type, StartAdvertising.type,
        StopAdvertising.type, StartMonitor.type, StopMonitor.type, PairPeripheral.type, CancelPairing.type,
        ForgetPeripheral.type,
    ]

    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        let config = services.config
        let logger = services.logger
        guard config.bluetooth else {
            logger.info("bluetooth: disabled by the config")
            return
        }
        let loop = services.loop
        let central = BluetoothCentral(loop: loop, adapter: config.bluetoothAdapter, log: { logger.info("\($0)") })
        let peripheral = BluetoothPeripheral(
            loop: loop, central: central, requestTimeout: .milliseconds(Int(config.bluetoothRequestTimeout * 1000)),
            log: { logger.info("\($0)") })
        self.central = central
        self.peripheral = peripheral
        // Pairing prompts wait as long as a peripheral request does for an app.
        let promptTimeout = Duration.milliseconds(Int(config.bluetoothRequestTimeout * 1000))
        let events = BluetoothEvents(services: services)
        self.events = events
        let restoring = saved.bluetooth
        peripheral.assumeIsolated { peripheral in
            peripheral.setDelegate(events)
            if let restoring { peripheral.restore(restoring.peripheral) }
        }
        central.assumeIsolated { central in
            if let restoring { central.restore(restoring.central) }
            central.setDelegate(events)
            central.setPairingPromptTimeout(promptTimeout)
            central.attach(peripheral)
            central.start()
        }
    }

    /// Waits for the central's stop: it hands BlueZ back its AcquireNotify
    /// sockets before the bus connection closes (see `releaseAcquiredNotifications`).
    func stop<S: DaemonServices>(leavingApps: Bool, services: isolated S) async {
        guard let central else { return }
        self.central = nil
        peripheral = nil
        await central.stop()
    }

    /// For `status`: usable, or which of bus, bluetoothd, adapter and power is missing.
    func addStatus<S: DaemonServices>(to status: inout DaemonStatus, services: isolated S) {
        status.bluetooth = health
    }

    var health: BluetoothHealth {
        guard let central else {
            return BluetoothHealth(condition: .disabled, detail: "disabled in the daemon's config (bluetooth = false)")
        }
        return central.assumeIsolated { $0.health }
    }

    /// The central's state for systemd's status line ("off" when disabled).
    func addSummary<S: DaemonServices>(to parts: inout [String], services: isolated S) {
        parts.append("Bluetooth: " + (central?.assumeIsolated { $0.state.rawValue } ?? "off"))
    }

    /// Moves with every change to the roles' clients (`savedVersion`): what
    /// `save` makes from. nil while stopped or disabled (then saved only by
    /// the full saves, as nil).
    func savedPartVersion<S: DaemonServices>(services: isolated S) -> UInt64? {
        guard let central, let peripheral else { return nil }
        return central.assumeIsolated { $0.savedVersion } &+ peripheral.assumeIsolated { $0.savedVersion }
    }

    /// What apps asked of Bluetooth, for the state file (nil when disabled).
    /// The rest of `snapshot.bluetooth` (L2CAP's intents) is kept.
    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S) {
        guard let central, let peripheral else {
            snapshot.bluetooth = nil
            return
        }
        var saved = snapshot.bluetooth ?? SavedBluetooth()
        saved.central = central.assumeIsolated { $0.saved() }
        saved.peripheral = peripheral.assumeIsolated { $0.saved() }
        snapshot.bluetooth = saved
    }

    /// An app whose process is gone keeps its Bluetooth use for a relaunch
    /// (with a restore identifier) unless the user force-quit it.
    func appStateChanged<S: DaemonServices>(_ app: String, from old: AppState, to new: AppState, services: isolated S) {
        guard new == .notRunning, let central else { return }
        let keep = !(services.engine.apps[app]?.forceQuit ?? true)
        central.assumeIsolated { $0.clientEnded(.app(app), keep: keep) }
        if !keep { forgetMonitorDeliveries(of: .app(app)) }
        if let peripheral { services.loop.task { await peripheral.clientEnded(.app(app), keep: keep) } }
        for observer in services.components(BluetoothLinkObserver.self) {
            observer.bluetoothClientEnded(.app(app), keep: keep, services: services)
        }
    }

    func connectionClosed<S: DaemonServices>(_ connection: ClientConnection, services: isolated S) {
        guard case .control = connection.phase else { return }
        let client = BluetoothClient.control(connection.id)
        for observer in services.components(BluetoothLinkObserver.self) {
            observer.bluetoothClientEnded(client, keep: false, services: services)
        }
        central?.assumeIsolated { $0.clientEnded(client, keep: false) }
        forgetMonitorDeliveries(of: client)
        if let peripheral { services.loop.task { await peripheral.clientEnded(client, keep: false) } }
    }

    /// A launch not by the user names the central managers the daemon kept
    /// for the app, so it recreates them (CoreBluetooth's launch options).
    func addLaunchOptions<S: DaemonServices>(_ launch: inout LaunchOptions, of app: String, services: isolated S) {
        guard launch.reason != .user, let central, let peripheral else { return }
        launch.restoreIdentifiers = central.assumeIsolated { $0.restoreIdentifiers(of: .app(app)) }
            + peripheral.assumeIsolated { $0.restoreIdentifiers(of: .app(app)) }
    }

    func deliver<S: DaemonServices>(
        _ kind: String, _ attributes: [String: JSONValue], _ body: [UInt8], mode: BackgroundMode, to client: BluetoothClient,
        services: isolated S
    ) {
        if kind == BluetoothEventKind.connected || kind == BluetoothEventKind.disconnected,
           case let .string(address)? = attributes["peripheral"] {
            let reason: String = if case let .string(text)? = attributes["reason"] { text } else { "" }
            services.recordDevice(
                kind: "bluetooth", device: address, change: kind == BluetoothEventKind.connected ? "connected" : "disconnected",
                detail: reason)
        }
        switch client {
        case let .control(connectionID):
            if let connection = services.connection(connectionID) {
                services.send(BluetoothPush(kind: kind, attributes: attributes), body: body, to: connection)
            }
        case let .app(app):
            let event = QueuedEvent(kind: kind, attributes: attributes, payload: body, wakeMode: mode)
            do {
                try services.withEngine { engine, now throws(ProtocolError) in _ = try engine.deliver(event, to: app, now: now) }
            } catch {
                // Counted, logged and reported to the app as an overflow by the engine.
                services.logger.warning("bluetooth: '\(kind)' for \(app) not queued: \(error)", metadata: ["app": "\(app)"])
            }
        }
        // After the app's ble.connected: channels waiting for the link open now.
        if kind == BluetoothEventKind.connected, case let .string(address)? = attributes["peripheral"] {
            for observer in services.components(BluetoothLinkObserver.self) {
                observer.bluetoothLinkConnected(address, client: client, services: services)
            }
        }
    }
}

extension BluetoothClient {
    init(_ requester: Requester) {
        switch requester {
        case let .app(id): self = .app(id)
        case let .control(connection): self = .control(connection)
        }
    }
}

/// A component that acts on Bluetooth links and clients (L2CAP channels):
/// told when a client's link to a peripheral is up, and when a client has
/// ended (an app's process gone, a control client's connection closed).
protocol BluetoothLinkObserver: DaemonComponent {
    func bluetoothLinkConnected<S: DaemonServices>(_ address: String, client: BluetoothClient, services: isolated S)
    func bluetoothClientEnded<S: DaemonServices>(_ client: BluetoothClient, keep: Bool, services: isolated S)
}

/// The roles' delegate: their events, on the loop, into the component.
private final class BluetoothEvents<S: DaemonServices>: BluetoothDelegate {
    unowned let services: S

    init(services: S) { self.services = services }

    func bluetooth(emit kind: String, attributes: [String: JSONValue], body: [UInt8], mode: BackgroundMode, to client: BluetoothClient) {
        services.callback(BluetoothComponent.self) { bluetooth, services in
            bluetooth.deliver(kind, attributes, body, mode: mode, to: client, services: services)
        }()
    }

    func bluetooth(notifications values: [[UInt8]], of path: CharacteristicPath, to client: BluetoothClient) {
        services.callback(BluetoothComponent.self) { bluetooth, services in
            bluetooth.deliverNotifications(values, of: path, to: client, services: services)
        }()
    }

    func bluetooth(advertisement record: AdvertisementRecord, monitor: String, to client: BluetoothClient) {
        services.callback(BluetoothComponent.self) { bluetooth, services in
            bluetooth.deliverAdvertisement(record, monitor: monitor, to: client, services: services)
        }()
    }

    func bluetoothClientIsForeground(_ client: BluetoothClient) -> Bool {
        switch client {
        case let .app(id): services.assumeIsolated { $0.engine.apps[id]?.state.isForeground ?? false }
        case .control: true
        }
    }

    /// Systemd's status line names Bluetooth's state.
    func bluetoothStateChanged(_ state: BluetoothState) {
        services.assumeIsolated { $0.statusChanged() }
    }
}

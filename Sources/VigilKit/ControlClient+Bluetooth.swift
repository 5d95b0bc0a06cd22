import VigilProtocol

/// Bluetooth LE for the control role: what `vigilctl ble` lists and does. The
/// daemon takes the same `ble.*` requests as from apps, with no central to
/// register, and pushes what an app would get as events (`blePush`) to the
/// control connection that asked: discoveries of its scan, its connects and
/// disconnects, its notifications. Scans and subscriptions of a control
/// connection end with it.
extension ControlClient {
    /// The adapter's state, and its name.
    public func bluetoothState() async throws -> BluetoothStateReply {
        try await connection.request(GetBluetoothState())
    }

    /// The peripherals the daemon knows: seen by a scan, or connected.
    public func peripherals() async throws -> [PeripheralInfo] {
        try await connection.request(ListPeripherals(), expecting: PeripheralList.self).peripherals
    }

    /// Every client's published PSMs and L2CAP channels (`ble.l2cap`).
    public func l2cap() async throws -> L2CAPList {
        try await connection.request(ListL2CAP(), expecting: L2CAPList.self)
    }

    /// What the daemon pushes from now on (never `willRestoreState`), in order,
    /// until the connection closes. Take it before the request whose results
    /// it should see (a scan, a connect, a subscription).
    public func bluetoothEvents() -> AsyncStream<CentralEvent> {
        let (events, continuation) = AsyncStream.makeStream(of: CentralEvent.self)
        pushes.addBluetoothWatcher(continuation)
        return events
    }

    /// Scans for peripherals advertising any of `services` (nil: all); results come as `.discovered`.
    public func startScan(services: [String]?, allowDuplicates: Bool = false, adapter: String? = nil) async throws {
        _ = try await connection.request(
            StartScan(services: services, allowDuplicates: allowDuplicates ? true : nil, adapter: adapter), expecting: Done.self)
    }

    public func stopScan() async throws {
        _ = try await connection.request(StopScan(), expecting: Done.self)
    }

    /// Starts an advertisement monitor for this connection (`vigilctl ble
    /// monitor`): `.monitorFound`, `.monitorLost` and one `.advertisement` per
    /// advertisement come through `bluetoothEvents()`.
    public func startMonitor(_ request: StartMonitor) async throws {
        _ = try await connection.request(request, expecting: Done.self)
    }

    public func stopMonitor(_ monitor: String) async throws {
        _ = try await connection.request(StopMonitor(monitor: monitor), expecting: Done.self)
    }

    public func monitors() async throws -> [MonitorInfo] {
        try await connection.request(ListMonitors(), expecting: MonitorList.self).monitors
    }

    /// Asks for a connection; never times out (`.connected` comes when it is up).
    public func connectPeripheral(_ address: String, adapter: String? = nil) async throws {
        _ = try await connection.request(ConnectPeripheral(peripheral: address, adapter: adapter), expecting: Done.self)
    }

    /// Cancels a pending connect, or drops this client's use of the link.
    public func cancelPeripheralConnection(_ address: String) async throws {
        _ = try await connection.request(CancelPeripheralConnection(peripheral: address), expecting: Done.self)
    }

    public func discoverServices(_ address: String) async throws -> [GATTServiceInfo] {
        try await connection.request(DiscoverServices(peripheral: address), expecting: GATTServices.self).services
    }

    /// Reads a characteristic (or one of its descriptors).
    public func readValue(_ path: CharacteristicPath, descriptor: String? = nil) async throws -> [UInt8] {
        try await connection.requestWithBody(ReadCharacteristic(path, descriptor: descriptor), expecting: CharacteristicValue.self).body
    }

    /// Writes a characteristic, or with `descriptor` one of its descriptors (with response).
    public func writeValue(_ value: [UInt8], to path: CharacteristicPath, descriptor: String? = nil, withResponse: Bool = true) async throws {
        _ = try await connection.request(
            WriteCharacteristic(path, descriptor: descriptor, withResponse: withResponse), body: value, expecting: Done.self)
    }

    /// Subscribes to (or unsubscribes from) notifications; values come as
    /// `.valueUpdated`. `acquire` as in `Peripheral.setNotifyValue`.
    public func setNotifyValue(_ enabled: Bool, for path: CharacteristicPath, acquire: Bool? = nil) async throws {
        _ = try await connection.request(SetNotify(path, enabled: enabled, acquire: acquire), expecting: Done.self)
    }
}

import VigilProtocol

/// Bluetooth LE in the peripheral role for the control role: what `vigilctl
/// ble serve` does. A control client registers no peripheral manager: it
/// publishes services and advertises with the same requests as an app, and
/// the daemon pushes the requests of remote centrals for its services (reads
/// of characteristics without a fixed value, writes, subscriptions,
/// `readyToUpdate`) to its connection as `blePush` (kind, attributes, value in
/// the body), and takes its `ble.respond` and `ble.updateValue`. Its services
/// and its advertisement end when the connection closes.
extension ControlClient {
    /// What the daemon pushes about this connection's services from now on,
    /// and the adapter's state changes, until the connection closes (never
    /// `willRestoreState`). Take it before publishing, so no request is missed.
    public func peripheralEvents() -> AsyncStream<PeripheralManagerEvent> {
        let (events, continuation) = AsyncStream.makeStream(of: PeripheralManagerEvent.self)
        pushes.addPeripheralWatcher(continuation)
        return events
    }

    /// Publishes a service (fixed values are answered by the daemon).
    /// `adapter`: publish on this adapter (`"hci1"` or its address); nil: the daemon's default.
    public func addService(_ service: GATTServiceDefinition, adapter: String? = nil) async throws {
        _ = try await connection.request(AddService(service: service, adapter: adapter), expecting: Done.self)
    }

    /// Withdraws one of this connection's services (by UUID), or all of them (nil).
    public func removeService(uuid: String?) async throws {
        _ = try await connection.request(RemoveService(uuid: uuid), expecting: Done.self)
    }

    /// Advertises, replacing this connection's earlier advertisement.
    public func startAdvertising(_ advertisement: AdvertisementData, adapter: String? = nil) async throws {
        _ = try await connection.request(StartAdvertising(advertisement: advertisement, adapter: adapter), expecting: Done.self)
    }

    public func stopAdvertising() async throws {
        _ = try await connection.request(StopAdvertising(), expecting: Done.self)
    }

    /// Answers a read (with `value`) or a write with response, or refuses it
    /// with an ATT error; `invalidArgument` for a write without response.
    public func respond(to request: ATTRequest, value: [UInt8] = [], error: ATTError? = nil) async throws {
        _ = try await connection.request(try request.response(error: error), body: error == nil ? value : [], expecting: Done.self)
    }

    /// Sends `value` to the centrals subscribed to the characteristic: `sent`
    /// false when the transmit queue is full (send again on `.readyToUpdate`).
    @discardableResult
    public func updateValue(_ value: [UInt8], service: String, characteristic: String) async throws -> ValueUpdated {
        try await connection.request(UpdateValue(service: service, characteristic: characteristic), body: value, expecting: ValueUpdated.self)
    }
}

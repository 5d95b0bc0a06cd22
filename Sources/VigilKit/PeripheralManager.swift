import VigilProtocol
import VigilSystem

/// Bluetooth LE in the peripheral role, as `CBPeripheralManager`: publish GATT
/// services, advertise, answer remote centrals' reads and writes, and send
/// values to subscribers, with the requests and the adapter's state delivered
/// in one ordered stream.
///
/// ```swift
/// let heartRate = GATTServiceDefinition(uuid: "180d", characteristics: [
///     .init(uuid: "2a37", properties: ["notify"]),
///     .init(uuid: "2a38", properties: ["read"], fixedValue: [0x01]),
/// ])
/// let manager = try await PeripheralManager(application: app, restoreIdentifier: "hrm")
/// for await event in manager.events {
///     switch event {
///     case let .willRestoreState(restored):        // relaunched: services still published
///         subscribed = Set(restored.subscribed.map(\.characteristic))
///     case .stateChanged(.poweredOn):
///         try await manager.add(heartRate)       // a fixed-value 2a38 is answered by the daemon
///         try await manager.startAdvertising(AdvertisementData(localName: "Vigil HRM", serviceUUIDs: ["180d"]))
///     case let .readRequest(request):
///         try await manager.respond(to: request, value: currentValue(request))
///     case let .writeRequest(request, value):
///         apply(value)
///         if request.needsResponse { try await manager.respond(to: request) }
///     case .subscribed, .readyToUpdate:
///         try await manager.updateValue(measurement(), service: "180d", characteristic: "2a37")
///     default:
///         break
///     }
/// }
/// ```
///
/// The daemon owns the GATT application and the advertisement BlueZ sees: an
/// app's services stay published, and its advertisement on the air, while it
/// is suspended or not running (until it removes them or the user force-quits
/// it). A request of a remote central for a characteristic without a fixed
/// value wakes (or relaunches) an app with the `bluetooth-peripheral`
/// background mode. With a restore identifier, an app relaunched that way
/// gets what the daemon kept as `.willRestoreState`, before any other event.
///
/// Create one `PeripheralManager` per `Application`, early at every launch:
/// `ble.peripheral.*` events that arrive before it exists are held (not
/// acknowledged) and handed to it once it is created, after
/// `willRestoreState`. A second manager replaces the first (whose `events`
/// then finish). A `CentralManager` of the same app gets the adapter's state
/// changes too. After a daemon restart (`.connectionRestored`) the manager
/// registers again, with the same restore identifier, and publishes again
/// the services it published and the advertisement it started, before any
/// request of the app reaches the new daemon.
///
/// Failures are thrown as `ProtocolError`: `unavailable` (no adapter,
/// powered off, bluetoothd not running), `invalidArgument` (a definition the
/// daemon refused; the message names the problem), `notFound` (an unknown
/// service or characteristic, or a request that already timed out),
/// `deviceError` (BlueZ refused; the message names BlueZ's error),
/// `notPermitted`, `disconnected` (vigild is unreachable).
public final class PeripheralManager: Sendable {
    /// The identifier the daemon keeps the app's state under across relaunches, if any.
    public let restoreIdentifier: String?
    /// The adapter's state and the requests of remote centrals, in the daemon's
    /// order: `willRestoreState` first (if the daemon restored anything), then
    /// each event as it comes. Iterate it from one task only.
    ///
    /// Each event is acknowledged once the loop asks for the next one (or the
    /// manager is released): an app that dies while handling a request gets it
    /// again at its next launch (answering it then gets `notFound` if the
    /// central's request timed out meanwhile). An event held and not finished
    /// holds back the acknowledgement of every later event of the app, so keep
    /// iterating. Cancelling the iterating task ends the stream.
    public let events: AsyncStream<PeripheralManagerEvent>

    let application: Application
    private let status: PeripheralStatus

    /// Registers with the daemon (`ble.registerPeripheral`). With a restore
    /// identifier, an app relaunched in the background gets
    /// `.willRestoreState` as the first element of `events`.
    public init(application: Application, restoreIdentifier: String? = nil) async throws {
        let router = application.session.router
        let status = PeripheralStatus(restoreIdentifier: restoreIdentifier)
        self.events = try await registerManager(
            RegisterPeripheral(restoreIdentifier: restoreIdentifier), expecting: PeripheralRegistered.self,
            on: application.session,
            route: { registered, continuation in
                router.register(peripheral: PeripheralSink(continuation: continuation, status: status), registered)
            },
            unroute: { [weak router, weak status] in
                if let router, let status { router.unregister(peripheral: status) }
            })
        self.restoreIdentifier = restoreIdentifier
        self.application = application
        self.status = status
    }

    deinit { application.session.router.unregister(peripheral: status) }

    /// The adapter's state as last known: from the registration, then from
    /// each `ble.state` event, updated before `.stateChanged` is yielded.
    public var state: BluetoothState { status.state }

    /// The services published through this manager (and those restored), as
    /// far as this process knows, in the order they were added.
    public var services: [GATTServiceDefinition] { status.published.services }

    /// The advertisement started through this manager (or restored); nil when not advertising.
    public var advertisement: AdvertisementData? { status.published.advertisement }

    /// Publishes a service. Returns once BlueZ registered it. A characteristic
    /// with a `value` is fixed: the daemon answers its reads itself. Adding a
    /// service with the UUID of a published one replaces it.
    /// `adapter`: publish on this adapter (`"hci1"` or its address); nil: the
    /// daemon's default. A missing one throws `notFound`.
    public func add(_ service: GATTServiceDefinition, adapter: String? = nil) async throws {
        _ = try await request(AddService(service: service, adapter: adapter), expecting: Done.self) { $0.add(service, adapter: adapter) }
    }

    /// Withdraws the service with this UUID (any spelling).
    public func remove(serviceUUID: String) async throws {
        _ = try await request(RemoveService(uuid: serviceUUID), expecting: Done.self) { $0.remove(serviceUUID) }
    }

    /// Withdraws every service of the app.
    public func removeAllServices() async throws {
        _ = try await request(RemoveService(uuid: nil), expecting: Done.self) {
            $0.services = []
            $0.serviceAdapters = [:]
        }
    }

    /// Advertises, replacing the app's earlier advertisement. BlueZ's refusals
    /// (too long, no free advertising instance) are `deviceError`.
    /// `adapter`: advertise on this adapter; nil: the daemon's default.
    public func startAdvertising(_ advertisement: AdvertisementData, adapter: String? = nil) async throws {
        _ = try await request(StartAdvertising(advertisement: advertisement, adapter: adapter), expecting: Done.self) {
            $0.advertisement = advertisement
            $0.advertisementAdapter = adapter
        }
    }

    public func stopAdvertising() async throws {
        _ = try await request(StopAdvertising(), expecting: Done.self) {
            $0.advertisement = nil
            $0.advertisementAdapter = nil
        }
    }

    /// Answers a read (`value`: what the central gets, from the request's
    /// offset on) or a write with response (`value` ignored), or refuses it with
    /// an ATT error. Answer within the daemon's request timeout: after it the
    /// central got an error and this throws `notFound`.
    /// A write without response (`needsResponse` false) takes no answer:
    /// `invalidArgument` is thrown without asking the daemon.
    public func respond(to request: ATTRequest, value: [UInt8] = [], error: ATTError? = nil) async throws {
        _ = try await self.request(try request.response(error: error), body: error == nil ? value : [], expecting: Done.self)
    }

    /// Sends `value` to the centrals subscribed to the characteristic. Returns
    /// true when it was sent, or when no central is subscribed (nothing to send);
    /// false when the transmit queue is full: send it again on `.readyToUpdate`.
    @discardableResult
    public func updateValue(_ value: [UInt8], service: String, characteristic: String) async throws -> Bool {
        try await updateValueReply(value, service: service, characteristic: characteristic).sent
    }

    /// `updateValue`, with the daemon's whole answer: whether it was sent, and
    /// whether any central is subscribed.
    public func updateValueReply(_ value: [UInt8], service: String, characteristic: String) async throws -> ValueUpdated {
        try await request(UpdateValue(service: service, characteristic: characteristic), body: value, expecting: ValueUpdated.self)
    }

    /// `published`: how a success changes what the app has out, applied on the
    /// reader thread as the reply is read (so a reconnection that follows it
    /// publishes the new state again).
    private func request<Reply: Message>(
        _ message: some Message, body: [UInt8] = [], expecting _: Reply.Type,
        published change: (@Sendable (inout PeripheralStatus.Published) -> Void)? = nil
    ) async throws -> Reply {
        guard let change else { return try await application.session.request(message, body: body, expecting: Reply.self) }
        let status = self.status
        return try await application.session.request(message, body: body, expecting: Reply.self) { reply in
            if reply.type != ProtocolError.type { status.update(change) }
        }
    }
}

/// What a `PeripheralManager` reports, in order.
public enum PeripheralManagerEvent: Sendable, Equatable {
    /// The app was relaunched and the daemon kept state for its restore
    /// identifier: its services (still published), its advertisement (still on
    /// the air) and the characteristics centrals are subscribed to. Only ever
    /// the first event.
    case willRestoreState(PeripheralRestoredState)
    /// The adapter's state changed; `PeripheralManager.state` already says so.
    case stateChanged(BluetoothState)
    /// A central reads a characteristic without a fixed value: answer with
    /// `respond(to:value:)`.
    case readRequest(ATTRequest)
    /// A central wrote `value`. Answer with `respond(to:)` when
    /// `request.needsResponse` (a write with response); a write without
    /// response takes no answer.
    case writeRequest(ATTRequest, value: [UInt8])
    /// The first central subscribed to the characteristic (full lowercase UUIDs).
    case subscribed(service: String, characteristic: String)
    /// The last central unsubscribed.
    case unsubscribed(service: String, characteristic: String)
    /// The transmit queue has room again after `updateValue` returned false.
    case readyToUpdate

    init(_ content: PeripheralEventContent, payload: [UInt8]) {
        switch content {
        case let .read(request, service, characteristic, offset, central):
            self = .readRequest(ATTRequest(id: request, service: service, characteristic: characteristic, offset: offset, central: central))
        case let .write(request, service, characteristic, offset, central):
            self = .writeRequest(
                ATTRequest(id: request, service: service, characteristic: characteristic, offset: offset, central: central), value: payload)
        case let .subscribed(service, characteristic): self = .subscribed(service: service, characteristic: characteristic)
        case let .unsubscribed(service, characteristic): self = .unsubscribed(service: service, characteristic: characteristic)
        case .readyToUpdate: self = .readyToUpdate
        }
    }
}

/// A remote central's read or write of one of the app's characteristics
/// (`CBATTRequest`). Services and characteristics are named by their full
/// lowercase UUIDs (`matches(service:characteristic:)` compares any spelling).
public struct ATTRequest: Sendable, Equatable, Hashable {
    /// The daemon's request number, to answer; nil for a write without response.
    public let id: Int?
    public let service: String
    public let characteristic: String
    /// Where in the value the read starts or the write goes (long reads and writes).
    public let offset: Int
    /// The central's address, when BlueZ names it.
    public let central: String?

    public init(id: Int?, service: String, characteristic: String, offset: Int = 0, central: String? = nil) {
        self.id = id
        self.service = service
        self.characteristic = characteristic
        self.offset = offset
        self.central = central
    }

    /// Whether the central waits for an answer (`respond(to:)`): every read, and writes with response.
    public var needsResponse: Bool { id != nil }

    /// Whether this is about `characteristic` of `service`, in any spelling (`"180d"`, `"2a37"`).
    public func matches(service: String, characteristic: String) -> Bool {
        GATTUUID.matches(self.service, service) && GATTUUID.matches(self.characteristic, characteristic)
    }

    /// The `ble.respond` request that answers this one.
    func response(error: ATTError?) throws(ProtocolError) -> RespondToRequest {
        guard let id else {
            throw ProtocolError(.invalidArgument, "a write without response to \(GATTUUID.short(characteristic)) takes no response")
        }
        return RespondToRequest(request: id, error: error?.rawValue)
    }
}

extension AppEvent {
    /// The typed content of a peripheral-role event (`ble.peripheral.*`), nil for other kinds.
    public var peripheralContent: PeripheralEventContent? {
        (try? PeripheralEventContent(kind: kind, attributes: attributes)) ?? nil
    }
}

/// Where the router sends a peripheral manager's events.
struct PeripheralSink: Sendable {
    var continuation: EventRouter.PeripheralContinuation
    var status: PeripheralStatus
}

/// What the peripheral manager reports without a round trip, kept current by
/// the router, and what it published (for a new daemon after a restart).
final class PeripheralStatus: Sendable {
    let restoreIdentifier: String?
    private let current = Locked(BluetoothState.unknown)
    private let publishedState = Locked(Published())

    /// The services and advertisement the app has out, as this process knows them.
    struct Published: Sendable {
        var services: [GATTServiceDefinition] = []
        var advertisement: AdvertisementData?
        /// The adapter each service (by its UUID as given) and the advertisement named, if any.
        var serviceAdapters: [String: String] = [:]
        var advertisementAdapter: String?

        mutating func add(_ service: GATTServiceDefinition, adapter: String? = nil) {
            if let index = services.firstIndex(where: { GATTUUID.matches($0.uuid, service.uuid) }) {
                serviceAdapters[services[index].uuid] = nil
                services[index] = service
            } else {
                services.append(service)
            }
            serviceAdapters[service.uuid] = adapter
        }

        mutating func remove(_ uuid: String) {
            for service in services where GATTUUID.matches(service.uuid, uuid) { serviceAdapters[service.uuid] = nil }
            services.removeAll { GATTUUID.matches($0.uuid, uuid) }
        }
    }

    init(restoreIdentifier: String?) { self.restoreIdentifier = restoreIdentifier }

    var state: BluetoothState { current.withLock { $0 } }
    func setState(_ state: BluetoothState) { current.withLock { $0 = state } }

    var published: Published { publishedState.withLock { $0 } }
    func update(_ change: (inout Published) -> Void) { publishedState.withLock { change(&$0) } }

    /// What the daemon restored is what is out.
    func restored(_ restored: PeripheralRestoredState) {
        update { published in
            for service in restored.services { published.add(service) }
            published.advertisement = restored.advertisement
        }
    }
}

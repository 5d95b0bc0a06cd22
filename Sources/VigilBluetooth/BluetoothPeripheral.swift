import VigilDBus
import VigilProtocol
import VigilSystem

/// The peripheral role for every client: GATT services and advertisements
/// the daemon publishes with BlueZ on the clients' behalf, on the central's
/// bus connection. They outlive the client's suspension and crashes: fixed
/// values are answered here, other requests are forwarded (waking or
/// relaunching the app) and answered within the request timeout, or the
/// central gets an ATT error; never a hang. After bluetoothd or the bus
/// restarts, everything is published again.
public actor BluetoothPeripheral {
    public nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    let central: BluetoothCentral
    weak var delegate: (any BluetoothDelegate)?
    let log: @Sendable (String) -> Void
    /// How long a forwarded read or write waits for the app's answer (enough
    /// for a wake or a relaunch, well within the central's 30 s ATT timeout).
    let requestTimeout: Duration

    var clients: [BluetoothClient: PeripheralClientState] = [:] {
        didSet { savedVersion &+= 1 }
    }
    /// Moves with every change to `clients`, of which `saved()` is made (as
    /// `BluetoothCentral.savedVersion`).
    public private(set) var savedVersion: UInt64 = 0
    var pending: [Int: PendingRequest] = [:]
    var nextRequestID = 1
    var nextServiceNumber = 1
    /// Each advertisement gets a path of its own: a new one never meets an old
    /// one BlueZ has not let go of yet (`AlreadyExists`).
    var nextAdvertisementNumber = 1
    /// Clients told `sent: false` that wait for `readyToUpdate`.
    var waitingForRoom: Set<BluetoothClient> = []
    var roomTimer: TimerID?

    public init(
        loop: EventLoop, central: BluetoothCentral, requestTimeout: Duration = .seconds(20),
        log: @escaping @Sendable (String) -> Void
    ) {
        self.loop = loop
        self.central = central
        self.requestTimeout = requestTimeout
        self.log = log
    }

    public func setDelegate(_ delegate: any BluetoothDelegate) {
        self.delegate = delegate
    }

    func emit(_ event: PeripheralEventContent, body: [UInt8] = [], to client: BluetoothClient) {
        delegate?.bluetooth(emit: event.kind, attributes: event.attributes, body: body, mode: .bluetoothPeripheral, to: client)
    }

    /// The central's bus and the adapter `choice` names (an address; nil:
    /// the default), if BlueZ is there to talk to.
    func blueZ(adapter choice: String? = nil) async -> (bus: DBusConnection, adapter: ObjectPath)? {
        await central.roleAccess(adapter: choice)
    }

    /// The same, synchronously: the central shares this loop. For the paths
    /// that must not suspend (value updates keep their order).
    func blueZNow() -> (bus: DBusConnection, adapter: ObjectPath)? {
        central.assumeIsolated { $0.roleAccess() }
    }

    /// A request's `adapter` (a name or address) as the address to keep; nil: the default.
    func chooseAdapter(_ selector: String?) throws(ProtocolError) -> String? {
        guard selector != nil else { return nil }
        let outcome: Result<String?, ProtocolError> = central.assumeIsolated { central in
            do throws(ProtocolError) { return .success(try central.choosePublishingAdapter(selector)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }
}

/// One client's published services and advertisement.
struct PeripheralClientState {
    var restoreIdentifier: String?
    var services: [PublishedService] = []
    var advertisement: PublishedAdvertisement?
}

/// A service as published: its definition (canonical UUIDs) and, while
/// BlueZ has it, the exported objects and registration.
final class PublishedService: @unchecked Sendable {
    let definition: GATTServiceDefinition
    let root: ObjectPath
    var tree: DBusObjectTree?
    var registered = false
    /// Withdrawn (`unpublish`): a registration still in flight is undone when it returns.
    var withdrawn = false
    /// The adapter (address) the client chose; nil: the default.
    var adapter: String?
    /// The adapter object BlueZ registered it on (to unregister it there).
    var registeredOn: ObjectPath?
    /// Characteristic object -> what it is.
    var characteristics: [ObjectPath: PublishedCharacteristic] = [:]

    init(definition: GATTServiceDefinition, root: ObjectPath) {
        self.definition = definition
        self.root = root
    }
}

struct PublishedCharacteristic {
    let service: String
    let uuid: String
    let flags: [String]
    let fixedValue: [UInt8]?
    var notifying = false
}

final class PublishedAdvertisement: @unchecked Sendable {
    let data: AdvertisementData
    let path: ObjectPath
    var tree: DBusObjectTree?
    var registered = false
    /// Withdrawn (`withdraw`): a registration still in flight is undone when it returns.
    var withdrawn = false
    /// The adapter (address) the client chose; nil: the default.
    var adapter: String?
    /// The adapter object BlueZ registered it on.
    var registeredOn: ObjectPath?

    init(data: AdvertisementData, path: ObjectPath) {
        self.data = data
        self.path = path
    }
}

/// A read or write BlueZ is waiting on while the app decides.
struct PendingRequest {
    let client: BluetoothClient
    let call: DBusMethodCall
    let isRead: Bool
    let timer: TimerID
}

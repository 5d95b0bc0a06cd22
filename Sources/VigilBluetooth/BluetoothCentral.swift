import FoundationEssentials
import Glibc
import VigilDBus
import VigilProtocol
import VigilSystem

/// The central role for every client of the daemon, over one BlueZ connection.
///
/// It keeps the one mirror of BlueZ's tree (`tree`) and, per client, what it
/// asked for: a scan, peripherals to be connected, subscriptions. From those it
/// derives what BlueZ must do (discovery on or off and its filter, Connect
/// until connected, StartNotify after every reconnect) and does it, again and
/// again if BlueZ or the link goes away, so no client writes a retry loop.
/// All on the daemon's event loop: BlueZ's replies and signals, and the
/// clients' requests, are handled in one order.
public actor BluetoothCentral {
    public nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// nil: the system bus (DBUS_SYSTEM_BUS_ADDRESS honoured).
    let busAddress: String?
    weak var delegate: (any BluetoothDelegate)?
    let log: @Sendable (String) -> Void

    // The bus and the mirror (BluetoothCentral+Bus).
    var bus: DBusConnection?
    var busGeneration = 0
    var bluezOwner: String?
    public internal(set) var tree = BlueZObjectTree()
    var loading = false
    var signalsWhileLoading: [DBusMessage] = []
    var reconnectDelay: Duration = .milliseconds(500)
    var busUnavailableLogged = false
    /// Why the last attempt to reach the bus failed, while there is no bus (for `health`).
    var busProblem: String?
    /// A connection attempt is under way (one at a time).
    var connectingBus = false
    /// While there is no bus: watches for its socket to appear (inotify).
    var busWatchers: [PathWatcher] = []
    /// While there is no bus: the next attempt, if one is due (a follow-up,
    /// or the backoff for addresses with no socket file to watch).
    var busRetry: TimerID?
    /// Follow-up attempts made since the bus socket last changed (only while
    /// it exists and refuses connections).
    var busFollowUps = BluetoothCentral.busFollowUpDelays.count
    /// After `stop`: no reconnecting.
    var stopped = false
    var lastState: BluetoothState = .unknown

    // Clients and links (BluetoothCentral+Links, +Scanning, +Subscriptions).
    var clients: [BluetoothClient: CentralClientState] = [:] {
        didSet { savedVersion &+= 1 }
    }
    /// Moves with every change to `clients`, of which `saved()` is made: the
    /// daemon makes and compares a saved part only when it moved (issue 34).
    /// A change `saved()` does not show (an advertisement seen) moves it too.
    public private(set) var savedVersion: UInt64 = 0
    var links: [String: Link] = [:]
    /// Per adapter (its object path): each adapter discovers on its own.
    var discoveries: [ObjectPath: DiscoveryState] = [:]
    var notify: [ObjectPath: NotifyState] = [:]
    /// Characteristics whose AcquireNotify socket vigild closed and BlueZ may
    /// not have released yet: checked before the daemon leaves the bus.
    var releasedSockets: Set<ObjectPath> = []
    var resolvedWaiters: [String: [Waiter]] = [:]
    var nextWaiterID = 0

    // The pairing agent, prompts and pairings (BluetoothCentral+Pairing).
    var agent = AgentState()
    // Published serial port services (BluetoothCentral+SerialServices).
    var serialServices = SerialServices()

    // Adapters (BluetoothCentral+Adapters).
    /// `bluetooth-adapter` of the daemon config (a name or address); nil: see `pinnedAdapter`.
    let configuredAdapter: String?
    /// Without a configured adapter, the default's address, fixed at first sight.
    var pinnedAdapter: String?
    /// The state last reported of each adapter clients chose (by address).
    var reportedAdapterStates: [String: BluetoothState] = [:]
    /// The last name seen of each chosen adapter, to name it once it is gone.
    var adapterNames: [String: String] = [:]

    public init(loop: EventLoop, busAddress: String? = nil, adapter: String? = nil, log: @escaping @Sendable (String) -> Void) {
        self.loop = loop
        self.busAddress = busAddress
        self.configuredAdapter = adapter
        self.log = log
    }

    public func setDelegate(_ delegate: any BluetoothDelegate) {
        self.delegate = delegate
    }

    /// The peripheral role publishing through this connection: told when
    /// BlueZ (re)appears or goes, to publish again.
    weak var peripheral: BluetoothPeripheral?

    public func attach(_ peripheral: BluetoothPeripheral) {
        self.peripheral = peripheral
    }

    /// Connects to the bus and loads BlueZ's tree; if the bus or BlueZ is not
    /// there, waits for it in the background without polling: the bus socket
    /// through inotify, bluetoothd through NameOwnerChanged (apps see
    /// `unsupported` until it is).
    public func start() {
        loop.task { await self.connectBus() }
    }

    public func stop() async {
        stopped = true
        await releaseAcquiredNotifications()
        stopWaitingForBus()
        busGeneration += 1  // the closing connection's disconnect is not an outage
        await bus?.close()
        bus = nil
    }

    func emit(_ event: BluetoothEventContent, body: [UInt8] = [], to client: BluetoothClient) {
        delegate?.bluetooth(emit: event.kind, attributes: event.attributes, body: body, mode: .bluetoothCentral, to: client)
    }
}

/// A caller waiting for a peripheral's services to be resolved.
struct Waiter {
    let id: Int
    let continuation: CheckedContinuation<Bool, Never>
    let timer: TimerID
}

import VigilProtocol

/// Who uses Bluetooth through the daemon (central or peripheral role): an
/// app (by id) or a control connection (vigilctl ble, by connection number).
public enum BluetoothClient: Hashable, Sendable, CustomStringConvertible {
    case app(String)
    case control(Int)

    public var description: String {
        switch self {
        case let .app(id): id
        case let .control(connection): "vigilctl (connection \(connection))"
        }
    }
}

/// What the Bluetooth roles need from their owner (the daemon): where events go, and
/// whether a client is in the foreground (background scans must name
/// services, and their duplicates are always coalesced).
public protocol BluetoothDelegate: AnyObject, Sendable {
    /// An event for `client`, in order, on the loop; `mode` is the background
    /// mode that may wake an app for it.
    func bluetooth(emit kind: String, attributes: [String: JSONValue], body: [UInt8], mode: BackgroundMode, to client: BluetoothClient)
    /// Values of a subscribed characteristic for `client`, in the order they
    /// came (several when one read of an AcquireNotify socket found several),
    /// on the loop. By default each is emitted as a `ble.notification` of its own.
    func bluetooth(notifications values: [[UInt8]], of path: CharacteristicPath, to client: BluetoothClient)
    func bluetoothClientIsForeground(_ client: BluetoothClient) -> Bool
    /// One advertisement of a device found by the client's monitor, on the
    /// loop, in the order received. By default emitted as a
    /// `ble.monitor.advertisements` event of its own.
    func bluetooth(advertisement record: AdvertisementRecord, monitor: String, to client: BluetoothClient)
    /// The central's `state` changed (on the loop); by default nothing is done.
    func bluetoothStateChanged(_ state: BluetoothState)
}

extension BluetoothDelegate {
    public func bluetoothStateChanged(_ state: BluetoothState) {}

    public func bluetooth(advertisement record: AdvertisementRecord, monitor: String, to client: BluetoothClient) {
        bluetooth(
            emit: MonitorEventKind.advertisements,
            attributes: ["monitor": .string(monitor), "framing": .string(AdvertisementRecords.framing)],
            body: AdvertisementRecords.encode([record]), mode: .bluetoothCentral, to: client)
    }

    public func bluetooth(notifications values: [[UInt8]], of path: CharacteristicPath, to client: BluetoothClient) {
        let content = BluetoothEventContent.notification(path)
        for value in values {
            bluetooth(emit: content.kind, attributes: content.attributes, body: value, mode: .bluetoothCentral, to: client)
        }
    }
}

/// How a client wants a subscription's notifications from BlueZ (`ble.notify`'s `acquire`).
public enum NotifyPreference: Sendable, Equatable {
    /// AcquireNotify where the characteristic allows it (it has `notify`),
    /// StartNotify where it does not or AcquireNotify fails (`acquire` absent).
    case automatic
    /// AcquireNotify, StartNotify if it fails (`acquire: true`).
    case acquire
    /// StartNotify only (`acquire: false`): for a peripheral that notifies
    /// before its subscription is confirmed, which AcquireNotify loses.
    case startNotify

    public init(acquire: Bool?) {
        switch acquire {
        case nil: self = .automatic
        case true?: self = .acquire
        case false?: self = .startNotify
        }
    }

    /// `ble.notify`'s `acquire` member for it.
    public var acquire: Bool? {
        switch self {
        case .automatic: nil
        case .acquire: true
        case .startNotify: false
        }
    }
}

/// One client's use of the central role. Kept while an app with a restore
/// identifier is not running, so a relaunch can restore it.
struct CentralClientState {
    var restoreIdentifier: String?
    var scan: Scan?
    /// Addresses seen under the current scan: later advertisements are duplicates.
    var seen: Set<String> = []
    /// Peripherals this client wants connected (pending or connected).
    var connects: Set<String> = []
    /// The adapter (address) a connect named; absent: the default adapter.
    var connectAdapters: [String: String] = [:]
    /// Addresses this client was told are connected (so it hears of the disconnect).
    var announced: Set<String> = []
    /// Characteristics this client subscribed to, and how it wants them notified.
    var subscriptions: [CharacteristicPath: NotifyPreference] = [:]
    /// Advertisement monitors by the client's name for them (BluetoothCentral+Monitors).
    var monitors: [String: AdvertisementMonitor] = [:]
    /// Pairing intents (apps only): peripherals this app asked to pair with
    /// whose `ble.pair` has not been answered. Saved, so a pairing cut by
    /// vigild's death is done after its restart (BluetoothCentral+Pairing).
    var pairs: Set<String> = []

    struct Scan: Equatable {
        /// Canonical UUIDs; nil: every peripheral.
        var services: Set<String>?
        var allowDuplicates: Bool
        /// The adapter (address) it named; nil: the default adapter.
        var adapter: String? = nil
    }
}

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
    func bluetoothClientIsForeground(_ client: BluetoothClient) -> Bool
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
    /// Addresses this client was told are connected (so it hears of the disconnect).
    var announced: Set<String> = []
    /// Characteristics this client subscribed to; the value: asked for AcquireNotify.
    var subscriptions: [CharacteristicPath: Bool] = [:]

    struct Scan: Equatable {
        /// Canonical UUIDs; nil: every peripheral.
        var services: Set<String>?
        var allowDuplicates: Bool
    }
}

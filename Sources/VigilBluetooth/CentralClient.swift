import VigilProtocol

/// Who uses the central role: an app (by id) or a control connection
/// (vigilctl ble, by connection number).
public enum CentralClient: Hashable, Sendable, CustomStringConvertible {
    case app(String)
    case control(Int)

    public var description: String {
        switch self {
        case let .app(id): id
        case let .control(connection): "vigilctl (connection \(connection))"
        }
    }
}

/// What the central needs from its owner (the daemon): where events go, and
/// whether a client is in the foreground (background scans must name
/// services, and their duplicates are always coalesced).
public protocol BluetoothCentralDelegate: AnyObject, Sendable {
    /// An event for `client`, in order. Called on the central's loop.
    func central(emit event: BluetoothEventContent, body: [UInt8], to client: CentralClient)
    func centralClientIsForeground(_ client: CentralClient) -> Bool
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

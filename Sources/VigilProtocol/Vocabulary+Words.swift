/// The vocabulary as people read it (`vigilctl`'s tables, error messages);
/// the raw values stay the wire format.
extension AppState {
    public var words: String {
        switch self {
        case .notRunning: "not running"
        case .inactive: "inactive"
        case .active: "active"
        case .background: "background"
        case .suspended: "suspended"
        }
    }
}

extension BluetoothState {
    public var words: String {
        switch self {
        case .unknown: "unknown"
        case .resetting: "resetting"
        case .unsupported: "unsupported"
        case .poweredOff: "powered off"
        case .poweredOn: "powered on"
        }
    }
}

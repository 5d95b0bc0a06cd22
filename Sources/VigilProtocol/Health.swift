/// Whether the daemon can use Bluetooth, and if not, which link of the chain
/// is missing: the system bus, bluetoothd, an adapter, its power. Reported by
/// `status` (member `bluetooth`) so that an administrator sees the reason
/// rather than an empty scan.
public struct BluetoothHealth: Sendable, Codable, Equatable {
    public enum Condition: String, Sendable, Codable, Equatable, CaseIterable {
        /// `bluetooth = false` in the daemon's config.
        case disabled
        /// The system bus cannot be reached.
        case noBus
        /// The bus is there, bluetoothd (org.bluez) is not on it.
        case noBluetoothd
        /// Not known yet: the daemon is connecting to the bus, or bluetoothd
        /// just (re)appeared and its objects are being loaded.
        case starting
        /// bluetoothd runs but has no adapter.
        case noAdapter
        case poweredOff
        case poweredOn
        /// A condition this client does not know (a newer daemon's).
        case unrecognized

        public init(from decoder: any Decoder) throws {
            self = Condition(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .unrecognized
        }
    }

    public var condition: Condition
    /// The adapter in use (e.g. `hci0`), when there is one.
    public var adapter: String?
    /// The reason in words, e.g. "bluetoothd is not running (org.bluez is not on the system bus)".
    public var detail: String

    public init(condition: Condition, adapter: String? = nil, detail: String) {
        self.condition = condition
        self.adapter = adapter
        self.detail = detail
    }
}

/// Whether the daemon follows devices through udev: accessories are found by
/// enumeration at start and by hot-plug events from systemd-udevd.
public struct UdevHealth: Sendable, Codable, Equatable {
    public enum Condition: String, Sendable, Codable, Equatable, CaseIterable {
        /// Enumerated, and following hot-plug events.
        case ok
        /// libudev works but systemd-udevd is not running: devices present at
        /// start were enumerated, hot-plug events and rule properties do not come.
        case noUdevd
        /// libudev or its monitor could not be opened: no accessories at all.
        case unavailable
        case unrecognized

        public init(from decoder: any Decoder) throws {
            self = Condition(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .unrecognized
        }
    }

    public var condition: Condition
    public var detail: String

    public init(condition: Condition, detail: String) {
        self.condition = condition
        self.detail = detail
    }
}

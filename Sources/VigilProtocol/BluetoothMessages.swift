// Bluetooth LE, central role: the model apps see, their requests, and the
// events they receive (docs/protocol.md, "Bluetooth LE: central").
//
// Peripherals are named by their Bluetooth address ("AA:BB:CC:DD:EE:FF"),
// services, characteristics and descriptors by UUID: lowercase 128-bit form
// in what the daemon sends; apps may send the 16-bit short form ("180d").
// Values (read results, notifications, writes) travel in the frame body.

/// The adapter as apps see it: CoreBluetooth's manager states.
public enum BluetoothState: String, Sendable, Codable, Equatable {
    case unknown
    /// bluetoothd is restarting, or the daemon is rebuilding its view of it.
    case resetting
    /// No adapter (or no bluetoothd) on this machine.
    case unsupported
    case poweredOff
    case poweredOn
}

/// A peripheral: what its advertisements said, and its connection state.
public struct PeripheralInfo: Sendable, Codable, Equatable {
    public var address: String
    /// `public` or `random`.
    public var addressType: String
    public var name: String?
    public var rssi: Int?
    public var txPower: Int?
    /// `disconnected`, `connecting`, `connected`.
    public var state: String
    public var serviceUUIDs: [String]
    /// Company identifier (decimal) -> data (hex).
    public var manufacturerData: [String: String]
    /// Service UUID -> data (hex).
    public var serviceData: [String: String]
    /// The negotiated ATT MTU, once a characteristic reports it.
    public var mtu: Int?
    /// Paired (keys exchanged), bonded (keys stored by BlueZ for later
    /// connections) and trusted, as BlueZ reports them; absent from daemons
    /// older than pairing support.
    public var paired: Bool?
    public var bonded: Bool?
    public var trusted: Bool?
    /// The adapter this record is seen through ("hci0"): the one the
    /// request chose, or the daemon's default. Absent from older daemons,
    /// and for a pending connect whose adapter is not present.
    public var adapter: String?

    public init(
        address: String, addressType: String = "public", name: String? = nil, rssi: Int? = nil, txPower: Int? = nil,
        state: String = "disconnected", serviceUUIDs: [String] = [], manufacturerData: [String: String] = [:],
        serviceData: [String: String] = [:], mtu: Int? = nil, paired: Bool? = nil, bonded: Bool? = nil,
        trusted: Bool? = nil, adapter: String? = nil
    ) {
        self.adapter = adapter
        self.address = address
        self.addressType = addressType
        self.name = name
        self.rssi = rssi
        self.txPower = txPower
        self.state = state
        self.serviceUUIDs = serviceUUIDs
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.mtu = mtu
        self.paired = paired
        self.bonded = bonded
        self.trusted = trusted
    }
}

public struct GATTDescriptorInfo: Sendable, Codable, Equatable {
    public var uuid: String
    public init(uuid: String) { self.uuid = uuid }
}

public struct GATTCharacteristicInfo: Sendable, Codable, Equatable {
    public var uuid: String
    /// BlueZ's flags: read, write, write-without-response, notify, indicate, ...
    public var properties: [String]
    public var descriptors: [GATTDescriptorInfo]
    /// Whether this app is subscribed to its notifications.
    public var notifying: Bool
    /// Which characteristic of this UUID in its service it is: 0 for the
    /// first by handle, 1 for the second, ... (the `instance` requests take).
    /// Absent from older daemons.
    public var instance: Int?
    /// Its ATT handle (value declaration), as BlueZ reports it; for
    /// information: requests name characteristics by `instance`.
    public var handle: Int?

    public init(
        uuid: String, properties: [String], descriptors: [GATTDescriptorInfo] = [], notifying: Bool = false,
        instance: Int? = nil, handle: Int? = nil
    ) {
        self.instance = instance
        self.handle = handle
        self.uuid = uuid
        self.properties = properties
        self.descriptors = descriptors
        self.notifying = notifying
    }
}

public struct GATTServiceInfo: Sendable, Codable, Equatable {
    public var uuid: String
    public var primary: Bool
    public var characteristics: [GATTCharacteristicInfo]

    public init(uuid: String, primary: Bool = true, characteristics: [GATTCharacteristicInfo]) {
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
    }
}

/// Names one characteristic of a peripheral (and optionally one descriptor of it).
///
/// `instance` tells apart characteristics of one UUID in one service (an
/// Environmental Sensing service with two Temperature characteristics): 0
/// is the first by handle, 1 the second. It is omitted from JSON when 0,
/// so a path from an older client or state file reads as the first.
///
/// Ordered (peripheral, service, characteristic, instance) and described as
/// `peripheral/service/characteristic` (`#instance` when not 0): the state
/// file sorts subscriptions by it on every save, and a type without a
/// description of its own is turned into text by reflection (`Mirror`),
/// thousands of times slower (issue 34; `scripts/check-reflection`).
public struct CharacteristicPath: Sendable, Codable, Equatable, Hashable, Comparable, CustomStringConvertible {
    public var peripheral: String
    public var service: String
    public var characteristic: String
    public var instance: Int

    public init(peripheral: String, service: String, characteristic: String, instance: Int = 0) {
        self.peripheral = peripheral
        self.service = service
        self.characteristic = characteristic
        self.instance = instance
    }

    private enum CodingKeys: String, CodingKey { case peripheral, service, characteristic, instance }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        peripheral = try container.decode(String.self, forKey: .peripheral)
        service = try container.decode(String.self, forKey: .service)
        characteristic = try container.decode(String.self, forKey: .characteristic)
        instance = try container.decodeIfPresent(Int.self, forKey: .instance) ?? 0
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(peripheral, forKey: .peripheral)
        try container.encode(service, forKey: .service)
        try container.encode(characteristic, forKey: .characteristic)
        if instance != 0 { try container.encode(instance, forKey: .instance) }
    }

    public static func < (lhs: CharacteristicPath, rhs: CharacteristicPath) -> Bool {
        (lhs.peripheral, lhs.service, lhs.characteristic, lhs.instance) < (rhs.peripheral, rhs.service, rhs.characteristic, rhs.instance)
    }

    public var description: String {
        peripheral + "/" + service + "/" + characteristic + (instance == 0 ? "" : "#" + String(instance))
    }
}

// MARK: Requests (apps; control clients too, for vigilctl ble)

/// Request: create the app's central manager. Reply: `CentralRegistered`.
/// With a restore identifier, an app relaunched by the daemon gets the state
/// the daemon kept for it (connections, pending connects, subscriptions, scan)
/// in the reply, before any Bluetooth event: VigilKit holds events back
/// until it has handed this to `willRestoreState`.
public struct RegisterCentral: Message, Equatable {
    public static let type = "ble.registerCentral"
    public var restoreIdentifier: String?
    public init(restoreIdentifier: String? = nil) { self.restoreIdentifier = restoreIdentifier }
}

public struct CentralRestoredState: Sendable, Codable, Equatable {
    /// Connected and pending peripherals, with the services discovered so far.
    public var peripherals: [RestoredPeripheral]
    /// The scan in progress, if any.
    public var scanServices: [String]?
    public var scanAllowsDuplicates: Bool?

    public init(peripherals: [RestoredPeripheral], scanServices: [String]? = nil, scanAllowsDuplicates: Bool? = nil) {
        self.peripherals = peripherals
        self.scanServices = scanServices
        self.scanAllowsDuplicates = scanAllowsDuplicates
    }
}

public struct RestoredPeripheral: Sendable, Codable, Equatable {
    public var peripheral: PeripheralInfo
    public var services: [GATTServiceInfo]
    public init(peripheral: PeripheralInfo, services: [GATTServiceInfo]) {
        self.peripheral = peripheral
        self.services = services
    }
}

public struct CentralRegistered: Message, Equatable {
    public static let type = "reply"
    public var state: BluetoothState
    /// Present when the app was relaunched and its manager had state to restore.
    public var restored: CentralRestoredState?
    public init(state: BluetoothState, restored: CentralRestoredState? = nil) {
        self.state = state
        self.restored = restored
    }
}

/// Request: the adapter state. Reply: `BluetoothStateReply`.
public struct GetBluetoothState: Message, Equatable {
    public static let type = "ble.state"
    public init() {}
}

public struct BluetoothStateReply: Message, Equatable {
    public static let type = "reply"
    public var state: BluetoothState
    public var adapter: String?
    /// Which link is missing (bus, bluetoothd, adapter, power), as in `status`.
    public var condition: BluetoothHealth.Condition?
    /// Why the state is what it is, in words (e.g. "bluetoothd is not running").
    public var detail: String?
    public init(state: BluetoothState, adapter: String? = nil, condition: BluetoothHealth.Condition? = nil, detail: String? = nil) {
        self.state = state
        self.adapter = adapter
        self.condition = condition
        self.detail = detail
    }
}

/// Request: scan for peripherals advertising any of `services` (nil: all; an
/// app in the background must name services). Replaces the app's earlier
/// scan. Results come as `ble.discovered` events. Reply: `Done`.
public struct StartScan: Message, Equatable {
    public static let type = "ble.scan"
    public var services: [String]?
    /// Every advertisement (RSSI updates), not just the first of each peripheral.
    /// Ignored in the background, where duplicates are always coalesced.
    public var allowDuplicates: Bool?
    /// The adapter to scan with, by name ("hci1") or address; absent: the
    /// daemon's default adapter (`bluetooth-adapter`). One that does not
    /// exist is refused (`notFound`); never replaced by another.
    public var adapter: String?
    public init(services: [String]? = nil, allowDuplicates: Bool? = nil, adapter: String? = nil) {
        self.adapter = adapter
        self.services = services
        self.allowDuplicates = allowDuplicates
    }
}

public struct StopScan: Message, Equatable {
    public static let type = "ble.stopScan"
    public init() {}
}

/// Request: the peripherals the daemon knows (seen or connected). Reply: `PeripheralList`.
public struct ListPeripherals: Message, Equatable {
    public static let type = "ble.peripherals"
    public init() {}
}

public struct PeripheralList: Message, Equatable {
    public static let type = "reply"
    public var peripherals: [PeripheralInfo]
    public init(peripherals: [PeripheralInfo]) { self.peripherals = peripherals }
}

/// Request: connect. Never times out: if the peripheral is away the request
/// stays pending until it comes back (`ble.connected` then). Reply: `Done`
/// once the request is taken.
public struct ConnectPeripheral: Message, Equatable {
    public static let type = "ble.connect"
    public var peripheral: String
    /// The adapter to connect through, by name ("hci1") or address; absent:
    /// the daemon's default adapter. A peripheral is connected through one
    /// adapter at a time: asking for it through another while a client
    /// wants it through the first is refused (`invalidState`).
    public var adapter: String?
    public init(peripheral: String, adapter: String? = nil) {
        self.peripheral = peripheral
        self.adapter = adapter
    }
}

/// Request: cancel a pending connect or drop this app's use of the link (the
/// link itself stays up while another app uses it). Reply: `Done`.
public struct CancelPeripheralConnection: Message, Equatable {
    public static let type = "ble.disconnect"
    public var peripheral: String
    public init(peripheral: String) { self.peripheral = peripheral }
}

/// Request: the GATT tree, once BlueZ has resolved it. Reply: `GATTServices`.
public struct DiscoverServices: Message, Equatable {
    public static let type = "ble.discover"
    public var peripheral: String
    public init(peripheral: String) { self.peripheral = peripheral }
}

public struct GATTServices: Message, Equatable {
    public static let type = "reply"
    public var services: [GATTServiceInfo]
    public init(services: [GATTServiceInfo]) { self.services = services }
}

/// Request: read a characteristic (or one of its descriptors). Reply:
/// `CharacteristicValue`, the value in the body.
public struct ReadCharacteristic: Message, Equatable {
    public static let type = "ble.read"
    public var peripheral: String
    public var service: String
    public var characteristic: String
    /// Which characteristic of that UUID (0, the first by handle, if absent).
    public var instance: Int?
    public var descriptor: String?
    public init(_ path: CharacteristicPath, descriptor: String? = nil) {
        peripheral = path.peripheral
        service = path.service
        characteristic = path.characteristic
        instance = path.instance == 0 ? nil : path.instance
        self.descriptor = descriptor
    }
    public var path: CharacteristicPath {
        CharacteristicPath(peripheral: peripheral, service: service, characteristic: characteristic, instance: instance ?? 0)
    }
}

public struct CharacteristicValue: Message, Equatable {
    public static let type = "reply"
    public init() {}
}

/// Request: write the body to a characteristic, or with `descriptor` to one
/// of its descriptors (always with response). Reply: `Done` (for a write
/// without response: once BlueZ took it).
public struct WriteCharacteristic: Message, Equatable {
    public static let type = "ble.write"
    public var peripheral: String
    public var service: String
    public var characteristic: String
    /// Which characteristic of that UUID (0, the first by handle, if absent).
    public var instance: Int?
    public var descriptor: String?
    public var withResponse: Bool
    public init(_ path: CharacteristicPath, descriptor: String? = nil, withResponse: Bool = true) {
        peripheral = path.peripheral
        service = path.service
        characteristic = path.characteristic
        instance = path.instance == 0 ? nil : path.instance
        self.descriptor = descriptor
        self.withResponse = withResponse
    }
    public var path: CharacteristicPath {
        CharacteristicPath(peripheral: peripheral, service: service, characteristic: characteristic, instance: instance ?? 0)
    }
}

/// Request: subscribe to (or unsubscribe from) notifications. The daemon keeps
/// the subscription across disconnects and restores it after each reconnect.
/// `acquire`: absent, BlueZ's AcquireNotify where the characteristic allows it
/// (a socket: cheaper per value), else or if it fails StartNotify; `false`,
/// StartNotify only (a peripheral that notifies before its subscription is
/// confirmed loses those values with AcquireNotify); `true`, AcquireNotify.
/// Reply: `Done` once notifications are on (or the request is pending while
/// the peripheral is not connected).
public struct SetNotify: Message, Equatable {
    public static let type = "ble.notify"
    public var peripheral: String
    public var service: String
    public var characteristic: String
    /// Which characteristic of that UUID (0, the first by handle, if absent).
    public var instance: Int?
    public var enabled: Bool
    public var acquire: Bool?
    public init(_ path: CharacteristicPath, enabled: Bool, acquire: Bool? = nil) {
        peripheral = path.peripheral
        service = path.service
        characteristic = path.characteristic
        instance = path.instance == 0 ? nil : path.instance
        self.enabled = enabled
        self.acquire = acquire
    }
    public var path: CharacteristicPath {
        CharacteristicPath(peripheral: peripheral, service: service, characteristic: characteristic, instance: instance ?? 0)
    }
}

/// Pushed to a control client (vigilctl ble): what apps get as events, with
/// the same kind and attributes; values in the body.
public struct BluetoothPush: Message, Equatable {
    public static let type = "blePush"
    public var kind: String
    public var attributes: [String: JSONValue]
    public init(kind: String, attributes: [String: JSONValue]) {
        self.kind = kind
        self.attributes = attributes
    }
}

/// Event kinds apps receive about Bluetooth LE (all need `bluetooth-central`
/// to wake the app in the background). Attributes: docs/protocol.md.
public enum BluetoothEventKind {
    /// The adapter's state changed: `state`.
    public static let state = "ble.state"
    /// An advertisement matched the app's scan: the `PeripheralInfo` members.
    public static let discovered = "ble.discovered"
    /// `peripheral` connected (after the app's connect request): `adapter`.
    public static let connected = "ble.connected"
    /// An adapter a client chose by name or address (not the default, which
    /// `state` follows) changed: `adapter` (its name, or what the client
    /// asked for if it is gone), `state` (`poweredOn`, `poweredOff`, or
    /// `unsupported` when it vanished). What the client asked of it waits for it.
    public static let adapterState = "ble.adapterState"
    /// `peripheral` disconnected: `reason`, `adapter`; `willReconnect` true when the app's
    /// connect request stays pending (CoreBluetooth apps reconnect; here the
    /// daemon does it for them).
    public static let disconnected = "ble.disconnected"
    /// A value from a subscribed characteristic: `peripheral`, `service`,
    /// `characteristic`, `instance` (when not 0); the value in the body. To apps, with `framing`, a
    /// batch of values (`NotificationValues`).
    public static let notification = "ble.notification"
}

// Bluetooth LE, peripheral role: GATT services and advertising the daemon
// publishes for apps, requests from remote centrals forwarded to them, and
// value updates (docs/protocol.md, "Bluetooth LE: peripheral").
//
// UUIDs as in the central role: apps may send 16-bit short forms; the daemon
// sends lowercase 128-bit ones. Values travel as hex in definitions (they are
// part of a JSON description) and in the frame body in requests and events.

/// A service an app publishes.
public struct GATTServiceDefinition: Sendable, Codable, Equatable {
    public var uuid: String
    public var primary: Bool?
    public var characteristics: [GATTCharacteristicDefinition]

    public init(uuid: String, primary: Bool? = nil, characteristics: [GATTCharacteristicDefinition]) {
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
    }
}

/// A characteristic: its properties (BlueZ's flags: `read`, `write`,
/// `write-without-response`, `notify`, `indicate`, and the `encrypt-*` /
/// `secure-*` variants as permissions) and, for a fixed value, the value:
/// the daemon answers reads of it without waking the app (it must then be
/// read-only, as CoreBluetooth requires).
public struct GATTCharacteristicDefinition: Sendable, Codable, Equatable {
    public var uuid: String
    public var properties: [String]
    /// Hex. Present: a fixed value, answered by the daemon.
    public var value: String?
    public var descriptors: [GATTDescriptorDefinition]?

    public init(uuid: String, properties: [String], value: String? = nil, descriptors: [GATTDescriptorDefinition]? = nil) {
        self.uuid = uuid
        self.properties = properties
        self.value = value
        self.descriptors = descriptors
    }
}

/// A descriptor with a fixed value (e.g. 0x2901, a user description).
public struct GATTDescriptorDefinition: Sendable, Codable, Equatable {
    public var uuid: String
    /// Hex.
    public var value: String

    public init(uuid: String, value: String) {
        self.uuid = uuid
        self.value = value
    }
}

/// What the app advertises.
public struct AdvertisementData: Sendable, Codable, Equatable {
    public var localName: String?
    public var serviceUUIDs: [String]?
    /// Company identifier (decimal) -> data (hex).
    public var manufacturerData: [String: String]?
    /// Service UUID -> data (hex).
    public var serviceData: [String: String]?
    /// GAP appearance, e.g. 833 (0x0341, heart rate belt).
    public var appearance: Int?

    public init(
        localName: String? = nil, serviceUUIDs: [String]? = nil, manufacturerData: [String: String]? = nil,
        serviceData: [String: String]? = nil, appearance: Int? = nil
    ) {
        self.localName = localName
        self.serviceUUIDs = serviceUUIDs
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.appearance = appearance
    }
}

/// Requests the app's peripheral manager kept: what a relaunch restores.
public struct PeripheralRestoredState: Sendable, Codable, Equatable {
    public var services: [GATTServiceDefinition]
    public var advertisement: AdvertisementData?
    /// Characteristics remote centrals are subscribed to.
    public var subscribed: [SubscribedCharacteristic]

    public init(services: [GATTServiceDefinition], advertisement: AdvertisementData?, subscribed: [SubscribedCharacteristic]) {
        self.services = services
        self.advertisement = advertisement
        self.subscribed = subscribed
    }
}

public struct SubscribedCharacteristic: Sendable, Codable, Equatable {
    public var service: String
    public var characteristic: String
    public init(service: String, characteristic: String) {
        self.service = service
        self.characteristic = characteristic
    }
}

// MARK: Requests (apps; control clients for vigilctl ble serve)

/// Request: create the app's peripheral manager. Reply: `PeripheralRegistered`,
/// with what the daemon kept for this restore identifier after a relaunch.
public struct RegisterPeripheral: Message, Equatable {
    public static let type = "ble.registerPeripheral"
    public var restoreIdentifier: String?
    public init(restoreIdentifier: String? = nil) { self.restoreIdentifier = restoreIdentifier }
}

public struct PeripheralRegistered: Message, Equatable {
    public static let type = "reply"
    public var state: BluetoothState
    public var restored: PeripheralRestoredState?
    public init(state: BluetoothState, restored: PeripheralRestoredState? = nil) {
        self.state = state
        self.restored = restored
    }
}

/// Request: publish a service. The definition is checked before BlueZ sees
/// it (`invalidArgument` names the problem); the reply (`Done`) comes once
/// BlueZ registered it. It stays published while the app is suspended or
/// not running, until the app removes it or the user force-quits the app.
public struct AddService: Message, Equatable {
    public static let type = "ble.addService"
    public var service: GATTServiceDefinition
    /// The adapter to publish on, by name ("hci1") or address; absent: the
    /// daemon's default. Kept by address, never moved to another adapter.
    public var adapter: String?
    public init(service: GATTServiceDefinition, adapter: String? = nil) {
        self.service = service
        self.adapter = adapter
    }
}

/// Request: withdraw one service (by UUID), or all with `uuid` absent. Reply: `Done`.
public struct RemoveService: Message, Equatable {
    public static let type = "ble.removeService"
    public var uuid: String?
    public init(uuid: String? = nil) { self.uuid = uuid }
}

/// Request: advertise (replacing the app's earlier advertisement). BlueZ's
/// refusals (too long, no free instance) come back as `deviceError` naming
/// BlueZ's error. Reply: `Done`.
public struct StartAdvertising: Message, Equatable {
    public static let type = "ble.startAdvertising"
    public var advertisement: AdvertisementData
    /// The adapter to advertise on, by name or address; absent: the default.
    public var adapter: String?
    public init(advertisement: AdvertisementData, adapter: String? = nil) {
        self.advertisement = advertisement
        self.adapter = adapter
    }
}

public struct StopAdvertising: Message, Equatable {
    public static let type = "ble.stopAdvertising"
    public init() {}
}

/// Request: answer a `ble.peripheral.read` or `ble.peripheral.write` event.
/// The value read goes in the body. `error`: an ATT error name (see
/// `ATTError`); absent: success. Reply: `Done` (or `notFound` if the request
/// already timed out and the central got an error).
public struct RespondToRequest: Message, Equatable {
    public static let type = "ble.respond"
    public var request: Int
    public var error: String?
    public init(request: Int, error: String? = nil) {
        self.request = request
        self.error = error
    }
}

/// ATT errors an app may answer with; the daemon maps them to BlueZ's.
public enum ATTError: String, Sendable, Codable, CaseIterable {
    case readNotPermitted, writeNotPermitted, invalidOffset, invalidAttributeValueLength, insufficientAuthentication
    case insufficientAuthorization, requestNotSupported, unlikelyError
}

/// Request: send the body as the characteristic's new value to subscribed
/// centrals. Reply: `ValueUpdated`; `sent` false when the transmit queue is
/// full: the app waits for a `ble.peripheral.readyToUpdate` event and sends again.
public struct UpdateValue: Message, Equatable {
    public static let type = "ble.updateValue"
    public var service: String
    public var characteristic: String
    public init(service: String, characteristic: String) {
        self.service = service
        self.characteristic = characteristic
    }
}

public struct ValueUpdated: Message, Equatable {
    public static let type = "reply"
    public var sent: Bool
    /// Whether any central is subscribed (if not, nothing was sent, and that is fine).
    public var subscribed: Bool
    public init(sent: Bool, subscribed: Bool) {
        self.sent = sent
        self.subscribed = subscribed
    }
}

/// Event kinds of the peripheral role (all need `bluetooth-peripheral` to
/// wake the app in the background).
public enum PeripheralEventKind {
    /// A central reads a dynamic characteristic: `request`, `service`,
    /// `characteristic`, `offset`, `central` (address, if BlueZ says).
    /// Answer with `ble.respond` (value in the body) within the request timeout.
    public static let read = "ble.peripheral.read"
    /// A central writes: `request` (absent for a write without response),
    /// `service`, `characteristic`, `offset`, `central`; the value in the body.
    public static let write = "ble.peripheral.write"
    /// The first central subscribed to `service`/`characteristic`.
    public static let subscribed = "ble.peripheral.subscribed"
    /// The last central unsubscribed.
    public static let unsubscribed = "ble.peripheral.unsubscribed"
    /// The transmit queue has room again after an `updateValue` with `sent: false`.
    public static let readyToUpdate = "ble.peripheral.readyToUpdate"
}

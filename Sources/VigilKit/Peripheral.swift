import VigilProtocol

/// A peripheral's GATT services, as `CBPeripheral`, named by its address. Get
/// one from `CentralManager.peripheral(_:)`; it is a plain value, cheap to
/// make again. Its operations need the app's connection to the peripheral
/// (`notConnected` otherwise; `setNotifyValue` excepted, see there).
///
/// Services and characteristics are named by UUID, in the 16-bit short form
/// (`"180d"`, `"2a37"`) or the full form; the daemon answers with the full
/// lowercase form (`GATTUUID` converts).
public struct Peripheral: Sendable {
    public let address: String
    let application: Application

    init(address: String, application: Application) {
        self.address = address
        self.application = application
    }

    /// The services, characteristics (with BlueZ's property flags) and
    /// descriptors, once BlueZ has resolved them.
    public func discoverServices() async throws -> [GATTServiceInfo] {
        try await application.session.request(DiscoverServices(peripheral: address), expecting: GATTServices.self).services
    }

    /// Reads a characteristic's value.
    public func readValue(service: String, characteristic: String) async throws -> [UInt8] {
        try await readValue(service: service, characteristic: characteristic, descriptor: nil)
    }

    /// Reads a descriptor of a characteristic (nil: the characteristic itself).
    /// `instance`: which characteristic of that UUID in the service, 0 for
    /// the first by handle, 1 for the second (`GATTCharacteristicInfo.instance`).
    public func readValue(service: String, characteristic: String, instance: Int = 0, descriptor: String?) async throws -> [UInt8] {
        let request = ReadCharacteristic(path(service, characteristic, instance), descriptor: descriptor)
        return try await application.session.requestWithBody(request, expecting: CharacteristicValue.self).body
    }

    /// Reads instance `instance` of a characteristic UUID (two Temperature
    /// characteristics of one Environmental Sensing service: 0 and 1).
    public func readValue(service: String, characteristic: String, instance: Int) async throws -> [UInt8] {
        try await readValue(service: service, characteristic: characteristic, instance: instance, descriptor: nil)
    }

    /// Writes a characteristic. With response, it returns once the device
    /// confirmed; without, once BlueZ took the value.
    public func writeValue(
        _ value: [UInt8], service: String, characteristic: String, instance: Int = 0, withResponse: Bool = true
    ) async throws {
        let request = WriteCharacteristic(path(service, characteristic, instance), withResponse: withResponse)
        _ = try await application.session.request(request, body: value, expecting: Done.self)
    }

    /// Writes a descriptor of a characteristic (with response). The CCCD
    /// (0x2902) is BlueZ's: use `setNotifyValue` for it.
    public func writeValue(
        _ value: [UInt8], service: String, characteristic: String, instance: Int = 0, descriptor: String
    ) async throws {
        let request = WriteCharacteristic(path(service, characteristic, instance), descriptor: descriptor)
        _ = try await application.session.request(request, body: value, expecting: Done.self)
    }

    /// Subscribes to (or unsubscribes from) a characteristic's notifications or
    /// indications; values come as `CentralEvent.valueUpdated`. The daemon keeps
    /// the subscription across disconnects and app relaunches, and renews it on
    /// every reconnect; a subscription asked for while the peripheral is away is
    /// pending until it connects.
    /// - Parameter acquire: how the daemon subscribes at BlueZ. nil (the
    ///   default): AcquireNotify where the characteristic allows it (a socket:
    ///   cheaper per value and faster), else or if it fails StartNotify.
    ///   `false`: StartNotify only, for a peripheral that notifies before its
    ///   subscription is confirmed (AcquireNotify loses those first values,
    ///   after every connect). `true`: AcquireNotify (StartNotify if it fails).
    ///   See docs/bluetooth.md, "Notifications".
    public func setNotifyValue(
        _ enabled: Bool, service: String, characteristic: String, instance: Int = 0, acquire: Bool? = nil
    ) async throws {
        let request = SetNotify(path(service, characteristic, instance), enabled: enabled, acquire: acquire)
        _ = try await application.session.request(request, expecting: Done.self)
    }

    private func path(_ service: String, _ characteristic: String, _ instance: Int = 0) -> CharacteristicPath {
        CharacteristicPath(peripheral: address, service: service, characteristic: characteristic, instance: instance)
    }
}

/// Bluetooth UUIDs in the daemon's form (lowercase, 128-bit, hyphenated) and
/// the short form people write, so that an app compares what it asked for with
/// what events name: `GATTUUID.matches(path.characteristic, "2a37")`.
public enum GATTUUID {
    /// The full lowercase form of a 16-, 32- or 128-bit UUID (`"180D"`,
    /// `"0x2a37"`, `"0000180d-0000-…"`); nil if `text` is not a UUID.
    public static func canonical(_ text: String) -> String? { BluetoothUUID.normalize(text) }

    /// The short form (`"180d"`) of a UUID on the Bluetooth base, else the full form.
    public static func short(_ uuid: String) -> String { BluetoothUUID.short(uuid) }

    /// Whether two spellings name the same UUID.
    public static func matches(_ lhs: String, _ rhs: String) -> Bool { BluetoothUUID.matches(lhs, rhs) }
}

extension CharacteristicPath {
    /// Whether this names `characteristic` of `service`, in any spelling
    /// (`"180d"`, `"2a37"`); with `instance`, only that instance of it.
    public func matches(service: String, characteristic: String, instance: Int? = nil) -> Bool {
        GATTUUID.matches(self.service, service) && GATTUUID.matches(self.characteristic, characteristic)
            && (instance == nil || instance == self.instance)
    }
}

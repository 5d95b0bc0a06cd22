import VigilDBus

/// The one mirror of BlueZ's object tree: every object under /org/bluez with
/// its interfaces and their properties, as GetManagedObjects gave them and the
/// signals since changed them. Everything else reads it; nothing keeps a
/// proxy of its own that could point at a dead object after a restart.
///
/// A plain value: the client applies signals to it in arrival order.
public struct BlueZObjectTree: Sendable, Equatable {
    /// path -> interface -> property -> value.
    public private(set) var objects: [ObjectPath: [String: [String: DBusValue]]] = [:]
    /// Counts the changes applied; each property remembers the count of its
    /// last change, so a re-read can tell which of its values a signal has
    /// overtaken (see `reread`).
    public private(set) var revision = 0
    private var changedAt: [ObjectPath: [String: [String: Int]]] = [:]

    public init() {}

    /// From the reply of ObjectManager.GetManagedObjects (`a{oa{sa{sv}}}`).
    public init(managedObjects: DBusValue) {
        for (path, interfaces) in managedObjects.dictionaryObjectPathKeyed ?? [:] {
            objects[path] = Self.interfaces(interfaces)
        }
    }

    static func interfaces(_ value: DBusValue) -> [String: [String: DBusValue]] {
        var result: [String: [String: DBusValue]] = [:]
        for (name, properties) in value.dictionaryStringKeyed ?? [:] {
            result[name] = (properties.dictionaryStringVariant ?? [:]).mapValues(\.unwrapped)
        }
        return result
    }

    // MARK: Signals

    /// InterfacesAdded(o path, a{sa{sv}} interfaces).
    public mutating func interfacesAdded(_ path: ObjectPath, _ interfaces: DBusValue) {
        let added = Self.interfaces(interfaces)
        objects[path, default: [:]].merge(added) { _, new in new }
        revision += 1
        for (interface, properties) in added { touch(path, interface, properties.keys) }
    }

    /// InterfacesRemoved(o path, as interfaces): the object goes with its last interface.
    public mutating func interfacesRemoved(_ path: ObjectPath, _ names: [String]) {
        for name in names {
            objects[path]?[name] = nil
            changedAt[path]?[name] = nil
        }
        if objects[path]?.isEmpty == true {
            objects[path] = nil
            changedAt[path] = nil
        }
    }

    /// PropertiesChanged(s interface, a{sv} changed, as invalidated) on `path`.
    /// Ignored for objects or interfaces the tree does not have (a signal
    /// racing an InterfacesRemoved).
    public mutating func propertiesChanged(_ path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String]) {
        guard objects[path]?[interface] != nil else { return }
        for (name, value) in changed { objects[path]![interface]![name] = value.unwrapped }
        for name in invalidated { objects[path]![interface]![name] = nil }
        revision += 1
        touch(path, interface, changed.keys)
        touch(path, interface, invalidated)
    }

    /// A re-read of one interface's properties (Properties.GetAll), asked for
    /// when the mirror was at `revision`: applies the values that differ from
    /// the mirror, except where a signal changed the property since (the
    /// signal may be newer than the reply: replies resume later than signals
    /// are applied). Returns what it changed; empty for an unknown object.
    public mutating func reread(_ path: ObjectPath, interface: String, properties: [String: DBusValue], since revision: Int) -> [String: DBusValue] {
        guard let current = objects[path]?[interface] else { return [:] }
        var changed: [String: DBusValue] = [:]
        for (name, value) in properties {
            let value = value.unwrapped
            guard current[name] != value, changedAt[path]?[interface]?[name] ?? 0 <= revision else { continue }
            changed[name] = value
        }
        if !changed.isEmpty { propertiesChanged(path, interface: interface, changed: changed, invalidated: []) }
        return changed
    }

    private mutating func touch(_ path: ObjectPath, _ interface: String, _ names: some Sequence<String>) {
        for name in names { changedAt[path, default: [:]][interface, default: [:]][name] = revision }
    }

    // MARK: Reading

    public func properties(_ path: ObjectPath, _ interface: String) -> [String: DBusValue]? {
        objects[path]?[interface]
    }

    public func paths(with interface: String) -> [ObjectPath] {
        objects.compactMap { $0.value[interface] != nil ? $0.key : nil }.sorted()
    }

    public var adapters: [AdapterView] {
        paths(with: BlueZ.adapter).compactMap(adapter(at:))
    }

    public func adapter(at path: ObjectPath) -> AdapterView? {
        properties(path, BlueZ.adapter).map { AdapterView(path: path, properties: $0) }
    }

    public var devices: [DeviceView] {
        paths(with: BlueZ.device).compactMap(device(at:))
    }

    public func device(at path: ObjectPath) -> DeviceView? {
        properties(path, BlueZ.device).map { DeviceView(path: path, properties: $0) }
    }

    /// The device with this address on `adapter` (each adapter that sees a
    /// peripheral has an object of its own for it).
    public func device(address: String, adapter: ObjectPath) -> DeviceView? {
        let wanted = address.uppercased()
        return devices.first { $0.address == wanted && $0.adapter == adapter }
    }

    public func services(of device: ObjectPath) -> [GattServiceView] {
        paths(with: BlueZ.gattService).compactMap { path in
            guard let properties = properties(path, BlueZ.gattService) else { return nil }
            let service = GattServiceView(path: path, properties: properties)
            return service.device == device ? service : nil
        }
    }

    public func characteristics(of service: ObjectPath) -> [GattCharacteristicView] {
        paths(with: BlueZ.gattCharacteristic).compactMap { path in
            guard let properties = properties(path, BlueZ.gattCharacteristic) else { return nil }
            let characteristic = GattCharacteristicView(path: path, properties: properties)
            return characteristic.service == service ? characteristic : nil
        }
    }

    public func characteristic(at path: ObjectPath) -> GattCharacteristicView? {
        properties(path, BlueZ.gattCharacteristic).map { GattCharacteristicView(path: path, properties: $0) }
    }

    public func descriptors(of characteristic: ObjectPath) -> [GattDescriptorView] {
        paths(with: BlueZ.gattDescriptor).compactMap { path in
            guard let properties = properties(path, BlueZ.gattDescriptor) else { return nil }
            let descriptor = GattDescriptorView(path: path, properties: properties)
            return descriptor.characteristic == characteristic ? descriptor : nil
        }
    }

    /// The characteristics of `device` with these UUIDs (canonical form), in
    /// handle order (BlueZ names their objects by handle, `char000b`): the
    /// instances a `CharacteristicPath` counts. Services of one UUID are
    /// taken in handle order too, their characteristics one after another.
    public func characteristics(of device: ObjectPath, service: String, characteristic: String) -> [GattCharacteristicView] {
        services(of: device).filter { $0.uuid == service }.sorted { $0.path.rawValue < $1.path.rawValue }.flatMap { candidate in
            characteristics(of: candidate.path).filter { $0.uuid == characteristic }.sorted { $0.path.rawValue < $1.path.rawValue }
        }
    }

    /// The characteristic of `device` with these UUIDs, instance `instance`
    /// (0: the first by handle).
    public func characteristic(of device: ObjectPath, service: String, characteristic: String, instance: Int = 0) -> GattCharacteristicView? {
        let found = characteristics(of: device, service: service, characteristic: characteristic)
        return found.indices.contains(instance) ? found[instance] : nil
    }
}

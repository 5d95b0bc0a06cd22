/// A set of exported objects under one root that answers the standard
/// interfaces itself: ObjectManager.GetManagedObjects (at the root),
/// Properties Get/GetAll/Set, and Introspect; and emits PropertiesChanged,
/// InterfacesAdded and InterfacesRemoved as the objects change.
///
/// This is what BlueZ's GattManager1.RegisterApplication and
/// LEAdvertisingManager1.RegisterAdvertisement expect behind the path they
/// are given. Every other method call goes to the object's handler.
///
/// The tree lives on the connection's loop (same executor), so it answers
/// calls synchronously from the connection's dispatch.
public actor DBusObjectTree {
    public nonisolated let connection: DBusConnection
    public nonisolated let root: ObjectPath
    public nonisolated var unownedExecutor: UnownedSerialExecutor { connection.loop.asUnownedSerialExecutor() }

    /// Decides on a Properties.Set: return nil to accept (the tree stores the
    /// value and emits PropertiesChanged) or the error to answer with.
    public typealias PropertySetter = @Sendable (_ interface: String, _ name: String, _ value: DBusValue) -> DBusError?

    struct Object {
        var interfaces: [String: [String: DBusValue]]
        var handler: (@Sendable (DBusMethodCall) -> Void)?
        var setter: PropertySetter?
    }

    var objects: [ObjectPath: Object] = [:]

    init(connection: DBusConnection, root: ObjectPath) {
        self.connection = connection
        self.root = root
    }

    /// Exports an empty tree at `root` (covering every path below it).
    public static func export(at root: ObjectPath, on connection: DBusConnection) async throws(DBusError) -> DBusObjectTree {
        let tree = DBusObjectTree(connection: connection, root: root)
        try await connection.export(root, subtree: true) { call in
            tree.assumeIsolated { $0.handle(call) }
        }
        return tree
    }

    /// Stops answering for the root and everything below it.
    public func unexport() async {
        await connection.unexport(root)
    }

    /// Adds (or replaces) an object and emits InterfacesAdded.
    /// `interfaces` maps interface name to property name to value.
    /// `handler` gets every call that is not a standard-interface call;
    /// without one such calls get UnknownMethod. Without `setter`,
    /// Properties.Set answers PropertyReadOnly.
    public func add(
        _ path: ObjectPath,
        interfaces: [String: [String: DBusValue]],
        setter: PropertySetter? = nil,
        handler: (@Sendable (DBusMethodCall) -> Void)? = nil
    ) throws(DBusError) {
        guard path.isInside(root) else { throw .invalidArgs("\(path) is not inside the tree at \(root)") }
        for (interface, properties) in interfaces {
            try LibDBus.validate(.interface, interface)
            for (name, value) in properties {
                try LibDBus.validate(.member, name)
                try value.validate()
            }
        }
        objects[path] = Object(interfaces: interfaces, handler: handler, setter: setter)
        emit(root, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded",
             [.objectPath(path), Self.interfacesValue(interfaces)])
    }

    /// Removes an object and emits InterfacesRemoved; unknown paths are ignored.
    public func remove(_ path: ObjectPath) {
        guard let object = objects.removeValue(forKey: path) else { return }
        emit(root, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved",
             [.objectPath(path), .strings(object.interfaces.keys.sorted())])
    }

    /// Updates properties of one interface and emits one PropertiesChanged
    /// with those that actually changed.
    public func setProperties(_ path: ObjectPath, interface: String, _ values: [String: DBusValue]) throws(DBusError) {
        guard var object = objects[path] else { throw .unknownObject("no object at \(path)") }
        guard var properties = object.interfaces[interface] else {
            throw DBusError(name: DBusError.Name.unknownInterface, message: "\(path) has no interface \(interface)")
        }
        var changed: [String: DBusValue] = [:]
        for (name, value) in values {
            try LibDBus.validate(.member, name)
            try value.validate()
            if properties[name] != value { changed[name] = value }
            properties[name] = value
        }
        object.interfaces[interface] = properties
        objects[path] = object
        guard !changed.isEmpty else { return }
        emit(path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
             [.string(interface), .stringVariantDictionary(changed), .strings([])])
    }

    public func setProperty(_ path: ObjectPath, interface: String, name: String, value: DBusValue) throws(DBusError) {
        try setProperties(path, interface: interface, [name: value])
    }

    public func property(_ path: ObjectPath, interface: String, name: String) -> DBusValue? {
        objects[path]?.interfaces[interface]?[name]
    }

    public var paths: [ObjectPath] { objects.keys.sorted() }

    // MARK: Answering

    func handle(_ call: DBusMethodCall) {
        let path = call.path
        switch (call.interface, call.member) {
        case ("org.freedesktop.DBus.Introspectable", "Introspect"):
            try? call.reply([.string(introspection(of: path))])
        case ("org.freedesktop.DBus.ObjectManager", "GetManagedObjects") where path == root:
            try? call.reply([managedObjects()])
        case ("org.freedesktop.DBus.Properties", _):
            handleProperties(call)
        default:
            guard let object = objects[path] else {
                return call.replyError(.unknownObject("no object at \(path)"))
            }
            guard let handler = object.handler else { return call.replyUnknownMethod() }
            handler(call)
        }
    }

    private func handleProperties(_ call: DBusMethodCall) {
        let path = call.path
        let arguments = call.arguments
        guard let object = objects[path] else { return call.replyError(.unknownObject("no object at \(path)")) }
        guard let interface = arguments.first?.string else {
            return call.replyError(.invalidArgs("expected an interface name first"))
        }
        let properties = object.interfaces[interface]
        switch (call.member, arguments.count) {
        case ("GetAll", 1):
            try? call.reply([.stringVariantDictionary(properties ?? [:])])
        case ("Get", 2):
            guard let properties else { return call.replyError(Self.unknownInterface(interface, path)) }
            guard let name = arguments[1].string else { return call.replyError(.invalidArgs("expected (ss)")) }
            guard let value = properties[name] else { return call.replyError(Self.unknownProperty(name, interface)) }
            try? call.reply([.variant(value)])
        case ("Set", 3):
            guard properties != nil else { return call.replyError(Self.unknownInterface(interface, path)) }
            guard let name = arguments[1].string, let value = arguments[2].variant else {
                return call.replyError(.invalidArgs("expected (ssv)"))
            }
            guard properties?[name] != nil else { return call.replyError(Self.unknownProperty(name, interface)) }
            guard let setter = object.setter else {
                return call.replyError(DBusError(name: DBusError.Name.propertyReadOnly,
                                                 message: "\(interface).\(name) is read-only"))
            }
            if let error = setter(interface, name, value) { return call.replyError(error) }
            do {
                try setProperties(path, interface: interface, [name: value])
                try call.reply()
            } catch {
                call.replyError(error)
            }
        default:
            call.replyUnknownMethod()
        }
    }

    private static func unknownProperty(_ name: String, _ interface: String) -> DBusError {
        DBusError(name: DBusError.Name.unknownProperty, message: "no property \(name) in \(interface)")
    }

    private static func unknownInterface(_ interface: String, _ path: ObjectPath) -> DBusError {
        DBusError(name: DBusError.Name.unknownInterface, message: "\(path) has no interface \(interface)")
    }

    /// a{oa{sa{sv}}} of every object strictly below the root.
    func managedObjects() -> DBusValue {
        .dictionary(keySignature: "o", valueSignature: "a{sa{sv}}", objects.keys.sorted().filter { $0 != root }.compactMap { path in
            objects[path].map { DBusDictEntry(key: .objectPath(path), value: Self.interfacesValue($0.interfaces)) }
        })
    }

    static func interfacesValue(_ interfaces: [String: [String: DBusValue]]) -> DBusValue {
        .dictionary(keySignature: "s", valueSignature: "a{sv}", interfaces.keys.sorted().map { name in
            DBusDictEntry(key: .string(name), value: .stringVariantDictionary(interfaces[name] ?? [:]))
        })
    }

    private func emit(_ path: ObjectPath, _ interface: String, _ member: String, _ body: [DBusValue]) {
        connection.assumeIsolated { connection in
            _ = try? connection.emitSignal(path: path, interface: interface, member: member, arguments: body)
        }
    }
}

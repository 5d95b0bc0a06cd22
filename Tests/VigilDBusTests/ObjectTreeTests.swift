import Testing
import VigilDBus
import VigilSystem

@Suite(.timeLimit(.minutes(1)))
struct ObjectTreeTests {
    static let gatt = "org.bluez.GattCharacteristic1"
    static let characteristic: ObjectPath = "/app/service0/char0"

    /// A tree shaped like a GATT application: one service, one characteristic.
    static func makeTree(on server: DBusConnection) async throws -> DBusObjectTree {
        let tree = try await DBusObjectTree.export(at: "/app", on: server)
        try await tree.add("/app/service0", interfaces: [
            "org.bluez.GattService1": ["UUID": .string("180d"), "Primary": .bool(true)],
        ])
        try await tree.add(characteristic, interfaces: [
            gatt: ["UUID": .string("2a37"), "Service": .objectPath("/app/service0"),
                   "Flags": .strings(["read", "notify"]), "Value": .bytes([])],
        ], setter: { _, name, value in
            name == "Value" && value.bytes != nil ? nil : DBusError.invalidArgs("only Value, as ay")
        }, handler: { call in
            guard call.member == "ReadValue" else { return call.replyUnknownMethod() }
            Task {
                try? await Task.sleep(for: .milliseconds(50))
                try? call.reply([.bytes([0x06, 0x48])])
            }
        })
        return tree
    }

    func callTree(_ client: DBusConnection, _ server: DBusConnection, _ path: ObjectPath, _ interface: String,
                  _ member: String, _ arguments: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.call(destination: await server.uniqueName, path: path, interface: interface,
                              member: member, arguments: arguments, timeout: .seconds(5))
    }

    @Test func getManagedObjectsListsEveryObject() async throws {
        try await withConnections { _, server, client in
            _ = try await Self.makeTree(on: server)
            let reply = try await callTree(client, server, "/app", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
            #expect(reply.first?.signature == "a{oa{sa{sv}}}")
            let objects = try #require(reply.first?.dictionaryObjectPathKeyed)
            #expect(Set(objects.keys) == ["/app/service0", Self.characteristic])
            let properties = objects[Self.characteristic]?.dictionaryStringKeyed?[Self.gatt]?.dictionaryStringVariant
            #expect(properties?["Flags"]?.strings == ["read", "notify"])
            #expect(properties?["Value"] == .bytes([]))
        }
    }

    @Test func propertiesGetGetAllAndSet() async throws {
        try await withConnections { _, server, client in
            let tree = try await Self.makeTree(on: server)
            let properties = "org.freedesktop.DBus.Properties"
            let uuid = try await callTree(client, server, Self.characteristic, properties, "Get",
                                          [.string(Self.gatt), .string("UUID")])
            #expect(uuid == [.variant(.string("2a37"))])
            let all = try await callTree(client, server, "/app/service0", properties, "GetAll",
                                         [.string("org.bluez.GattService1")])
            #expect(all.first?.dictionaryStringVariant == ["UUID": .string("180d"), "Primary": .bool(true)])

            let changes = Recorder<[String: DBusValue]>()
            let subscription = try await client.subscribe(to: MatchRule(
                path: Self.characteristic, interface: properties, member: "PropertiesChanged", arg0: Self.gatt)
            ) { changes.append($0.body.dropFirst().first?.dictionaryStringVariant ?? [:]) }
            _ = try await callTree(client, server, Self.characteristic, properties, "Set",
                                   [.string(Self.gatt), .string("Value"), .variant(.bytes([1, 2]))])
            #expect(await tree.property(Self.characteristic, interface: Self.gatt, name: "Value") == .bytes([1, 2]))
            try await tree.setProperty(Self.characteristic, interface: Self.gatt, name: "Value", value: .bytes([3]))
            #expect(await changes.wait(forCount: 2) == [["Value": .bytes([1, 2])], ["Value": .bytes([3])]])
            await subscription.cancel()

            let refused = await errorOf {
                _ = try await callTree(client, server, Self.characteristic, properties, "Set",
                                       [.string(Self.gatt), .string("UUID"), .variant(.string("x"))])
            }
            #expect((refused as? DBusError)?.name == DBusError.Name.invalidArgs)
            let readOnly = await errorOf {
                _ = try await callTree(client, server, "/app/service0", properties, "Set",
                                       [.string("org.bluez.GattService1"), .string("UUID"), .variant(.string("x"))])
            }
            #expect((readOnly as? DBusError)?.name == DBusError.Name.propertyReadOnly)
            let unknown = await errorOf {
                _ = try await callTree(client, server, "/app/service0", properties, "Get",
                                       [.string("org.bluez.GattService1"), .string("Nope")])
            }
            #expect((unknown as? DBusError)?.name == DBusError.Name.unknownProperty)
        }
    }

    @Test func otherCallsGoToTheObjectHandler() async throws {
        try await withConnections { _, server, client in
            _ = try await Self.makeTree(on: server)
            let value = try await callTree(client, server, Self.characteristic, Self.gatt, "ReadValue",
                                           [.stringVariantDictionary([:])])
            #expect(value == [.bytes([0x06, 0x48])])
            let noHandler = await errorOf { _ = try await callTree(client, server, "/app/service0", Self.gatt, "ReadValue") }
            #expect((noHandler as? DBusError)?.name == DBusError.Name.unknownMethod)
            let noObject = await errorOf { _ = try await callTree(client, server, "/app/nothing", Self.gatt, "ReadValue") }
            #expect((noObject as? DBusError)?.name == DBusError.Name.unknownObject)
        }
    }

    @Test func addAndRemoveEmitInterfaceSignals() async throws {
        try await withConnections { _, server, client in
            let tree = try await Self.makeTree(on: server)
            let events = Recorder<String>()
            let subscription = try await client.subscribe(to: MatchRule(
                path: "/app", interface: "org.freedesktop.DBus.ObjectManager")
            ) { message in
                events.append("\(message.member ?? "") \(message.body.first?.objectPath?.rawValue ?? "")")
            }
            try await tree.add("/app/service1", interfaces: ["org.bluez.GattService1": ["UUID": .string("180f")]])
            await tree.remove("/app/service1")
            #expect(await events.wait(forCount: 2) == ["InterfacesAdded /app/service1", "InterfacesRemoved /app/service1"])
            await subscription.cancel()
        }
    }

    @Test func introspectionNamesChildrenAndProperties() async throws {
        try await withConnections { _, server, client in
            _ = try await Self.makeTree(on: server)
            let root = try await callTree(client, server, "/app", "org.freedesktop.DBus.Introspectable", "Introspect")
            let rootXML = try #require(root.first?.string)
            #expect(rootXML.contains("<node name=\"service0\"/>"))
            #expect(rootXML.contains("org.freedesktop.DBus.ObjectManager"))
            let leaf = try await callTree(client, server, Self.characteristic, "org.freedesktop.DBus.Introspectable", "Introspect")
            #expect(leaf.first?.string?.contains("<property name=\"Flags\" type=\"as\" access=\"readwrite\"/>") == true)
        }
    }
}

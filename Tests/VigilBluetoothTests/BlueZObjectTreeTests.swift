import Testing
import VigilDBus
import VigilProtocol
@testable import VigilBluetooth

/// The mirror, fed the values BlueZ sends (GetManagedObjects, InterfacesAdded/
/// Removed, PropertiesChanged), built here as BlueZ's D-Bus types.
@Suite("BlueZ object tree mirror")
struct BlueZObjectTreeTests {
    static let adapter: ObjectPath = "/org/bluez/hci0"
    static let device: ObjectPath = "/org/bluez/hci0/dev_C0_DE_00_00_00_01"
    static let service: ObjectPath = "/org/bluez/hci0/dev_C0_DE_00_00_00_01/service000a"
    static let measurement: ObjectPath = "/org/bluez/hci0/dev_C0_DE_00_00_00_01/service000a/char000b"

    static func interfaces(_ entries: [String: [String: DBusValue]]) -> DBusValue {
        .dictionary(keySignature: "s", valueSignature: "a{sv}", entries.sorted { $0.key < $1.key }.map {
            DBusDictEntry(key: .string($0.key), value: .stringVariantDictionary($0.value))
        })
    }

    static func managed(_ objects: [ObjectPath: [String: [String: DBusValue]]]) -> DBusValue {
        .dictionary(keySignature: "o", valueSignature: "a{sa{sv}}", objects.sorted { $0.key < $1.key }.map {
            DBusDictEntry(key: .objectPath($0.key), value: interfaces($0.value))
        })
    }

    static let snapshot: [ObjectPath: [String: [String: DBusValue]]] = [
        adapter: [BlueZ.adapter: ["Address": .string("00:AA:01:00:00:23"), "Powered": .bool(true)]],
        device: [BlueZ.device: [
            "Address": .string("c0:de:00:00:00:01"), "AddressType": .string("random"), "Alias": .string("Vigil HRM"),
            "Adapter": .objectPath(adapter), "RSSI": .int16(-60), "Connected": .bool(false),
            "UUIDs": .strings(["0000180d-0000-1000-8000-00805f9b34fb"]),
            "ManufacturerData": .dictionary(keySignature: "q", valueSignature: "v", [
                DBusDictEntry(key: .uint16(0x004c), value: .variant(.bytes([1, 2, 0xff]))),
            ]),
        ]],
    ]

    @Test func readsTheSnapshotThroughTypedViews() throws {
        let tree = BlueZObjectTree(managedObjects: Self.managed(Self.snapshot))
        #expect(tree.adapters.map(\.name) == ["hci0"])
        #expect(tree.adapters.first?.powered == true)
        let device = try #require(tree.device(address: "C0:DE:00:00:00:01", adapter: Self.adapter))
        #expect(tree.device(address: "C0:DE:00:00:00:01", adapter: "/org/bluez/hci1") == nil, "another adapter's object is another device")
        #expect(device.address == "C0:DE:00:00:00:01")  // BlueZ's case does not matter
        #expect(device.name == "Vigil HRM")               // Alias when there is no Name
        #expect(device.rssi == -60)
        #expect(device.serviceUUIDs == ["0000180d-0000-1000-8000-00805f9b34fb"])
        #expect(device.manufacturerData == ["76": "0102ff"])
        #expect(device.adapter == Self.adapter)
    }

    @Test func signalsAddChangeAndRemoveObjects() throws {
        var tree = BlueZObjectTree(managedObjects: Self.managed(Self.snapshot))
        tree.interfacesAdded(Self.service, Self.interfaces([BlueZ.gattService: [
            "UUID": .string("0000180d-0000-1000-8000-00805f9b34fb"), "Device": .objectPath(Self.device), "Primary": .bool(true),
        ]]))
        tree.interfacesAdded(Self.measurement, Self.interfaces([BlueZ.gattCharacteristic: [
            "UUID": .string("00002A37-0000-1000-8000-00805F9B34FB"), "Service": .objectPath(Self.service),
            "Flags": .strings(["notify"]),
        ]]))
        let found = try #require(tree.characteristic(
            of: Self.device, service: BluetoothUUID.normalize("180d")!, characteristic: BluetoothUUID.normalize("2a37")!))
        #expect(found.path == Self.measurement)
        #expect(found.flags == ["notify"])

        tree.propertiesChanged(Self.device, interface: BlueZ.device, changed: ["Connected": .variant(.bool(true))], invalidated: ["RSSI"])
        #expect(tree.device(at: Self.device)?.connected == true)
        #expect(tree.device(at: Self.device)?.rssi == nil)
        tree.propertiesChanged(Self.measurement, interface: BlueZ.gattCharacteristic, changed: ["Value": .bytes([0x16, 72])], invalidated: [])
        #expect(tree.characteristic(at: Self.measurement)?.value == [0x16, 72])

        // A change racing a removal is ignored; removing the last interface removes the object.
        tree.interfacesRemoved(Self.measurement, [BlueZ.gattCharacteristic])
        tree.propertiesChanged(Self.measurement, interface: BlueZ.gattCharacteristic, changed: ["Value": .bytes([1])], invalidated: [])
        #expect(tree.characteristic(at: Self.measurement) == nil)
        #expect(tree.objects[Self.measurement] == nil)
        tree.interfacesRemoved(Self.device, [BlueZ.device])
        #expect(tree.device(address: "C0:DE:00:00:00:01", adapter: Self.adapter) == nil)
        #expect(tree.services(of: Self.device).count == 1, "children go by their own InterfacesRemoved")
    }

    /// Two Temperature characteristics in one Environmental Sensing service:
    /// instances count in handle order, whatever order BlueZ announced them in.
    @Test func characteristicsOfOneUUIDAreInstancesInHandleOrder() throws {
        var tree = BlueZObjectTree(managedObjects: Self.managed(Self.snapshot))
        let ess = BluetoothUUID.normalize("181a")!, temperature = BluetoothUUID.normalize("2a6e")!
        let service: ObjectPath = "/org/bluez/hci0/dev_C0_DE_00_00_00_01/service0020"
        tree.interfacesAdded(service, Self.interfaces([BlueZ.gattService: ["UUID": .string(ess), "Device": .objectPath(Self.device)]]))
        for handle in ["0026", "0021"] {
            let path = try ObjectPath("\(service.rawValue)/char\(handle)")
            tree.interfacesAdded(path, Self.interfaces([BlueZ.gattCharacteristic: [
                "UUID": .string(temperature), "Service": .objectPath(service), "Flags": .strings(["read"]),
            ]]))
        }
        let first = try #require(tree.characteristic(of: Self.device, service: ess, characteristic: temperature, instance: 0))
        let second = try #require(tree.characteristic(of: Self.device, service: ess, characteristic: temperature, instance: 1))
        #expect(first.path.rawValue.hasSuffix("char0021") && first.handle == 0x21)
        #expect(second.path.rawValue.hasSuffix("char0026") && second.handle == 0x26)
        #expect(tree.characteristic(of: Self.device, service: ess, characteristic: temperature, instance: 2) == nil)
    }

    @Test func aRereadFillsInWhatNoSignalSaidButNotWhatASignalChangedSince() {
        var tree = BlueZObjectTree(managedObjects: Self.managed(Self.snapshot))
        let asked = tree.revision
        // While GetAll was out, a signal said RSSI changed; the reply (possibly
        // older than that signal) says Connected and ServicesResolved, and an older RSSI.
        tree.propertiesChanged(Self.device, interface: BlueZ.device, changed: ["RSSI": .variant(.int16(-40))], invalidated: [])
        let changed = tree.reread(Self.device, interface: BlueZ.device, properties: [
            "Connected": .variant(.bool(true)), "ServicesResolved": .variant(.bool(true)), "RSSI": .variant(.int16(-70)),
            "Alias": .variant(.string("Vigil HRM")),
        ], since: asked)
        #expect(Set(changed.keys) == ["Connected", "ServicesResolved"], "the same Alias is no change; RSSI is the signal's")
        #expect(tree.device(at: Self.device)?.connected == true)
        #expect(tree.device(at: Self.device)?.servicesResolved == true)
        #expect(tree.device(at: Self.device)?.rssi == -40)
        #expect(tree.reread("/org/bluez/hci0/dev_00_00_00_00_00_09", interface: BlueZ.device, properties: [
            "Connected": .bool(true)], since: tree.revision).isEmpty, "an object the mirror lacks is not invented")
    }

    @Test func mistypedPropertiesReadAsAbsent() {
        let tree = BlueZObjectTree(managedObjects: Self.managed([
            Self.device: [BlueZ.device: ["Address": .uint32(7), "RSSI": .string("loud"), "Connected": .string("yes")]],
        ]))
        let device = tree.device(at: Self.device)
        #expect(device?.address == "")
        #expect(device?.rssi == nil)
        #expect(device?.connected == false)
    }
}

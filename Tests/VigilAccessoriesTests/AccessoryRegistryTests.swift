import Testing
import VigilConfig
import VigilLifecycle
import VigilProtocol
@testable import VigilAccessories
import VigilStreams

@Suite("which devices are accessories, and their connections")
struct AccessoryRegistryTests {
    static let sensorUSB = USBIdentity(
        vendorID: "1209", productID: "0001", serialNumber: "VGL123", manufacturer: "Vigil Labs", product: "Sensor", revision: "1.02")

    static func sensor(node: String = "/dev/ttyACM0", port: String = "1-1", properties: [String: String]? = nil) -> DeviceObservation {
        DeviceObservation(
            sysPath: "/sys/devices/platform/dummy_hcd.0/usb1/\(port)/\(port):1.0/tty/\(node.split(separator: "/").last!)",
            devNode: node,
            properties: properties ?? ["VIGIL_ACCESSORY": "1", "VIGIL_PROTOCOLS": "org.example.sensor org.example.dfu", "VIGIL_SERIAL": "9600 8N1"],
            devLinks: ["/dev/serial/by-id/usb-Vigil_Labs_Sensor_VGL123-if00"], usb: sensorUSB)
    }

    @Test func udevMarkedDeviceBecomesAnAccessoryWithItsUSBIdentity() throws {
        let registry = AccessoryRegistry(rules: [])
        let accessory = try #require(registry.added(Self.sensor()))
        #expect(accessory.info.connectionID == 1)
        #expect(accessory.info.name == "Sensor")
        #expect(accessory.info.manufacturer == "Vigil Labs")
        #expect(accessory.info.serialNumber == "VGL123")
        #expect(accessory.info.firmwareRevision == "1.02")
        #expect(accessory.info.vendorID == "1209" && accessory.info.productID == "0001")
        #expect(accessory.info.protocolStrings == ["org.example.sensor", "org.example.dfu"])
        #expect(accessory.info.lineSettings == "9600 8N1")
        #expect(accessory.info.deviceNode == "/dev/ttyACM0")
        #expect(registry.all.map(\.connectionID) == [1])
    }

    @Test func unmarkedDeviceWithoutARuleIsNotAnAccessory() {
        let registry = AccessoryRegistry(rules: [])
        #expect(registry.added(Self.sensor(properties: ["ID_VENDOR_ID": "1209"])) == nil)
        #expect(registry.all.isEmpty)
    }

    @Test func configRulesMatchByIdsSerialOrByIdLink() throws {
        let byIDs = AccessoryRule(vendorID: "1209", productID: "0001", protocols: ["org.example.sensor"], lineSettings: "57600 8N1", name: "Bench sensor")
        let registry = AccessoryRegistry(rules: [byIDs])
        let accessory = try #require(registry.added(Self.sensor(properties: [:])))
        #expect(accessory.info.name == "Bench sensor")
        #expect(accessory.info.lineSettings == "57600 8N1")

        let wrongSerial = AccessoryRegistry(rules: [AccessoryRule(vendorID: "1209", productID: "0001", serialNumber: "OTHER", protocols: ["org.example.x"])])
        #expect(wrongSerial.added(Self.sensor(properties: [:])) == nil)

        let byLink = AccessoryRegistry(rules: [AccessoryRule(byID: "/dev/serial/by-id/usb-Vigil_Labs_Sensor_VGL123-if00", protocols: ["org.example.x"])])
        #expect(byLink.added(Self.sensor(properties: [:]))?.info.protocolStrings == ["org.example.x"])
    }

    @Test func replugGetsANewConnectionIdButTheSameIdentityEvenOnAnotherNode() throws {
        let registry = AccessoryRegistry(rules: [])
        let first = try #require(registry.added(Self.sensor(node: "/dev/ttyACM0")))
        #expect(registry.added(Self.sensor(node: "/dev/ttyACM0")) == nil)  // already connected
        let gone = try #require(registry.removed(sysPath: first.info.sysPath))
        #expect(gone.info.connectionID == first.info.connectionID)
        #expect(registry.removed(sysPath: first.info.sysPath) == nil)
        let second = try #require(registry.added(Self.sensor(node: "/dev/ttyACM1")))
        #expect(second.info.connectionID == 2)
        #expect(second.identity == first.identity)
        #expect(registry.accessory(identity: first.identity)?.info.deviceNode == "/dev/ttyACM1")
    }

    @Test func withoutASerialNumberTheUSBPortIsTheIdentity() throws {
        var noSerial = Self.sensor()
        noSerial.usb?.serialNumber = nil
        let registry = AccessoryRegistry(rules: [])
        let one = try #require(registry.added(noSerial))
        #expect(one.identity.key == "usb:1209:0001:port:1-1")
        var otherPort = Self.sensor(node: "/dev/ttyACM1", port: "1-2")
        otherPort.usb?.serialNumber = nil
        #expect(try #require(registry.added(otherPort)).identity != one.identity)
    }
}

@Suite("one session per accessory and protocol")
struct SessionTableTests {
    let registry = AccessoryRegistry(rules: [])

    @Test func sessionsAreRefusedForUndeclaredOrUnspokenProtocolsAndNameTheHolder() throws {
        let accessory = try #require(registry.added(AccessoryRegistryTests.sensor()))
        var table = SessionTable()
        func code(_ body: () throws(ProtocolError) -> Void) -> ProtocolError? {
            do {
                try body()
                return nil
            } catch {
                return error
            }
        }
        let notSpoken = code { () throws(ProtocolError) in _ = try table.open(id: 1, holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.other", declaredProtocols: ["org.example.other"], lineSettings: "", reopen: false) }
        #expect(notSpoken?.code == .invalidArgument)
        let undeclared = code { () throws(ProtocolError) in _ = try table.open(id: 2, holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.dfu"], lineSettings: "", reopen: false) }
        #expect(undeclared?.code == .notPermitted)
        #expect(undeclared?.closesConnection == false)
        #expect(undeclared?.message.contains("does not declare") == true)

        let first = try table.open(id: 3, holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.sensor"], lineSettings: "9600 8N1", reopen: false)
        let taken = code { () throws(ProtocolError) in _ = try table.open(id: 4, holder: .app("org.b"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.sensor"], lineSettings: "", reopen: false) }
        #expect(taken?.code == .invalidState)
        #expect(taken?.message.contains("app org.a") == true)
        // Another protocol of the same accessory is a separate session.
        let dfu = try table.open(id: 5, holder: .control(7), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.dfu", declaredProtocols: nil, lineSettings: "", reopen: true)
        #expect(dfu.id != first.id)
        #expect(table.sessions(of: accessory.info.connectionID).map(\.id) == [first.id, dfu.id])
        #expect(table.sessions(heldBy: .control(7)).map(\.id) == [dfu.id])
        var moved = accessory.info
        moved.connectionID = 9
        table.rebind(dfu.id, to: moved)
        #expect(table.sessions(of: 9).map(\.id) == [dfu.id])
        #expect(table.close(first.id)?.holder == .app("org.a"))
        #expect(table.sessions(of: accessory.info.connectionID).isEmpty)
    }
}

@Suite("a failed reopen waits, with a bounded backoff")
struct ReopenBackoffTests {
    @Test func delaysDoubleUpToTheLimitAndNeverReachZero() {
        var backoff = ReopenBackoff()
        let delays = (0..<12).map { _ in backoff.failed() }
        #expect(delays.prefix(4) == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400)])
        #expect(delays.allSatisfy { $0 >= ReopenBackoff.first && $0 <= ReopenBackoff.limit })
        #expect(delays.last == ReopenBackoff.limit)
        #expect(zip(delays, delays.dropFirst()).allSatisfy { $0 <= $1 })
        #expect(backoff.failures == 12)
    }
}

@Suite("what a device says of itself is untrusted")
struct UntrustedDeviceTextTests {
    @Test func controlAndBidiCharactersAreEscapedForLogsAndTheRestIsKept() {
        #expect(DeviceText.escaped("VGL\u{7}123\u{202E}txt") == "VGL\\u{7}123\\u{202E}txt")
        #expect(DeviceText.escaped("line\nforged: info vigild") == "line\\u{A}forged: info vigild")
        #expect(DeviceText.escaped("\u{1B}[31mred\u{9B}\u{7F}") == "\\u{1B}[31mred\\u{9B}\\u{7F}")
        #expect(DeviceText.escaped("zero\u{200B}width\u{2066}isolate\u{2028}") == "zero\\u{200B}width\\u{2066}isolate\\u{2028}")
        #expect(DeviceText.escaped("a\\u{7}") == "a\\\\u{7}")  // a literal backslash cannot pose as an escape
        #expect(DeviceText.escaped("Café 日本 $(reboot) ;rm") == "Café 日本 $(reboot) ;rm")
        #expect(DeviceText.quoted("say \"hi\"\u{7}") == "\"say \\\"hi\\\"\\u{7}\"")
    }

    @Test func deviceStringsAreBoundedAtACharacterBoundary() {
        #expect(DeviceText.bounded("short") == "short")
        let long = String(repeating: "é", count: 200)  // 400 bytes
        let bounded = DeviceText.bounded(long)
        #expect(bounded.utf8.count == 254 && bounded.allSatisfy { $0 == "é" })
    }

    @Test func invalidProtocolStringsAreRefusedAndNotOffered() throws {
        let registry = AccessoryRegistry(rules: [])
        let device = AccessoryRegistryTests.sensor(properties: [
            "VIGIL_ACCESSORY": "1",
            "VIGIL_PROTOCOLS": "$(reboot) ;rm org.example.sensor org.example.sensor -lead.ing org.\u{202E}evil com.example.ok_1 org.example." + String(repeating: "a", count: 300),
        ])
        let accessory = try #require(registry.added(device))
        #expect(accessory.info.protocolStrings == ["org.example.sensor", "com.example.ok_1"])
        #expect(accessory.refusedProtocols.map(\.value) == ["$(reboot)", ";rm", "-lead.ing", "org.\u{202E}evil", "org.example." + String(repeating: "a", count: 243)])
        let problems = registry.problems
        #expect(problems.count == 5 && problems.allSatisfy { $0.problem == AccessoryProblem.refusedProtocol && $0.connectionID == accessory.info.connectionID })
        #expect(problems.contains { $0.detail.contains("\"org.\\u{202E}evil\"") })
        #expect(!problems.contains { $0.detail.contains("\u{202E}") })
    }

    @Test func tooManyProtocolStringsAreRefusedPastTheBound() throws {
        let registry = AccessoryRegistry(rules: [])
        let names = (0..<40).map { "org.example.p\($0)" }
        let accessory = try #require(registry.added(AccessoryRegistryTests.sensor(properties: ["VIGIL_ACCESSORY": "1", "VIGIL_PROTOCOLS": names.joined(separator: " ")])))
        #expect(accessory.info.protocolStrings == Array(names.prefix(AccessoryRegistry.maxProtocols)))
        #expect(accessory.refusedProtocols.count == 40 - AccessoryRegistry.maxProtocols)
    }

    @Test func identityStringsAreKeptButBounded() throws {
        var device = AccessoryRegistryTests.sensor()
        device.usb?.serialNumber = "VGL\u{7}\u{202E}321"
        device.usb?.manufacturer = String(repeating: "M", count: 5000)
        let accessory = try #require(AccessoryRegistry(rules: []).added(device))
        #expect(accessory.info.serialNumber == "VGL\u{7}\u{202E}321")
        #expect(accessory.info.manufacturer == String(repeating: "M", count: DeviceText.maxBytes))
        #expect(accessory.identity.key == "usb:1209:0001:VGL\u{7}\u{202E}321")
    }

    @Test func twoDevicesClaimingOneIdentityGetDistinctConnectionsAndAreReported() throws {
        let registry = AccessoryRegistry(rules: [])
        let first = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM0", port: "1-1")))
        #expect(registry.sharedIdentities.isEmpty && registry.problems.isEmpty)
        let clone = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM1", port: "1-2")))
        #expect(clone.info.connectionID != first.info.connectionID)
        #expect(clone.identity == first.identity)
        #expect(registry.sharingIdentity(with: clone).map(\.info.connectionID) == [first.info.connectionID])
        #expect(registry.sharedIdentities == [first.identity])
        let problems = registry.problems
        #expect(problems.map(\.connectionID) == [first.info.connectionID, clone.info.connectionID])
        #expect(problems.allSatisfy { $0.problem == AccessoryProblem.duplicateIdentity })
        // Gone again: no longer a problem now, but the identity stays known as shared.
        _ = registry.removed(sysPath: clone.info.sysPath)
        #expect(registry.problems.isEmpty && registry.sharedIdentities == [first.identity])
    }

    @Test func aWaitingSessionReopensOnlyOnItsOwnPortOnceItsIdentityIsShared() throws {
        let registry = AccessoryRegistry(rules: [])
        let first = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM0", port: "1-1")))
        var table = SessionTable()
        let mine = try table.open(id: 6, holder: .app("org.a"), accessory: first.info, identity: first.identity, protocol: "org.example.sensor", declaredProtocols: nil, lineSettings: "", reopen: true)
        let waiting: (Int) -> Bool = { _ in true }
        // Replugged on another port with no clone around: the session follows its identity.
        let elsewhere = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM5", port: "1-4")))
        #expect(table.toReopen(on: elsewhere.info, identity: elsewhere.identity, byPortOnly: false, isWaiting: waiting).map(\.id) == [mine.id])
        // A clone on another port, once the identity is shared: it is not the session's device.
        #expect(table.toReopen(on: elsewhere.info, identity: elsewhere.identity, byPortOnly: true, isWaiting: waiting).isEmpty)
        let back = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM6", port: "1-1")))
        #expect(table.toReopen(on: back.info, identity: back.identity, byPortOnly: true, isWaiting: waiting).map(\.id) == [mine.id])
        // Sessions not waiting stay where they are.
        #expect(table.toReopen(on: back.info, identity: back.identity, byPortOnly: false, isWaiting: { _ in false }).isEmpty)
    }

    @Test func oneConnectionTakesAtMostOneWaitingSessionPerProtocol() throws {
        let registry = AccessoryRegistry(rules: [])
        let first = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM0", port: "1-1")))
        let clone = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM1", port: "1-2")))
        var table = SessionTable()
        let older = try table.open(id: 7, holder: .app("org.a"), accessory: first.info, identity: first.identity, protocol: "org.example.sensor", declaredProtocols: nil, lineSettings: "", reopen: true)
        let newer = try table.open(id: 8, holder: .app("org.b"), accessory: clone.info, identity: clone.identity, protocol: "org.example.sensor", declaredProtocols: nil, lineSettings: "", reopen: true)
        let dfu = try table.open(id: 9, holder: .app("org.b"), accessory: clone.info, identity: clone.identity, protocol: "org.example.dfu", declaredProtocols: nil, lineSettings: "", reopen: true)
        let third = try #require(registry.added(AccessoryRegistryTests.sensor(node: "/dev/ttyACM7", port: "1-7")))
        let chosen = table.toReopen(on: third.info, identity: third.identity, byPortOnly: false, isWaiting: { _ in true })
        #expect(chosen.map(\.id) == [older.id, dfu.id])
        #expect(!chosen.contains { $0.id == newer.id })
    }
}

extension AccessoryRegistryTests {
    static func hidSensor(port: String = "1-1", properties: [String: String] = ["VIGIL_ACCESSORY": "1", "VIGIL_PROTOCOLS": "org.example.co2"]) -> DeviceObservation {
        DeviceObservation(
            sysPath: "/sys/devices/platform/dummy_hcd.0/usb1/\(port)/\(port):1.1/0003:1209:0001.0001/hidraw/hidraw0",
            devNode: "/dev/hidraw0", kind: .hid, properties: properties, usb: sensorUSB)
    }

    @Test func aHidrawNodeIsAHIDAccessoryWithItsOwnIdentityAndNoLineSettings() throws {
        let registry = AccessoryRegistry(rules: [])
        let serial = try #require(registry.added(Self.sensor()))
        let hid = try #require(registry.added(Self.hidSensor()))
        #expect(hid.info.kind == "hid" && hid.info.isHID)
        #expect(serial.info.kind == "serial" && !serial.info.isHID)
        #expect(hid.info.lineSettings == "")
        #expect(hid.info.protocolStrings == ["org.example.co2"])
        #expect(hid.info.serialNumber == "VGL123" && hid.info.vendorID == "1209")
        // One USB device with a serial and a HID interface: two accessories, neither shares the other's identity.
        #expect(hid.identity != serial.identity)
        #expect(registry.sharingIdentity(with: hid).isEmpty)
        var noSerial = Self.hidSensor(port: "1-3")
        noSerial.usb?.serialNumber = nil
        #expect(try #require(AccessoryRegistry(rules: []).added(noSerial)).identity.key == "hid:usb:1209:0001:port:1-3")
    }

    @Test func configRulesMatchOneKindOfNode() {
        let serialRule = AccessoryRule(vendorID: "1209", productID: "0001", protocols: ["org.example.sensor"])
        #expect(AccessoryRegistry(rules: [serialRule]).added(Self.hidSensor(properties: [:])) == nil)
        let hidRule = AccessoryRule(vendorID: "1209", productID: "0001", protocols: ["org.example.co2"], kind: "hid")
        let registry = AccessoryRegistry(rules: [hidRule])
        #expect(registry.added(Self.sensor(properties: [:])) == nil)
        #expect(registry.added(Self.hidSensor(properties: [:]))?.info.protocolStrings == ["org.example.co2"])
    }
}

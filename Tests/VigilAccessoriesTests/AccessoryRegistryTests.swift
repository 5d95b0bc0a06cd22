import Testing
import VigilLifecycle
import VigilProtocol
@testable import VigilAccessories

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
        let notSpoken = code { () throws(ProtocolError) in _ = try table.open(holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.other", declaredProtocols: ["org.example.other"], lineSettings: "", reopen: false) }
        #expect(notSpoken?.code == .invalidArgument)
        let undeclared = code { () throws(ProtocolError) in _ = try table.open(holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.dfu"], lineSettings: "", reopen: false) }
        #expect(undeclared?.code == .notPermitted)
        #expect(undeclared?.closesConnection == false)
        #expect(undeclared?.message.contains("does not declare") == true)

        let first = try table.open(holder: .app("org.a"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.sensor"], lineSettings: "9600 8N1", reopen: false)
        let taken = code { () throws(ProtocolError) in _ = try table.open(holder: .app("org.b"), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.sensor", declaredProtocols: ["org.example.sensor"], lineSettings: "", reopen: false) }
        #expect(taken?.code == .invalidState)
        #expect(taken?.message.contains("app org.a") == true)
        // Another protocol of the same accessory is a separate session.
        let dfu = try table.open(holder: .control(7), accessory: accessory.info, identity: accessory.identity, protocol: "org.example.dfu", declaredProtocols: nil, lineSettings: "", reopen: true)
        #expect(dfu.id != first.id)
        #expect(table.sessions(of: accessory.info.connectionID).map(\.id) == [first.id, dfu.id])
        #expect(table.sessions(heldBy: .control(7)).map(\.id) == [dfu.id])
        table.rebind(dfu.id, to: 9)
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

import Foundation
import Testing
import VigilProtocol

@Suite("Accessory events")
struct AccessoryEventTests {
    static let sensor = AccessoryInfo(
        connectionID: 7, name: "Vigil Sensor", manufacturer: "Vigil Lab", modelNumber: "VS-1", serialNumber: "SN0001",
        firmwareRevision: "1.02", hardwareRevision: "", protocolStrings: ["org.example.sensor"], deviceNode: "/dev/ttyACM0",
        vendorID: "1209", productID: "0001", sysPath: "/sys/devices/usb1/1-1/1-1:1.0/tty/ttyACM0", lineSettings: "115200 8N1")

    /// The daemon puts the accessory's JSON members in the attributes; a client reads them back whole.
    @Test("connect and disconnect carry the accessory's members as attributes")
    func connectedRoundTrip() throws {
        let attributes = Self.sensor.attributes
        #expect(attributes["connectionID"] == .number(7))
        #expect(attributes["protocolStrings"] == .array(["org.example.sensor"]))
        #expect(try AccessoryEventContent(kind: AccessoryEventKind.connected, attributes: attributes) == .connected(Self.sensor))
        #expect(try AccessoryEventContent(kind: AccessoryEventKind.disconnected, attributes: attributes) == .disconnected(Self.sensor))
    }

    @Test("attributes as they come off the wire decode too")
    func fromWireJSON() throws {
        let header = #"{"type":"event","seq":4,"kind":"session.reopened","redelivered":false,"attributes":"#
            + String(decoding: try JSONEncoder().encode(Self.sensor.attributes.merging(["session": 3]) { $1 }), as: UTF8.self) + "}"
        let event: EventMessage = try IncomingMessage(frame: Frame(header: Array(header.utf8))).decode()
        let content = try AccessoryEventContent(kind: event.kind, attributes: event.attributes)
        #expect(content == .reopened(session: 3, accessory: Self.sensor))
        #expect(content?.session == 3)
    }

    @Test("session events: data, closed, loss")
    func sessionEvents() throws {
        #expect(try AccessoryEventContent(kind: "session.data", attributes: ["session": 2]) == .data(session: 2))
        let closed = try AccessoryEventContent(
            kind: "session.closed", attributes: ["session": 2, "reason": "the accessory was unplugged", "willReopen": true])
        #expect(closed == .closed(session: 2, reason: "the accessory was unplugged", willReopen: true))
        let loss = try AccessoryEventContent(
            kind: "session.loss", attributes: ["session": 2, "overruns": 3, "parityErrors": 0, "frameErrors": 1])
        #expect(loss == .loss(session: 2, SessionLoss(overruns: 3, parityErrors: 0, frameErrors: 1)))
    }

    @Test("other kinds are not accessory events; malformed ones are errors")
    func otherAndMalformed() throws {
        #expect(try AccessoryEventContent(kind: "test", attributes: [:]) == nil)
        #expect(throws: ProtocolError.self) { try AccessoryEventContent(kind: "session.data", attributes: ["session": "2"]) }
        #expect(throws: ProtocolError.self) { try AccessoryEventContent(kind: "session.data", attributes: ["session": .number(2.5)]) }
        #expect(throws: ProtocolError.self) { try AccessoryEventContent(kind: "accessory.connected", attributes: ["name": "x"]) }
    }
}

@Suite("Acknowledgement ledger")
struct AcknowledgementLedgerTests {
    @Test("one consumer acknowledges cumulatively")
    func single() {
        var ledger = AcknowledgementLedger()
        for seq: UInt64 in 1...3 { ledger.received(seq, for: .events) }
        #expect(ledger.finish(.events, upTo: 2) == 2)
        #expect(ledger.finish(.events, upTo: 2) == nil)
        #expect(ledger.finish(.events, upTo: 3) == 3)
        #expect(ledger.outstandingCount == 0)
    }

    /// The point of it: `events` finishing later ones must not acknowledge data a session still holds.
    @Test("an event a session still holds holds back later ones")
    func interleaved() {
        var ledger = AcknowledgementLedger()
        ledger.received(1, for: .events)
        ledger.received(2, for: .session(5))
        ledger.received(3, for: .events)
        ledger.received(4, for: .session(5))
        #expect(ledger.finish(.events, upTo: 3) == 1)
        #expect(ledger.acknowledged == 1)
        #expect(ledger.finish(.session(5), upTo: 2) == 3)
        #expect(ledger.finish(.session(6), upTo: 4) == nil)
        #expect(ledger.finish(.session(5), upTo: 4) == 4)
    }

    @Test("finishAll gives up a consumer's events; reset forgets everything")
    func finishAllAndReset() {
        var ledger = AcknowledgementLedger()
        ledger.received(10, for: .session(1))
        ledger.received(11, for: .notifications)
        ledger.received(12, for: .session(1))
        #expect(ledger.finishAll(.session(1)) == 10)
        #expect(ledger.finish(.notifications, upTo: 11) == 12)
        ledger.received(13, for: .events)
        ledger.reset()
        #expect(ledger.outstandingCount == 0)
        #expect(ledger.acknowledged == nil)
        #expect(ledger.finish(.events, upTo: 13) == nil)
    }

    @Test("a long run stays in order across compaction")
    func longRun() {
        var ledger = AcknowledgementLedger()
        for seq: UInt64 in 1...2000 { ledger.received(seq, for: seq % 2 == 0 ? .events : .session(1)) }
        #expect(ledger.finish(.events, upTo: 1000) == nil)
        #expect(ledger.finish(.session(1), upTo: 999) == 1000)
        #expect(ledger.finish(.session(1), upTo: 2000) == 1001)
        #expect(ledger.finish(.events, upTo: 2000) == 2000)
    }
}

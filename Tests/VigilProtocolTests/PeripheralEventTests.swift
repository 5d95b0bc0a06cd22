import Foundation
import Testing
import VigilProtocol

@Suite("Peripheral events")
struct PeripheralEventTests {
    static let hrs = "0000180d-0000-1000-8000-00805f9b34fb"
    static let control = "00002a39-0000-1000-8000-00805f9b34fb"

    @Test("every kind round-trips through its attributes")
    func roundTrip() throws {
        let contents: [PeripheralEventContent] = [
            .read(request: 7, service: Self.hrs, characteristic: Self.control, offset: 0, central: "AA:BB:CC:DD:EE:FF"),
            .read(request: 8, service: Self.hrs, characteristic: Self.control, offset: 22, central: nil),
            .write(request: 9, service: Self.hrs, characteristic: Self.control, offset: 0, central: "AA:BB:CC:DD:EE:FF"),
            .write(request: nil, service: Self.hrs, characteristic: Self.control, offset: 3, central: nil),
            .subscribed(service: Self.hrs, characteristic: Self.control),
            .unsubscribed(service: Self.hrs, characteristic: Self.control),
            .readyToUpdate,
        ]
        for content in contents {
            #expect(try PeripheralEventContent(kind: content.kind, attributes: content.attributes) == content)
            #expect(PeripheralEventContent.isPeripheralKind(content.kind))
        }
        #expect(contents[0].request == 7 && contents[3].request == nil && contents[4].request == nil)
        // Absent optionals are left out on the wire.
        #expect(contents[3].attributes["request"] == nil && contents[3].attributes["central"] == nil)
        #expect(PeripheralEventContent.readyToUpdate.attributes.isEmpty)
    }

    @Test("attributes as they come off the wire decode too")
    func fromWireJSON() throws {
        let header = #"{"type":"event","seq":3,"kind":"ble.peripheral.write","redelivered":false,"attributes":{"request":12,"#
            + #""service":"0000180d-0000-1000-8000-00805f9b34fb","characteristic":"00002a39-0000-1000-8000-00805f9b34fb","offset":0,"#
            + #""central":"AA:BB:CC:DD:EE:FF"}}"#
        let event: EventMessage = try IncomingMessage(frame: Frame(header: Array(header.utf8), body: [0x01])).decode()
        let content = try PeripheralEventContent(kind: event.kind, attributes: event.attributes)
        #expect(content == .write(request: 12, service: Self.hrs, characteristic: Self.control, offset: 0, central: "AA:BB:CC:DD:EE:FF"))
    }

    @Test("offset defaults to 0; a write needs no request; null reads as absent")
    func lenient() throws {
        let attributes: [String: JSONValue] = ["service": "180d", "characteristic": "2a39"]
        #expect(try PeripheralEventContent(kind: PeripheralEventKind.write, attributes: attributes)
            == .write(request: nil, service: "180d", characteristic: "2a39", offset: 0, central: nil))
        var read = attributes
        read["request"] = 4
        read["central"] = .null
        #expect(try PeripheralEventContent(kind: PeripheralEventKind.read, attributes: read)
            == .read(request: 4, service: "180d", characteristic: "2a39", offset: 0, central: nil))
        #expect(try PeripheralEventContent(kind: PeripheralEventKind.readyToUpdate, attributes: ["extra": true]) == .readyToUpdate)
    }

    @Test("other kinds are not peripheral events; malformed ones are errors")
    func otherAndMalformed() throws {
        #expect(try PeripheralEventContent(kind: "ble.state", attributes: ["state": "poweredOn"]) == nil)
        #expect(try PeripheralEventContent(kind: "ble.peripheral.somethingNew", attributes: [:]) == nil)
        #expect(PeripheralEventContent.isPeripheralKind("ble.peripheral.somethingNew"))
        #expect(!PeripheralEventContent.isPeripheralKind("ble.notification"))
        // The central role's decoder leaves the peripheral role's kinds alone.
        #expect(try BluetoothEventContent(kind: PeripheralEventKind.read, attributes: [:]) == nil)
        let path: [String: JSONValue] = ["service": "180d", "characteristic": "2a39"]
        #expect(throws: ProtocolError.self) { try PeripheralEventContent(kind: PeripheralEventKind.read, attributes: path) }
        #expect(throws: ProtocolError.self) {
            try PeripheralEventContent(kind: PeripheralEventKind.read, attributes: path.merging(["request": .number(1.5)]) { $1 })
        }
        #expect(throws: ProtocolError.self) {
            try PeripheralEventContent(kind: PeripheralEventKind.write, attributes: path.merging(["offset": -1]) { $1 })
        }
        #expect(throws: ProtocolError.self) {
            try PeripheralEventContent(kind: PeripheralEventKind.subscribed, attributes: ["service": "180d"])
        }
        #expect(throws: ProtocolError.self) {
            try PeripheralEventContent(kind: PeripheralEventKind.write, attributes: path.merging(["central": 5]) { $1 })
        }
    }

    @Test("definitions and requests encode as documented")
    func messages() throws {
        let service = GATTServiceDefinition(uuid: "180d", characteristics: [
            .init(uuid: "2a37", properties: ["notify"]), .init(uuid: "2a38", properties: ["read"], value: "01"),
        ])
        let header = String(decoding: MessageCodec.frame(AddService(service: service)).header, as: UTF8.self)
        #expect(header.contains(#""type":"ble.addService""#) && header.contains(#""value":"01""#))
        let respond = String(decoding: MessageCodec.frame(RespondToRequest(request: 3, error: ATTError.invalidOffset.rawValue)).header, as: UTF8.self)
        #expect(respond.contains(#""error":"invalidOffset""#) && respond.contains(#""request":3"#))
    }
}

import Testing
import VigilProtocol

/// `ble.notification` batches: values framed u16le, a record naming another
/// characteristic before a value of it; unframed events are one value.
@Suite("Notification values (batched ble.notification)")
struct NotificationValuesTests {
    static let heartRate = CharacteristicPath(
        peripheral: "C0:FF:EE:00:00:01", service: "0000180d-0000-1000-8000-00805f9b34fb",
        characteristic: "00002a37-0000-1000-8000-00805f9b34fb")
    static let battery = CharacteristicPath(
        peripheral: "C0:FF:EE:00:00:01", service: "0000180f-0000-1000-8000-00805f9b34fb",
        characteristic: "00002a19-0000-1000-8000-00805f9b34fb")

    @Test("values of the event's characteristic and of others, empty ones included, come back in order")
    func roundTrip() throws {
        let attributes = NotificationValues.attributes(of: Self.heartRate)
        #expect(attributes["framing"] == "u16le")
        #expect(try BluetoothEventContent(kind: BluetoothEventKind.notification, attributes: attributes) == .notification(Self.heartRate))
        let sent: [(CharacteristicPath, [UInt8])] = [
            (Self.heartRate, [0x16, 60]), (Self.battery, [99]), (Self.heartRate, []), (Self.heartRate, Array(repeating: 7, count: 300)),
        ]
        var body: [UInt8] = []
        for (path, value) in sent { NotificationValues.append(value, of: path, in: Self.heartRate, to: &body) }
        #expect(Array(body.prefix(4)) == [2, 0, 0x16, 60], "a value of the event's own characteristic: u16le length, bytes")
        let values = try NotificationValues.decode(body, attributes: attributes, path: Self.heartRate)
        #expect(values.map(\.path) == sent.map(\.0))
        #expect(values.map(\.value) == sent.map(\.1))
        #expect(NotificationValues.record([1], of: Self.heartRate, in: Self.heartRate) == [1, 0, 1])
    }

    @Test("an unframed event (an older daemon's, or a push) is its body, one value")
    func unframed() throws {
        let attributes = BluetoothEventContent.notification(Self.heartRate).attributes
        #expect(!NotificationValues.isFramed(attributes))
        let values = try NotificationValues.decode([0x06, 0x48], attributes: attributes, path: Self.heartRate)
        #expect(values.count == 1 && values[0].value == [0x06, 0x48] && values[0].path == Self.heartRate)
    }

    @Test("cut records, unknown framings and bad characteristic names are refused")
    func malformed() {
        let attributes = NotificationValues.attributes(of: Self.heartRate)
        var otherFraming = attributes
        otherFraming["framing"] = "u32le"
        let cases: [([UInt8], [String: JSONValue])] = [
            ([5, 0, 1, 2], attributes),  // a record of 5 with 2 bytes
            ([1], attributes),  // half a length
            ([0xFF, 0xFF, 3, 0, 0x61, 0x20, 0x62, 1, 0, 9], attributes),  // "a b": not three names
            ([0xFF, 0xFF], attributes),
            ([1, 0, 1], otherFraming),
        ]
        for (body, attributes) in cases {
            #expect(throws: ProtocolError.self) { try NotificationValues.decode(body, attributes: attributes, path: Self.heartRate) }
        }
    }
}

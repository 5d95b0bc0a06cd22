import Testing
import VigilProtocol

@Suite("Advertisement monitors: events and records")
struct AdvertisementRecordsTests {
    static let ruuvi: [UInt8] = [0x1B, 0xFF, 0x99, 0x04, 0x05] + Array(repeating: 0x11, count: 23)

    @Test("records round-trip in order, RSSI unknown included")
    func roundTrip() throws {
        let records = [
            AdvertisementRecord(receivedAt: 1_764_300_000_123_456_789, address: "C0:DE:00:00:00:62", randomAddress: true, rssi: -61, data: Self.ruuvi),
            AdvertisementRecord(receivedAt: 1_764_300_000_223_456_789, address: "AA:BB:CC:DD:EE:01", rssi: nil, data: []),
        ]
        let body = AdvertisementRecords.encode(records)
        #expect(body.count == 2 * 18 + Self.ruuvi.count)
        let attributes = BluetoothEventContent.advertisements(monitor: "ruuvi", lost: 0).attributes
        #expect(try AdvertisementRecords.decode(body, attributes: attributes) == records)
        #expect(records[0].manufacturerData == [0x0499: Array(Self.ruuvi.dropFirst(4))])
    }

    @Test("a cut record or an unknown framing is an error, not a guess")
    func malformed() throws {
        let body = AdvertisementRecords.encode([AdvertisementRecord(receivedAt: 1, address: "C0:DE:00:00:00:62", rssi: -50, data: Self.ruuvi)])
        let attributes = BluetoothEventContent.advertisements(monitor: "m", lost: 0).attributes
        #expect(throws: ProtocolError.self) { try AdvertisementRecords.decode(Array(body.dropLast()), attributes: attributes) }
        #expect(throws: ProtocolError.self) { try AdvertisementRecords.decode([0x05], attributes: attributes) }
        #expect(throws: ProtocolError.self) { try AdvertisementRecords.decode(body, attributes: ["monitor": .string("m"), "framing": .string("adv9")]) }
    }

    @Test("monitor events round-trip through their attributes")
    func events() throws {
        let contents: [BluetoothEventContent] = [
            .monitorFound(monitor: "ruuvi", peripheral: "C0:DE:00:00:00:62", rssi: -61, name: "Ruuvi 0062"),
            .monitorFound(monitor: "ruuvi", peripheral: "C0:DE:00:00:00:62", rssi: nil, name: nil),
            .monitorLost(monitor: "ruuvi", peripheral: "C0:DE:00:00:00:62"),
            .advertisements(monitor: "ruuvi", lost: 0), .advertisements(monitor: "ruuvi", lost: 12),
        ]
        for content in contents {
            #expect(try BluetoothEventContent(kind: content.kind, attributes: content.attributes) == content)
        }
    }

    @Test("16-bit UUIDs and their advertising form")
    func uuidForms() {
        #expect(BluetoothUUID.shortValue("fcd2") == 0xFCD2)
        #expect(BluetoothUUID.shortValue("6e400001-b5a3-f393-e0a9-e50e24dcca9e") == nil)
        #expect(BluetoothUUID.bytes("180d")?.prefix(4) == [0x00, 0x00, 0x18, 0x0D])
    }
}

import Testing
@testable import VigilL2CAP

/// The SDP request vigild sends to find an SPP service's RFCOMM channel, and
/// the answers it reads (the lab's Bumble device answers the real thing).
@Suite struct SDPTests {
    /// One record: ProtocolDescriptorList = ((L2CAP), (RFCOMM, channel 3)).
    static let oneRecord: [UInt8] = [
        0x35, 0x13,
        0x35, 0x11,
        0x09, 0x00, 0x04,
        0x35, 0x0C,
        0x35, 0x03, 0x19, 0x01, 0x00,
        0x35, 0x05, 0x19, 0x00, 0x03, 0x08, 0x03,
    ]

    @Test func theRequestAsksForTheProtocolDescriptorListOfTheService() {
        let pdu = SDP.request(uuid: [0x11, 0x01], transaction: 7)
        #expect(pdu == [0x06, 0x00, 0x07, 0x00, 0x0D,
                        0x35, 0x03, 0x19, 0x11, 0x01,
                        0xFF, 0xFF,
                        0x35, 0x03, 0x09, 0x00, 0x04,
                        0x00])
        let long = SDP.request(uuid: SDP.uuidBytes("00001101-0000-1000-8000-00805f9b34fb")!, transaction: 1, continuation: [1, 2])
        #expect(long[5...7] == [0x35, 0x11, 0x1C])
        #expect(long.suffix(3) == [2, 1, 2])
        #expect(Int(long[3]) << 8 | Int(long[4]) == long.count - 5)
    }

    @Test func theChannelIsFoundInARecordWhateverFormItsUUIDsTake() throws {
        #expect(try SDP.rfcommChannel(inAttributeLists: Self.oneRecord) == 3)
        // The RFCOMM protocol UUID as 128 bits, the channel in a 16-bit integer, the lengths in a size byte.
        let rfcomm128: [UInt8] = [0x1C, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]
        let descriptor: [UInt8] = [0x36, 0x00, UInt8(rfcomm128.count + 3)] + rfcomm128 + [0x09, 0x00, 0x0C]
        let list: [UInt8] = [0x35, UInt8(descriptor.count)] + descriptor
        let record: [UInt8] = [0x09, 0x00, 0x01, 0x35, 0x03, 0x19, 0x11, 0x01, 0x09, 0x00, 0x04] + list
        let lists: [UInt8] = [0x35, UInt8(record.count + 2), 0x35, UInt8(record.count)] + record
        #expect(try SDP.rfcommChannel(inAttributeLists: lists) == 12)
        #expect(try SDP.rfcommChannel(inAttributeLists: [0x35, 0x00]) == nil, "no record: no channel")
    }

    @Test func responsesAreCheckedAndReassembled() throws {
        let lists = Self.oneRecord
        let first: [UInt8] = [0x07, 0x00, 0x05, 0x00, 0x0E, 0x00, 0x0A] + lists[0..<10] + [0x02, 0xAB, 0xCD]
        let (part, continuation) = try SDP.response(first, transaction: 5)
        #expect(part == Array(lists[0..<10]))
        #expect(continuation == [0xAB, 0xCD])
        let second: [UInt8] = [0x07, 0x00, 0x06, 0x00, 0x0E, 0x00, UInt8(lists.count - 10)] + lists[10...] + [0x00]
        let (rest, end) = try SDP.response(second, transaction: 6)
        #expect(end.isEmpty)
        #expect(try SDP.rfcommChannel(inAttributeLists: part + rest) == 3)
        #expect(throws: SDPError.refused(3)) { try SDP.response([0x01, 0x00, 0x05, 0x00, 0x02, 0x00, 0x03], transaction: 5) }
        #expect(throws: SDPError.self) { try SDP.response(first, transaction: 9) }
        #expect(throws: SDPError.self) { try SDP.response(Array(first.prefix(12)), transaction: 5) }
        #expect(throws: SDPError.self) { try SDP.rfcommChannel(inAttributeLists: [0x35, 0x09, 0x35]) }
    }

    @Test func uuidsAreReadAsWritten() {
        #expect(SDP.uuidBytes("0x1101") == [0x11, 0x01])
        #expect(SDP.uuidBytes("1101") == [0x11, 0x01])
        #expect(SDP.uuidBytes("00001101-0000-1000-8000-00805F9B34FB")?.count == 16)
        #expect(SDP.uuidBytes("serial") == nil)
        #expect(SDP.uuidBytes("0x11011") == nil)
    }
}

/// The little of the Service Discovery Protocol (Bluetooth Core, Vol 3 Part B)
/// that finds an RFCOMM service's channel: one ServiceSearchAttribute request
/// for the service's UUID and attribute 0x0004 (ProtocolDescriptorList), over
/// an L2CAP channel to PSM 1, and the RFCOMM channel number in the answer.
/// BlueZ's D-Bus API lists a device's service UUIDs but not their channels.
public enum SDP {
    /// The L2CAP PSM of every device's SDP server.
    public static let psm = try! L2CAPPSM(le: 1)
    static let protocolDescriptorList: UInt16 = 0x0004
    static let rfcommProtocol: UInt16 = 0x0003

    /// A ServiceSearchAttributeRequest (PDU 0x06) for the records of the
    /// service `uuid` (16, 32 or 128 bits, big-endian as written), asking for
    /// their protocol descriptor lists; `continuation` is the state the last
    /// response ended with (empty for the first request).
    public static func request(uuid: [UInt8], transaction: UInt16, continuation: [UInt8] = []) -> [UInt8] {
        let uuidElement: [UInt8]
        switch uuid.count {
        case 2: uuidElement = [0x19] + uuid
        case 4: uuidElement = [0x1A] + uuid
        default: uuidElement = [0x1C] + uuid
        }
        var parameters: [UInt8] = [0x35, UInt8(uuidElement.count)] + uuidElement
        parameters += [0xFF, 0xFF]  // MaximumAttributeByteCount
        parameters += [0x35, 0x03, 0x09, UInt8(protocolDescriptorList >> 8), UInt8(protocolDescriptorList & 0xFF)]
        parameters += [UInt8(continuation.count)] + continuation
        return [0x06, UInt8(transaction >> 8), UInt8(transaction & 0xFF),
                UInt8(parameters.count >> 8), UInt8(parameters.count & 0xFF)] + parameters
    }

    /// One ServiceSearchAttributeResponse (PDU 0x07): its part of the
    /// attribute lists, and the continuation state (empty: the last part).
    public static func response(_ pdu: [UInt8], transaction: UInt16) throws(SDPError) -> (part: [UInt8], continuation: [UInt8]) {
        guard pdu.count >= 7 else { throw .malformed("a response of \(pdu.count) bytes") }
        if pdu[0] == 0x01 {
            let code = pdu.count >= 7 ? UInt16(pdu[5]) << 8 | UInt16(pdu[6]) : 0
            throw .refused(code)
        }
        guard pdu[0] == 0x07 else { throw .malformed("PDU 0x\(String(pdu[0], radix: 16)) where 0x07 was expected") }
        guard UInt16(pdu[1]) << 8 | UInt16(pdu[2]) == transaction else { throw .malformed("another transaction's response") }
        let count = Int(pdu[5]) << 8 | Int(pdu[6])
        guard pdu.count >= 7 + count + 1 else { throw .malformed("attribute lists longer than the response") }
        let continuationLength = Int(pdu[7 + count])
        guard continuationLength <= 16, pdu.count >= 8 + count + continuationLength else {
            throw .malformed("a continuation state longer than the response")
        }
        return (Array(pdu[7..<(7 + count)]), Array(pdu[(8 + count)..<(8 + count + continuationLength)]))
    }

    /// The RFCOMM channel of the first record in the (reassembled)
    /// attribute lists that has one; nil when none has.
    public static func rfcommChannel(inAttributeLists bytes: [UInt8]) throws(SDPError) -> Int? {
        var reader = DataElementReader(bytes: bytes[...])
        guard case let .sequence(records) = try reader.element() else { throw .malformed("the attribute lists are not a sequence") }
        for record in records {
            guard case let .sequence(attributes) = record else { continue }
            var index = 0
            while index + 1 < attributes.count {
                if case .unsigned(UInt64(protocolDescriptorList)) = attributes[index],
                   let channel = rfcommChannel(inDescriptors: attributes[index + 1]) {
                    return channel
                }
                index += 2
            }
        }
        return nil
    }

    private static func rfcommChannel(inDescriptors list: DataElement) -> Int? {
        guard case let .sequence(protocols) = list else { return nil }
        for entry in protocols {
            guard case let .sequence(parts) = entry, parts.count >= 2, case let .uuid(uuid) = parts[0],
                  isShortUUID(uuid, rfcommProtocol), case let .unsigned(channel) = parts[1] else { continue }
            return Int(channel)
        }
        return nil
    }

    /// Whether `uuid` (2, 4 or 16 bytes) is the 16-bit UUID `short`, in any of its forms.
    static func isShortUUID(_ uuid: [UInt8], _ short: UInt16) -> Bool {
        let base: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]
        switch uuid.count {
        case 2: return UInt16(uuid[0]) << 8 | UInt16(uuid[1]) == short
        case 4: return uuid[0] == 0 && uuid[1] == 0 && UInt16(uuid[2]) << 8 | UInt16(uuid[3]) == short
        case 16: return uuid[0] == 0 && uuid[1] == 0 && UInt16(uuid[2]) << 8 | UInt16(uuid[3]) == short && Array(uuid[4...]) == base
        default: return false
        }
    }

    /// A UUID as written ("0x1101", "1101", or the 128-bit form with dashes)
    /// as the bytes SDP carries: 2 bytes for a 16-bit one, else 16.
    public static func uuidBytes(_ text: String) -> [UInt8]? {
        var hex = text.lowercased()
        if hex.hasPrefix("0x") { hex.removeFirst(2) }
        hex.removeAll { $0 == "-" }
        guard [4, 8, 32].contains(hex.count), hex.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }
}

public enum SDPError: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    /// The server answered with an ErrorResponse (its error code).
    case refused(UInt16)

    public var description: String {
        switch self {
        case let .malformed(what): "malformed SDP response: \(what)"
        case let .refused(code): "the SDP server refused the request (error 0x\(String(code, radix: 16)))"
        }
    }
}

/// An SDP data element, as far as finding a channel needs.
enum DataElement: Equatable {
    case unsigned(UInt64)
    case uuid([UInt8])
    case sequence([DataElement])
    /// Anything else (nil, signed integers, strings, booleans, URLs).
    case other
}

struct DataElementReader {
    var bytes: ArraySlice<UInt8>

    mutating func element() throws(SDPError) -> DataElement {
        guard let header = bytes.popFirst() else { throw .malformed("a data element cut short") }
        let type = header >> 3
        let sizeIndex = header & 0x07
        let length: Int
        switch sizeIndex {
        case 0: length = type == 0 ? 0 : 1
        case 1: length = 2
        case 2: length = 4
        case 3: length = 8
        case 4: length = 16
        case 5: length = try integer(1)
        case 6: length = try integer(2)
        default: length = try integer(4)
        }
        guard bytes.count >= length else { throw .malformed("a data element longer than its sequence") }
        let body = bytes.prefix(length)
        bytes = bytes.dropFirst(length)
        switch type {
        case 1:
            guard length <= 8 else { return .other }
            return .unsigned(body.reduce(0) { $0 << 8 | UInt64($1) })
        case 3:
            return .uuid(Array(body))
        case 6, 7:
            var inner = DataElementReader(bytes: body)
            var elements: [DataElement] = []
            while !inner.bytes.isEmpty { elements.append(try inner.element()) }
            return .sequence(elements)
        default:
            return .other
        }
    }

    private mutating func integer(_ count: Int) throws(SDPError) -> Int {
        guard bytes.count >= count else { throw .malformed("a data element's size cut short") }
        let value = bytes.prefix(count).reduce(0) { $0 << 8 | Int($1) }
        bytes = bytes.dropFirst(count)
        return value
    }
}

/// Typed reads of a checked header's members (see `HeaderReader`).
///
/// Integers are read exactly from the number as written: `1e3` is 1000, `2.0`
/// is 2, `1.5` and `1e-1` are not integers, and no integer passes through a
/// `Double` (which would round 2^63+1). A value that is not what the member
/// needs is named with the member and the value as sent.
extension IncomingMessage {
    /// The integer a member's number stands for, as sent.
    enum ExactInteger: Equatable {
        case integer(Int128)
        /// Not a whole number.
        case fraction
        /// A whole number beyond any 128-bit integer.
        case huge
    }

    func raw(_ member: HeaderMember) -> String { Self.raw(member, in: frame.header) }
    func describe(_ member: HeaderMember) -> String { Self.describe(member, in: frame.header) }
    func string(_ member: HeaderMember) -> String { Self.string(member, in: frame.header) }
    func exactInteger(_ member: HeaderMember) -> ExactInteger { Self.exactInteger(member, in: frame.header) }

    static func raw(_ member: HeaderMember, in header: [UInt8]) -> String {
        header.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[member.value]), as: UTF8.self) }
    }

    /// The value as sent, for messages (long values cut at 40 characters).
    static func describe(_ member: HeaderMember, in header: [UInt8]) -> String {
        switch member.kind {
        case .number, .bool, .null:
            let text = raw(member, in: header)
            return text.count > 40 ? String(text.prefix(40)) + "…" : text
        case .string:
            let text = string(member, in: header)
            return "the string \"" + (text.count > 40 ? String(text.prefix(40)) + "…" : text) + "\""
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    static func string(_ member: HeaderMember, in header: [UInt8]) -> String {
        header.withUnsafeBufferPointer { bytes in
            let hasEscape = bytes[member.value].contains(UInt8(ascii: "\\"))
            return HeaderReader.string(in: bytes, member.value, hasEscape: hasEscape)
        }
    }

    static func exactInteger(_ member: HeaderMember, in header: [UInt8]) -> ExactInteger {
        header.withUnsafeBufferPointer { exactInteger(UnsafeBufferPointer(rebasing: $0[member.value])) }
    }

    /// A checked JSON number's exact integer value.
    static func exactInteger(_ literal: UnsafeBufferPointer<UInt8>) -> ExactInteger {
        var index = 0
        let negative = literal.first == UInt8(ascii: "-")
        if negative { index += 1 }
        var digits: [UInt8] = []
        var fractionDigits = 0
        var inFraction = false
        var exponent = 0
        while index < literal.count {
            let byte = literal[index]
            index += 1
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if digits.isEmpty && byte == UInt8(ascii: "0") {
                    if inFraction { fractionDigits += 1 }  // leading zeros count as places, not digits
                    continue
                }
                digits.append(byte - UInt8(ascii: "0"))
                if inFraction { fractionDigits += 1 }
            case UInt8(ascii: "."):
                inFraction = true
            case UInt8(ascii: "e"), UInt8(ascii: "E"):
                var exponentNegative = false
                if literal[index] == UInt8(ascii: "+") || literal[index] == UInt8(ascii: "-") {
                    exponentNegative = literal[index] == UInt8(ascii: "-")
                    index += 1
                }
                while index < literal.count {
                    // Capped: beyond 10^6 places the answer is the same (huge, or a fraction).
                    exponent = min(exponent * 10 + Int(literal[index] - UInt8(ascii: "0")), 1_000_000)
                    index += 1
                }
                if exponentNegative { exponent = -exponent }
            default:
                return .fraction  // not reached for a checked number
            }
        }
        guard !digits.isEmpty else { return .integer(0) }
        // value = digits × 10^(exponent - fractionDigits)
        let scale = exponent - fractionDigits
        if scale < 0 {
            let dropped = -scale
            guard dropped < digits.count, digits.suffix(dropped).allSatisfy({ $0 == 0 }) else { return .fraction }
            digits.removeLast(dropped)
        } else {
            guard digits.count + scale <= 39 else { return .huge }
            digits.append(contentsOf: repeatElement(0, count: scale))
        }
        var value: Int128 = 0
        for digit in digits {
            let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (next, overflow2) = shifted.addingReportingOverflow(Int128(digit))
            guard !overflow1, !overflow2 else { return .huge }
            value = next
        }
        return .integer(negative ? -value : value)
    }

    /// A number member as an integer in `range`, or why not.
    func integer(_ member: HeaderMember, in range: ClosedRange<Int128>) -> Int128? {
        guard member.kind == .number, case let .integer(value) = exactInteger(member), range.contains(value) else { return nil }
        return value
    }

    /// The member's value as a `JSONValue` (event attributes). A number no
    /// `Double` holds (1e400) is refused, as the generic decoder refuses it.
    func jsonValue(_ member: HeaderMember) throws(HeaderSyntaxError) -> JSONValue {
        try frame.header.withUnsafeBufferPointer { bytes throws(HeaderSyntaxError) in
            var builder = JSONValueBuilder(bytes: bytes, index: member.value.lowerBound)
            return try builder.value()
        }
    }
}

/// Builds a `JSONValue` from checked JSON (so it looks at structure only).
private struct JSONValueBuilder {
    let bytes: UnsafeBufferPointer<UInt8>
    var index: Int

    mutating func value() throws(HeaderSyntaxError) -> JSONValue {
        skipWhitespace()
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                let key = string()
                skipWhitespace()
                index += 1  // :
                let item = try value()
                if members[key] == nil { members[key] = item }  // the first of a repeated name, as JSONDecoder
                skipWhitespace()
                let separator = bytes[index]
                index += 1
                if separator == UInt8(ascii: "}") { return .object(members) }
            }
        case UInt8(ascii: "["):
            index += 1
            var items: [JSONValue] = []
            skipWhitespace()
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            }
            while true {
                items.append(try value())
                skipWhitespace()
                let separator = bytes[index]
                index += 1
                if separator == UInt8(ascii: "]") { return .array(items) }
            }
        case UInt8(ascii: "\""):
            return .string(string())
        case UInt8(ascii: "t"):
            index += 4
            return .bool(true)
        case UInt8(ascii: "f"):
            index += 5
            return .bool(false)
        case UInt8(ascii: "n"):
            index += 4
            return .null
        default:
            let start = index
            while index < bytes.count, Self.isNumberByte(bytes[index]) { index += 1 }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let number = Double(text), number.isFinite else {
                throw HeaderSyntaxError(offset: start, reason: "the number \(text.prefix(40)) is beyond any Double")
            }
            return .number(number)
        }
    }

    private mutating func string() -> String {
        let start = index
        index += 1
        var hasEscape = false
        while bytes[index] != UInt8(ascii: "\"") {
            if bytes[index] == UInt8(ascii: "\\") {
                hasEscape = true
                index += 1
            }
            index += 1
        }
        index += 1
        return HeaderReader.string(in: bytes, start..<index, hasEscape: hasEscape)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"),
            UInt8(ascii: "E"):
            true
        default: false
        }
    }
}

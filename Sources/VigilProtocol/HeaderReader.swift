/// Reads a frame header without Foundation's `JSONDecoder`: one strict pass
/// over the bytes that checks the whole header is JSON (RFC 8259) and notes
/// where each top-level member's value lies, so that `type`, `id` and the
/// members of the frequent frames (event, ack, finishedProcessing, wake,
/// reply) are read straight from the bytes. Every frame goes through here;
/// with the generic decoder the daemon decoded an `ack` three times (the
/// envelope, the integer check, the message) at ~14% of its CPU per wake.
///
/// Stricter than `JSONDecoder` where that one is lenient: trailing commas,
/// unknown escapes (`\x`), lone surrogate escapes, a byte-order mark and a
/// member named twice at the top level are refused (`malformedFrame`, with
/// the byte offset). Nesting is limited to 512 levels, as `JSONDecoder` does.
/// Inside nested objects a repeated name keeps its first value, as
/// `JSONDecoder` does.
struct HeaderReader {
    static let maxDepth = 512

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// The top-level members of `header`, which must be one JSON object and
    /// nothing else (whitespace aside). The header is known to be valid UTF-8.
    static func members(of header: [UInt8]) throws(HeaderSyntaxError) -> HeaderMembers {
        let result: Result<[HeaderMember], HeaderSyntaxError> = header.withUnsafeBufferPointer { buffer in
            var reader = HeaderReader(buffer)
            do throws(HeaderSyntaxError) {
                return .success(try reader.topLevelObject())
            } catch {
                return .failure(error)
            }
        }
        return HeaderMembers(members: try result.get())
    }

    // MARK: Validation

    private mutating func topLevelObject() throws(HeaderSyntaxError) -> [HeaderMember] {
        skipWhitespace()
        guard peek == UInt8(ascii: "{") else { throw fail("expected a JSON object") }
        index += 1
        var members: [HeaderMember] = []
        var seen: Set<String>?
        skipWhitespace()
        if peek == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                skipWhitespace()
                let keyStart = index
                let hasEscape = try scanString(expecting: "a member name in quotes")
                let key = HeaderReader.string(in: bytes, keyStart..<index, hasEscape: hasEscape)
                if members.count < 16 {
                    if members.contains(where: { $0.key == key }) { throw fail("member '\(key)' appears twice", at: keyStart) }
                } else {
                    if seen == nil { seen = Set(members.map(\.key)) }
                    guard seen!.insert(key).inserted else { throw fail("member '\(key)' appears twice", at: keyStart) }
                }
                skipWhitespace()
                try expect(UInt8(ascii: ":"), "':' after a member name")
                skipWhitespace()
                let valueStart = index
                let kind = try scanValue(depth: 2)
                members.append(HeaderMember(key: key, value: valueStart..<index, kind: kind))
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                } else {
                    try expect(UInt8(ascii: "}"), "',' or '}' after a member")
                    break
                }
            }
        }
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected bytes after the header's object") }
        return members
    }

    /// Checks one value (of a container at `depth`, the top object being 1).
    private mutating func scanValue(depth: Int) throws(HeaderSyntaxError) -> HeaderValueKind {
        switch peek {
        case UInt8(ascii: "\""):
            _ = try scanString(expecting: "a string")
            return .string
        case UInt8(ascii: "{"):
            guard depth <= Self.maxDepth else { throw fail("nested deeper than \(Self.maxDepth) levels") }
            index += 1
            skipWhitespace()
            if peek == UInt8(ascii: "}") {
                index += 1
                return .object
            }
            while true {
                skipWhitespace()
                _ = try scanString(expecting: "a member name in quotes")
                skipWhitespace()
                try expect(UInt8(ascii: ":"), "':' after a member name")
                skipWhitespace()
                _ = try scanValue(depth: depth + 1)
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                } else {
                    try expect(UInt8(ascii: "}"), "',' or '}' after a member")
                    return .object
                }
            }
        case UInt8(ascii: "["):
            guard depth <= Self.maxDepth else { throw fail("nested deeper than \(Self.maxDepth) levels") }
            index += 1
            skipWhitespace()
            if peek == UInt8(ascii: "]") {
                index += 1
                return .array
            }
            while true {
                skipWhitespace()
                _ = try scanValue(depth: depth + 1)
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                } else {
                    try expect(UInt8(ascii: "]"), "',' or ']' after an array element")
                    return .array
                }
            }
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try scanNumber()
            return .number
        default:
            throw fail(index < bytes.count ? "expected a JSON value" : "the header ends inside a value")
        }
    }

    /// Checks a string from its opening quote; returns whether it has escapes.
    private mutating func scanString(expecting what: String) throws(HeaderSyntaxError) -> Bool {
        guard peek == UInt8(ascii: "\"") else { throw fail("expected \(what)") }
        index += 1
        var hasEscape = false
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return hasEscape
            case UInt8(ascii: "\\"):
                hasEscape = true
                try scanEscape()
            case 0..<0x20:
                throw fail("a control character (0x\(String(byte, radix: 16))) in a string must be escaped")
            default:
                index += 1
            }
        }
        throw fail("the header ends inside a string")
    }

    private mutating func scanEscape() throws(HeaderSyntaxError) {
        let start = index
        index += 1  // the backslash
        guard index < bytes.count else { throw fail("the header ends inside a string") }
        switch bytes[index] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 1
        case UInt8(ascii: "u"):
            index += 1
            let unit = try hexUnit(at: start)
            switch unit {
            case 0xD800...0xDBFF:
                // A high surrogate must be followed by a low one: together one scalar.
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw fail("a lone surrogate escape (\\u\(String(unit, radix: 16)))", at: start)
                }
                index += 2
                let low = try hexUnit(at: start)
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw fail("a lone surrogate escape (\\u\(String(unit, radix: 16)))", at: start)
                }
            case 0xDC00...0xDFFF:
                throw fail("a lone surrogate escape (\\u\(String(unit, radix: 16)))", at: start)
            default:
                break
            }
        default:
            throw fail("an unknown escape in a string", at: start)
        }
    }

    private mutating func hexUnit(at start: Int) throws(HeaderSyntaxError) -> UInt16 {
        guard index + 4 <= bytes.count else { throw fail("a \\u escape needs four hex digits", at: start) }
        var unit: UInt16 = 0
        for _ in 0..<4 {
            guard let digit = HeaderReader.hexValue(bytes[index]) else { throw fail("a \\u escape needs four hex digits", at: start) }
            unit = unit << 4 | UInt16(digit)
            index += 1
        }
        return unit
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func scanNumber() throws(HeaderSyntaxError) {
        let start = index
        if peek == UInt8(ascii: "-") { index += 1 }
        if peek == UInt8(ascii: "0") {
            index += 1
            if isDigit(peek) { throw fail("a number with a leading zero", at: start) }
        } else {
            guard isDigit(peek) else { throw fail("a malformed number", at: start) }
            while isDigit(peek) { index += 1 }
        }
        if peek == UInt8(ascii: ".") {
            index += 1
            guard isDigit(peek) else { throw fail("a malformed number", at: start) }
            while isDigit(peek) { index += 1 }
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            index += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
            guard isDigit(peek) else { throw fail("a malformed number", at: start) }
            while isDigit(peek) { index += 1 }
        }
    }

    private mutating func literal(_ word: StaticString) throws(HeaderSyntaxError) {
        let start = index
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw fail("expected a JSON value", at: start) }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] {
            throw fail("expected a JSON value", at: start)
        }
        index += count
    }

    private mutating func expect(_ byte: UInt8, _ what: String) throws(HeaderSyntaxError) {
        guard peek == byte else {
            throw fail(index < bytes.count ? "expected \(what)" : "the header ends early: expected \(what)")
        }
        index += 1
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    /// The byte at `index`, or 0 past the end (0 is never valid where it is looked at).
    private var peek: UInt8 { index < bytes.count ? bytes[index] : 0 }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private func fail(_ reason: String, at offset: Int? = nil) -> HeaderSyntaxError {
        HeaderSyntaxError(offset: offset ?? index, reason: reason)
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: Reading checked values

    /// The text of a checked string, `range` including its quotes.
    static func string(in bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, hasEscape: Bool) -> String {
        let inner = UnsafeBufferPointer(rebasing: bytes[(range.lowerBound + 1)..<(range.upperBound - 1)])
        guard hasEscape else { return String(decoding: inner, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(inner.count)
        var index = 0
        while index < inner.count {
            let byte = inner[index]
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                index += 1
                continue
            }
            let escape = inner[index + 1]
            index += 2
            switch escape {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = UInt32(hexUnit(inner, index))
                index += 4
                if (0xD800...0xDBFF).contains(scalar) {
                    let low = UInt32(hexUnit(inner, index + 2))
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                // Checked: never a lone surrogate, so always a scalar.
                if let scalar = Unicode.Scalar(scalar), let encoded = UTF8.encode(scalar) { out.append(contentsOf: encoded) }
            default: out.append(escape)  // " \ /
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexUnit(_ bytes: UnsafeBufferPointer<UInt8>, _ at: Int) -> UInt16 {
        var unit: UInt16 = 0
        for offset in 0..<4 { unit = unit << 4 | UInt16(hexValue(bytes[at + offset]) ?? 0) }
        return unit
    }
}

/// Why a header is not JSON, and where: for the `malformedFrame` message.
public struct HeaderSyntaxError: Error, Equatable, CustomStringConvertible {
    public var offset: Int
    public var reason: String

    public var description: String { "\(reason) (byte \(offset))" }
}

/// What kind of JSON value a member holds.
enum HeaderValueKind: UInt8, Sendable {
    case string, number, object, array, bool, null
}

/// One top-level member of a header: its name and where its value lies.
struct HeaderMember: Sendable {
    var key: String
    var value: Range<Int>
    var kind: HeaderValueKind
}

/// The top-level members of a checked header, in the order sent.
struct HeaderMembers: Sendable {
    var members: [HeaderMember]

    subscript(key: String) -> HeaderMember? {
        members.first { $0.key == key }
    }
}

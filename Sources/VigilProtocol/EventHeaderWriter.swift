/// Writes the header of an `event` frame directly, without Foundation's
/// `JSONEncoder`: every event an app gets goes through here, and for a small
/// event (a `ble.notification` of one value, an `ack` coming back) the
/// encoder's generic machinery was most of the daemon's cost of sending it.
/// The output is the JSON `JSONEncoder` gives with `.sortedKeys` and
/// `.withoutEscapingSlashes` (keys in `String` order, no whitespace), so
/// clients see the same headers as before.
enum EventHeaderWriter {
    /// The header, or nil when a number cannot be written exactly this way
    /// (not finite: the generic encoder reports it).
    static func header(_ event: EventMessage, id: Int?) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        out.append(contentsOf: #"{"attributes":"#.utf8)
        guard append(.object(event.attributes), to: &out) else { return nil }
        if let id {
            out.append(contentsOf: #","id":"#.utf8)
            out.append(contentsOf: String(id).utf8)
        }
        out.append(contentsOf: #","kind":"#.utf8)
        appendString(event.kind, to: &out)
        out.append(contentsOf: #","redelivered":"#.utf8)
        out.append(contentsOf: (event.redelivered ? "true" : "false").utf8)
        out.append(contentsOf: #","seq":"#.utf8)
        out.append(contentsOf: String(event.seq).utf8)
        out.append(contentsOf: #","type":"event"}"#.utf8)
        return out
    }

    static func append(_ value: JSONValue, to out: inout [UInt8]) -> Bool {
        switch value {
        case .null:
            out.append(contentsOf: "null".utf8)
        case let .bool(flag):
            out.append(contentsOf: (flag ? "true" : "false").utf8)
        case let .number(number):
            guard number.isFinite else { return false }
            // As JSONEncoder writes it: Swift's shortest form, less a trailing
            // ".0" ("100", "-0", "0.5", "1e+16", "9.007199254740994e+15");
            // whole numbers below 10^15 (timestamps, counts) the quick way.
            if number == number.rounded(), abs(number) < 1e15, !(number == 0 && number.sign == .minus) {
                out.append(contentsOf: String(Int64(number)).utf8)
                return true
            }
            let text = String(number)
            if text.hasSuffix(".0") {
                out.append(contentsOf: text.utf8.dropLast(2))
            } else {
                out.append(contentsOf: text.utf8)
            }
        case let .string(string):
            appendString(string, to: &out)
        case let .array(items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                guard append(item, to: &out) else { return false }
            }
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                guard append(members[key]!, to: &out) else { return false }
            }
            out.append(UInt8(ascii: "}"))
        }
        return true
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`, `\t`,
    /// ... or `\u00XX`; everything else (`/` and non-ASCII included) as UTF-8.
    static func appendString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Runs that need no escape are copied whole: appending byte by byte
        // cost ~20 instructions a byte, and a wake writes two decision lines
        // of ~150 bytes besides its frames.
        let copied: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in
            var start = 0
            for index in bytes.indices where bytes[index] < 0x20 || bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "\\") {
                if start < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
                appendEscaped(bytes[index], to: &out)
                start = index + 1
            }
            if start < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
        }
        if copied == nil {
            for byte in string.utf8 { appendEscaped(byte, to: &out) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// One byte of a JSON string, escaped if it must be.
    private static func appendEscaped(_ byte: UInt8, to out: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
        case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
        case 0x0A: out.append(contentsOf: #"\n"#.utf8)
        case 0x0D: out.append(contentsOf: #"\r"#.utf8)
        case 0x09: out.append(contentsOf: #"\t"#.utf8)
        case 0x08: out.append(contentsOf: #"\b"#.utf8)
        case 0x0C: out.append(contentsOf: #"\f"#.utf8)
        case 0..<0x20:
            let hex = Array("0123456789abcdef".utf8)
            out.append(contentsOf: #"\u00"#.utf8)
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        default: out.append(byte)
        }
    }
}

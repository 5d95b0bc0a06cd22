/// A strict TOML 1.0 parser that reports every mistake as a `TOMLError` and
/// never traps, whatever the input: no force unwraps, no unchecked indexing,
/// integers out of the 64-bit range are refused, nesting and size are bounded
/// (deep nesting would otherwise overflow the stack).
///
/// Where the specification leaves room, it follows Python's `tomllib` (the
/// differential test's oracle): CRLF is read as LF everywhere, a byte order
/// mark is refused, seconds are required and must be 0-59, and years start at 1.
public enum TOMLDocument {
    /// Larger inputs are refused before parsing.
    public static let maximumSize = 1 << 20
    /// Tables, arrays and inline tables nested deeper than this are refused.
    /// At this depth a parse needs under 128 KiB of stack in a release build
    /// and under 512 KiB in a debug build: any thread's stack holds it.
    public static let maximumDepth = 128

    /// Parses a document given as UTF-8 bytes (invalid UTF-8 is an error).
    public static func parse(_ bytes: [UInt8]) throws(TOMLError) -> TOMLTable {
        guard bytes.count <= maximumSize else {
            throw TOMLError(line: 1, column: 1, message: "larger than \(maximumSize) bytes (\(bytes.count) bytes)")
        }
        var parser = try Parser(bytes: bytes)
        return try parser.parseDocument()
    }

    /// Parses a document given as a string.
    public static func parse(_ text: String) throws(TOMLError) -> TOMLTable {
        try parse(Array(text.utf8))
    }
}

// MARK: - The tree under construction

/// A table while the document is read: `[header]` and dotted-key tables can
/// still gain keys; inline tables and arrays are finished values.
private final class TableNode {
    enum Entry {
        case value(TOMLValue)
        case table(TableNode)
        case tables(TableList)
    }

    var keys: [String] = []
    var entries: [String: Entry] = [:]
    /// Defined by a `[header]`, or by dotted keys in a finished section: no
    /// header may define it again and no dotted key may add to it.
    var defined = false

    func insert(_ key: String, _ entry: Entry) {
        if entries.updateValue(entry, forKey: key) == nil { keys.append(key) }
    }

    func finished() -> TOMLTable {
        var table = TOMLTable()
        for key in keys {
            switch entries[key] {
            case .value(let value): table.set(value, for: key)
            case .table(let node): table.set(.table(node.finished()), for: key)
            case .tables(let list): table.set(.array(list.tables.map { .table($0.finished()) }), for: key)
            case nil: break
            }
        }
        return table
    }
}

/// An array of tables (`[[name]]`), appended to in place.
private final class TableList {
    var tables: [TableNode] = []
}

// MARK: - Characters

private enum ASCII {
    static let tab: UInt8 = 0x09
    static let newline: UInt8 = 0x0A
    static let carriageReturn: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let quote: UInt8 = 0x22
    static let hash: UInt8 = 0x23
    static let apostrophe: UInt8 = 0x27
    static let plus: UInt8 = 0x2B
    static let comma: UInt8 = 0x2C
    static let minus: UInt8 = 0x2D
    static let dot: UInt8 = 0x2E
    static let zero: UInt8 = 0x30
    static let colon: UInt8 = 0x3A
    static let equals: UInt8 = 0x3D
    static let openBracket: UInt8 = 0x5B
    static let backslash: UInt8 = 0x5C
    static let closeBracket: UInt8 = 0x5D
    static let underscore: UInt8 = 0x5F
    static let openBrace: UInt8 = 0x7B
    static let closeBrace: UInt8 = 0x7D
    static let delete: UInt8 = 0x7F

    static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
    static func isBareKey(_ c: UInt8) -> Bool {
        isDigit(c) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == minus || c == underscore
    }
    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }
    /// Control characters TOML forbids in comments and strings (tab is allowed).
    static func isControl(_ c: UInt8) -> Bool { (c < 0x20 && c != tab) || c == delete }

    /// How a byte is named in an error message.
    static func describe(_ c: UInt8?) -> String {
        guard let c else { return "the end of the file" }
        if c == newline { return "the end of the line" }
        if c >= 0x21 && c < 0x7F { return "'\(Character(Unicode.Scalar(c)))'" }
        if c == space { return "a space" }
        if c < 0x80 { return "control character U+\(hex(UInt32(c), width: 4))" }
        return "a non-ASCII character"
    }

    static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}

// MARK: - The parser

private struct Parser {
    /// The document with CRLF read as LF.
    let bytes: [UInt8]
    var pos = 0
    let root = TableNode()
    /// The table the current section's keys go into, and its header's key.
    var current: TableNode
    var currentKey: [String] = []
    /// Tables made or extended by dotted keys in the current section: they
    /// become `defined` when the section ends.
    var dotted: [TableNode] = []

    init(bytes input: [UInt8]) throws(TOMLError) {
        try Self.validateUTF8(input)
        var normalized: [UInt8] = []
        normalized.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == ASCII.carriageReturn, index + 1 < input.count, input[index + 1] == ASCII.newline {
                index += 1
                continue
            }
            normalized.append(byte)
            index += 1
        }
        bytes = normalized
        current = root
    }

    // MARK: Errors

    func error(_ message: String, at offset: Int? = nil) -> TOMLError {
        Self.error(message, in: bytes, at: offset ?? pos)
    }

    static func error(_ message: String, in bytes: [UInt8], at offset: Int) -> TOMLError {
        var line = 1
        var column = 1
        var index = 0
        while index < min(offset, bytes.count) {
            let byte = bytes[index]
            if byte == ASCII.newline {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1  // continuation bytes belong to the character before
            }
            index += 1
        }
        return TOMLError(line: line, column: column, message: message)
    }

    /// Refuses anything but well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
    static func validateUTF8(_ bytes: [UInt8]) throws(TOMLError) {
        var index = 0
        while index < bytes.count {
            let lead = bytes[index]
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch lead {
            case 0x00...0x7F: length = 1
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; high = 0x9F
            case 0xF0: length = 4; low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; high = 0x8F
            default:
                throw error("not valid UTF-8 (byte 0x\(ASCII.hex(UInt32(lead), width: 2)))", in: bytes, at: index)
            }
            for offset in 1..<length {
                let next = index + offset
                guard next < bytes.count else {
                    throw error("not valid UTF-8 (a character is cut short at the end)", in: bytes, at: index)
                }
                let byte = bytes[next]
                let (min, max) = offset == 1 ? (low, high) : (0x80, 0xBF)
                guard byte >= min, byte <= max else {
                    throw error(
                        "not valid UTF-8 (byte 0x\(ASCII.hex(UInt32(byte), width: 2)) after 0x\(ASCII.hex(UInt32(lead), width: 2)))",
                        in: bytes, at: index)
                }
            }
            index += length
        }
    }

    // MARK: Reading

    func peek(_ ahead: Int = 0) -> UInt8? {
        let index = pos + ahead
        return index >= 0 && index < bytes.count ? bytes[index] : nil
    }

    func startsWith(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard pos + count <= bytes.count else { return false }
        return text.withUTF8Buffer { expected in
            for index in 0..<count where bytes[pos + index] != expected[index] { return false }
            return true
        }
    }

    mutating func skipWhitespace() {
        while let c = peek(), c == ASCII.space || c == ASCII.tab { pos += 1 }
    }

    /// Skips a comment if one starts here; the newline after it stays.
    mutating func skipComment() throws(TOMLError) {
        guard peek() == ASCII.hash else { return }
        pos += 1
        while let c = peek(), c != ASCII.newline {
            if ASCII.isControl(c) { throw error("\(ASCII.describe(c)) is not allowed in a comment") }
            pos += 1
        }
    }

    /// Whitespace, newlines and comments, as allowed between array elements.
    mutating func skipArraySpace() throws(TOMLError) {
        while true {
            let before = pos
            while let c = peek(), c == ASCII.space || c == ASCII.tab || c == ASCII.newline { pos += 1 }
            try skipComment()
            if pos == before { return }
        }
    }

    mutating func expect(_ byte: UInt8, _ what: String) throws(TOMLError) {
        guard skip(byte) else { throw unexpected(what) }
    }

    // MARK: Document

    mutating func parseDocument() throws(TOMLError) -> TOMLTable {
        if startsWith("\u{FEFF}") { throw error("a byte order mark is not allowed") }
        while true {
            skipWhitespace()
            guard let c = peek() else { break }
            if c == ASCII.newline {
                pos += 1
                continue
            }
            if ASCII.isBareKey(c) || c == ASCII.quote || c == ASCII.apostrophe {
                try keyValueStatement()
                skipWhitespace()
            } else if c == ASCII.openBracket {
                for table in dotted { table.defined = true }
                dotted = []
                if peek(1) == ASCII.openBracket { try arrayTableHeader() } else { try tableHeader() }
                skipWhitespace()
            } else if c != ASCII.hash {
                throw error("expected a key, a [table] header or a comment, found \(ASCII.describe(c))")
            }
            try skipComment()
            guard let end = peek() else { break }
            guard end == ASCII.newline else {
                throw error("expected the end of the line after a statement, found \(ASCII.describe(end))")
            }
            pos += 1
        }
        return root.finished()
    }

    static func dotted(_ key: [String]) -> String {
        key.map { part in
            part.utf8.allSatisfy(ASCII.isBareKey) && !part.isEmpty ? part : "\"\(part)\""
        }.joined(separator: ".")
    }

    /// `key = value` in a section: dotted keys make or extend tables of this section only.
    mutating func keyValueStatement() throws(TOMLError) {
        let start = pos
        let (key, value) = try keyValuePair(depth: currentKey.count)
        var table = current
        for (index, part) in key.dropLast().enumerated() {
            var path: String { Self.dotted(currentKey + key.prefix(index + 1)) }
            switch table.entries[part] {
            case nil:
                let node = TableNode()
                table.insert(part, .table(node))
                dotted.append(node)
                table = node
            case .table(let node):
                guard !node.defined else {
                    throw error("cannot add keys to table '\(path)' with a dotted key: it is defined elsewhere", at: start)
                }
                dotted.append(node)
                table = node
            case .tables:
                throw error("cannot add keys to '\(path)' with a dotted key: it is an array of tables", at: start)
            case .value(let existing):
                throw error("cannot add keys to '\(path)': it is already \(existing.typeDescription)", at: start)
            }
        }
        guard let last = key.last else { throw error("expected a key", at: start) }
        guard table.entries[last] == nil else {
            throw error("'\(Self.dotted(currentKey + key))' is defined twice", at: start)
        }
        table.insert(last, .value(value))
    }

    /// `[a.b.c]`: defines a table, once.
    mutating func tableHeader() throws(TOMLError) {
        let start = pos
        pos += 1
        skipWhitespace()
        let key = try parseKey(depth: 0)
        try expect(ASCII.closeBracket, "']' to end the table header")
        let parent = try headerParent(key, at: start)
        guard let last = key.last else { throw error("expected a key", at: start) }
        let name = Self.dotted(key)
        let table: TableNode
        switch parent.entries[last] {
        case nil:
            table = TableNode()
            parent.insert(last, .table(table))
        case .table(let node):
            guard !node.defined else { throw error("table [\(name)] is defined twice", at: start) }
            table = node
        case .tables:
            throw error("[\(name)] is already an array of tables ([[\(name)]])", at: start)
        case .value(let existing):
            throw error("[\(name)] cannot be a table: '\(name)' is already \(existing.typeDescription)", at: start)
        }
        table.defined = true
        current = table
        currentKey = key
    }

    /// `[[a.b.c]]`: appends a table to an array of tables.
    mutating func arrayTableHeader() throws(TOMLError) {
        let start = pos
        pos += 2
        skipWhitespace()
        let key = try parseKey(depth: 0)
        guard peek() == ASCII.closeBracket, peek(1) == ASCII.closeBracket else {
            throw error("expected ']]' to end the array-of-tables header, found \(ASCII.describe(peek()))")
        }
        pos += 2
        let parent = try headerParent(key, at: start)
        guard let last = key.last else { throw error("expected a key", at: start) }
        let name = Self.dotted(key)
        let table = TableNode()
        switch parent.entries[last] {
        case nil:
            let list = TableList()
            list.tables.append(table)
            parent.insert(last, .tables(list))
        case .tables(let list):
            list.tables.append(table)
        case .table:
            throw error("[[\(name)]] cannot be an array of tables: [\(name)] is a table", at: start)
        case .value(let existing):
            throw error("[[\(name)]] cannot be an array of tables: '\(name)' is already \(existing.typeDescription)", at: start)
        }
        current = table
        currentKey = key
    }

    /// The table a header's last key part goes into; missing tables on the way
    /// are made (and may be defined by their own header later).
    func headerParent(_ key: [String], at start: Int) throws(TOMLError) -> TableNode {
        var table = root
        for (index, part) in key.dropLast().enumerated() {
            switch table.entries[part] {
            case nil:
                let node = TableNode()
                table.insert(part, .table(node))
                table = node
            case .table(let node):
                table = node
            case .tables(let list):
                guard let last = list.tables.last else { throw error("empty array of tables", at: start) }
                table = last
            case .value(let existing):
                let path = Self.dotted(Array(key.prefix(index + 1)))
                throw error("cannot add a table under '\(path)': it is already \(existing.typeDescription)", at: start)
            }
        }
        return table
    }

    // MARK: Keys

    /// A dotted key, with the whitespace after it.
    mutating func parseKey(depth: Int) throws(TOMLError) -> [String] {
        var parts: [String] = []
        while true {
            parts.append(try parseSimpleKey())
            guard depth + parts.count <= TOMLDocument.maximumDepth else { throw tooDeep() }
            skipWhitespace()
            guard peek() == ASCII.dot else { return parts }
            pos += 1
            skipWhitespace()
        }
    }

    mutating func parseSimpleKey() throws(TOMLError) -> String {
        guard let c = peek() else { throw error("expected a key, found the end of the file") }
        if c == ASCII.quote { return try parseBasicString() }
        if c == ASCII.apostrophe { return try parseLiteralString() }
        let start = pos
        while let c = peek(), ASCII.isBareKey(c) { pos += 1 }
        guard pos > start else { throw error("expected a key, found \(ASCII.describe(c))") }
        return String(decoding: bytes[start..<pos], as: UTF8.self)
    }

    /// `key = value`; `depth` counts the tables the key is already inside.
    mutating func keyValuePair(depth: Int) throws(TOMLError) -> ([String], TOMLValue) {
        let key = try parseKey(depth: depth)
        guard skip(ASCII.equals) else { throw missingEquals(after: key) }
        skipWhitespace()
        let value = try parseValue(depth: depth + key.count)
        return (key, value)
    }

    // MARK: Values

    /// Arrays and inline tables recurse through here, so it and they keep
    /// their stack frames small: scalars and error messages live in functions
    /// of their own (a debug build needs about 5 KiB a level otherwise).
    mutating func parseValue(depth: Int) throws(TOMLError) -> TOMLValue {
        switch peek() {
        case ASCII.openBracket: try parseArray(depth: depth + 1)
        case ASCII.openBrace: try parseInlineTable(depth: depth + 1)
        default: try parseScalar()
        }
    }

    @inline(never)
    mutating func parseScalar() throws(TOMLError) -> TOMLValue {
        guard let c = peek() else { throw error("expected a value, found the end of the file") }
        switch c {
        case ASCII.quote:
            return .string(startsWith("\"\"\"") ? try parseMultilineBasicString() : try parseBasicString())
        case ASCII.apostrophe:
            return .string(startsWith("'''") ? try parseMultilineLiteralString() : try parseLiteralString())
        default:
            break
        }
        if startsWith("true") {
            pos += 4
            return .boolean(true)
        }
        if startsWith("false") {
            pos += 5
            return .boolean(false)
        }
        if let dateTime = try parseDateTime() { return .dateTime(dateTime) }
        if let number = try parseNumber() { return number }
        for (text, value) in [("inf", Double.infinity), ("nan", Double.nan)] {
            for sign in ["", "+", "-"] where matches(sign + text) {
                pos += sign.utf8.count + 3
                return .float(sign == "-" ? -value : value)
            }
        }
        throw error("expected a value, found \(ASCII.describe(c))")
    }

    @inline(never)
    func tooDeep() -> TOMLError { error("nested deeper than \(TOMLDocument.maximumDepth) levels") }

    func matches(_ text: String) -> Bool {
        var index = pos
        for byte in text.utf8 {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
        }
        return true
    }

    mutating func parseArray(depth: Int) throws(TOMLError) -> TOMLValue {
        guard depth <= TOMLDocument.maximumDepth else { throw tooDeep() }
        let start = pos
        pos += 1
        var elements: [TOMLValue] = []
        try skipArraySpace()
        if peek() == ASCII.closeBracket {
            pos += 1
            return .array(elements)
        }
        while true {
            elements.append(try parseValue(depth: depth))
            try skipArraySpace()
            guard let c = peek() else { throw error("the array is never closed", at: start) }
            if c == ASCII.closeBracket {
                pos += 1
                return .array(elements)
            }
            guard c == ASCII.comma else { throw unexpected("',' or ']' in an array") }
            pos += 1
            try skipArraySpace()
            if peek() == ASCII.closeBracket {
                pos += 1
                return .array(elements)
            }
        }
    }

    /// `{ a = 1, b.c = 2 }`: one line, no trailing comma, complete in itself.
    mutating func parseInlineTable(depth: Int) throws(TOMLError) -> TOMLValue {
        guard depth <= TOMLDocument.maximumDepth else { throw tooDeep() }
        let tableStart = pos
        pos += 1
        let table = TableNode()
        skipWhitespace()
        if peek() == ASCII.closeBrace {
            pos += 1
            return .table(table.finished())
        }
        while true {
            let start = pos
            let (key, value) = try keyValuePair(depth: depth)
            try insert(value, at: key, into: table, start: start)
            skipWhitespace()
            guard let c = peek() else { throw error("the inline table is never closed", at: tableStart) }
            if c == ASCII.closeBrace {
                pos += 1
                return .table(table.finished())
            }
            guard c == ASCII.comma else { throw unexpected("',' or '}' in an inline table (which must stay on one line)") }
            pos += 1
            skipWhitespace()
        }
    }

    /// A key of an inline table: its dotted keys make tables inside it only.
    @inline(never)
    func insert(_ value: TOMLValue, at key: [String], into table: TableNode, start: Int) throws(TOMLError) {
        var node = table
        for (index, part) in key.dropLast().enumerated() {
            switch node.entries[part] {
            case nil:
                let child = TableNode()
                node.insert(part, .table(child))
                node = child
            case .table(let child):
                node = child
            case .tables, .value:
                throw error(
                    "cannot add keys to '\(Self.dotted(Array(key.prefix(index + 1))))' in an inline table: it is already a value",
                    at: start)
            }
        }
        guard let last = key.last else { throw error("expected a key", at: start) }
        guard node.entries[last] == nil else {
            throw error("'\(Self.dotted(key))' is defined twice in an inline table", at: start)
        }
        node.insert(last, .value(value))
    }

    @inline(never)
    func missingEquals(after key: [String]) -> TOMLError { unexpected("'=' after the key '\(Self.dotted(key))'") }

    /// "expected WHAT, found X" at the current position.
    @inline(never)
    func unexpected(_ what: String) -> TOMLError { error("expected \(what), found \(ASCII.describe(peek()))") }

    // MARK: Strings

    /// `"..."` on one line, with escapes.
    mutating func parseBasicString() throws(TOMLError) -> String {
        let start = pos
        pos += 1
        var result: [UInt8] = []
        while true {
            guard let c = peek() else { throw error("the string is never closed", at: start) }
            switch c {
            case ASCII.quote:
                pos += 1
                return String(decoding: result, as: UTF8.self)
            case ASCII.backslash:
                try parseEscape(into: &result, multiline: false)
            case ASCII.newline:
                throw error("the string is not closed on its line", at: start)
            default:
                if ASCII.isControl(c) { throw error("\(ASCII.describe(c)) must be escaped in a string") }
                result.append(c)
                pos += 1
            }
        }
    }

    /// `"""..."""`: a newline right after the opening quotes is dropped.
    mutating func parseMultilineBasicString() throws(TOMLError) -> String {
        let start = pos
        pos += 3
        if peek() == ASCII.newline { pos += 1 }
        var result: [UInt8] = []
        while true {
            guard let c = peek() else { throw error("the string is never closed", at: start) }
            if c == ASCII.quote, startsWith("\"\"\"") {
                pos += 3
                closingQuotes(ASCII.quote, into: &result)
                return String(decoding: result, as: UTF8.self)
            }
            if c == ASCII.backslash {
                try parseEscape(into: &result, multiline: true)
                continue
            }
            if ASCII.isControl(c), c != ASCII.newline { throw error("\(ASCII.describe(c)) must be escaped in a string") }
            result.append(c)
            pos += 1
        }
    }

    /// Up to two quotes right before the closing three belong to the string.
    mutating func closingQuotes(_ quote: UInt8, into result: inout [UInt8]) {
        for _ in 0..<2 where peek() == quote {
            result.append(quote)
            pos += 1
        }
    }

    mutating func parseEscape(into result: inout [UInt8], multiline: Bool) throws(TOMLError) {
        let start = pos
        pos += 1
        guard let c = peek() else { throw error("a string ends in the middle of an escape") }
        if multiline, c == ASCII.space || c == ASCII.tab || c == ASCII.newline {
            // A line-ending backslash: the newline and all whitespace after it go.
            skipWhitespace()
            if let next = peek() {
                guard next == ASCII.newline else {
                    throw error("'\\' followed by spaces must end the line (a line-ending backslash)", at: start)
                }
            }
            while let next = peek(), next == ASCII.space || next == ASCII.tab || next == ASCII.newline { pos += 1 }
            return
        }
        pos += 1
        let simple: UInt8?
        switch c {
        case 0x62: simple = 0x08  // \b
        case 0x74: simple = 0x09  // \t
        case 0x6E: simple = 0x0A  // \n
        case 0x66: simple = 0x0C  // \f
        case 0x72: simple = 0x0D  // \r
        case ASCII.quote: simple = ASCII.quote
        case ASCII.backslash: simple = ASCII.backslash
        case 0x75: simple = nil; try parseUnicodeEscape(digits: 4, into: &result, start: start)  // \uXXXX
        case 0x55: simple = nil; try parseUnicodeEscape(digits: 8, into: &result, start: start)  // \UXXXXXXXX
        default:
            let shown = c >= 0x21 && c < 0x7F ? "'\\\(Character(Unicode.Scalar(c)))'" : "'\\' followed by \(ASCII.describe(c))"
            throw error("invalid escape \(shown) in a string (valid: \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX)", at: start)
        }
        if let simple { result.append(simple) }
    }

    mutating func parseUnicodeEscape(digits: Int, into result: inout [UInt8], start: Int) throws(TOMLError) {
        var value: UInt32 = 0
        for _ in 0..<digits {
            guard let c = peek(), let digit = ASCII.hexValue(c) else {
                throw error("'\\\(digits == 4 ? "u" : "U")' must be followed by \(digits) hex digits", at: start)
            }
            value = value << 4 | UInt32(digit)
            pos += 1
        }
        guard let scalar = Unicode.Scalar(value) else {
            throw error("escape U+\(ASCII.hex(value, width: 4)) is not a Unicode scalar value", at: start)
        }
        result.append(contentsOf: String(Character(scalar)).utf8)
    }

    /// `'...'` on one line, taken as it is.
    mutating func parseLiteralString() throws(TOMLError) -> String {
        let start = pos
        pos += 1
        let contentStart = pos
        while true {
            guard let c = peek() else { throw error("the string is never closed", at: start) }
            if c == ASCII.apostrophe {
                pos += 1
                return String(decoding: bytes[contentStart..<(pos - 1)], as: UTF8.self)
            }
            if c == ASCII.newline { throw error("the string is not closed on its line", at: start) }
            if ASCII.isControl(c) { throw error("\(ASCII.describe(c)) is not allowed in a literal string") }
            pos += 1
        }
    }

    mutating func parseMultilineLiteralString() throws(TOMLError) -> String {
        let start = pos
        pos += 3
        if peek() == ASCII.newline { pos += 1 }
        var result: [UInt8] = []
        while true {
            guard let c = peek() else { throw error("the string is never closed", at: start) }
            if c == ASCII.apostrophe, startsWith("'''") {
                pos += 3
                closingQuotes(ASCII.apostrophe, into: &result)
                return String(decoding: result, as: UTF8.self)
            }
            if ASCII.isControl(c), c != ASCII.newline { throw error("\(ASCII.describe(c)) is not allowed in a literal string") }
            result.append(c)
            pos += 1
        }
    }

    // MARK: Numbers

    /// Steps over `byte` if it is next.
    mutating func skip(_ byte: UInt8) -> Bool {
        guard peek() == byte else { return false }
        pos += 1
        return true
    }

    /// Reads `count` decimal digits, or nothing (and returns nil).
    mutating func digits(_ count: Int) -> Int? {
        var value = 0
        for index in 0..<count {
            guard let c = peek(index), ASCII.isDigit(c) else { return nil }
            value = value * 10 + Int(c - ASCII.zero)
        }
        pos += count
        return value
    }

    /// A date-time, local date-time, local date or local time, if one starts here.
    mutating func parseDateTime() throws(TOMLError) -> TOMLDateTime? {
        let start = pos
        if let year = digits(4) {
            guard skip(ASCII.minus), let month = digits(2), skip(ASCII.minus), let day = digits(2) else {
                pos = start
                return nil
            }
            guard (1...12).contains(month), (1...31).contains(day) else {
                pos = start
                return nil
            }
            guard year >= 1, day <= Self.daysIn(month: month, year: year) else {
                throw error("invalid date \(String(decoding: bytes[start..<pos], as: UTF8.self))", at: start)
            }
            var result = TOMLDateTime(date: .init(year: year, month: month, day: day))
            let afterDate = pos
            if let separator = peek(), separator == 0x54 || separator == 0x74 || separator == ASCII.space {
                pos += 1
                if let time = try parseTime() {
                    result.time = time
                    result.offsetMinutes = parseOffset()
                } else {
                    pos = afterDate  // a date alone; what follows is not part of it
                }
            }
            return result
        }
        if let time = try parseTime() { return TOMLDateTime(time: time) }
        pos = start
        return nil
    }

    /// `HH:MM:SS[.fraction]`, or nil (position unchanged).
    mutating func parseTime() throws(TOMLError) -> TOMLDateTime.Time? {
        let start = pos
        guard let hour = digits(2), skip(ASCII.colon), let minute = digits(2), skip(ASCII.colon),
              let second = digits(2), hour < 24, minute < 60, second < 60
        else {
            pos = start
            return nil
        }
        var nanosecond = 0
        if peek() == ASCII.dot, let first = peek(1), ASCII.isDigit(first) {
            pos += 1
            var scale = 100_000_000
            while let c = peek(), ASCII.isDigit(c) {
                nanosecond += Int(c - ASCII.zero) * scale
                scale /= 10  // past nanoseconds the digits are read and dropped
                pos += 1
            }
        }
        return TOMLDateTime.Time(hour: hour, minute: minute, second: second, nanosecond: nanosecond)
    }

    /// `Z` or `±HH:MM`, or nil (position unchanged).
    mutating func parseOffset() -> Int? {
        guard let c = peek() else { return nil }
        if c == 0x5A || c == 0x7A {
            pos += 1
            return 0
        }
        guard c == ASCII.plus || c == ASCII.minus else { return nil }
        let start = pos
        pos += 1
        guard let hours = digits(2), skip(ASCII.colon), let minutes = digits(2), hours < 24, minutes < 60
        else {
            pos = start
            return nil
        }
        return (c == ASCII.minus ? -1 : 1) * (hours * 60 + minutes)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Digits with single underscores between them; returns the digits without
    /// underscores (empty when none start here).
    mutating func digitRun(_ isDigit: (UInt8) -> Bool) throws(TOMLError) -> [UInt8] {
        var result: [UInt8] = []
        while let c = peek() {
            if isDigit(c) {
                result.append(c)
                pos += 1
            } else if c == ASCII.underscore, !result.isEmpty, let next = peek(1), isDigit(next) {
                pos += 1
            } else if c == ASCII.underscore {
                throw error("an underscore in a number must sit between two digits")
            } else {
                break
            }
        }
        return result
    }

    /// An integer or a float, if one starts here.
    mutating func parseNumber() throws(TOMLError) -> TOMLValue? {
        let start = pos
        let first = peek()
        if first == ASCII.zero, let base = peek(1), base == 0x78 || base == 0x6F || base == 0x62 {
            let (radix, name): (UInt64, String) = base == 0x78 ? (16, "hex") : base == 0x6F ? (8, "octal") : (2, "binary")
            pos += 2
            let run = try digitRun { ASCII.hexValue($0).map { UInt64($0) < radix } ?? false }
            guard !run.isEmpty else { throw error("expected \(name) digits after '0\(Character(Unicode.Scalar(base)))'") }
            var value: UInt64 = 0
            for c in run {
                let (shifted, overflow) = value.multipliedReportingOverflow(by: radix)
                guard !overflow, let digit = ASCII.hexValue(c) else { return try outOfRange(start) }
                value = shifted + UInt64(digit)
            }
            guard value <= UInt64(Int64.max) else { return try outOfRange(start) }
            return .integer(Int64(value))
        }
        var negative = false
        if let sign = first, sign == ASCII.plus || sign == ASCII.minus {
            negative = sign == ASCII.minus
            pos += 1
        }
        guard let lead = peek(), ASCII.isDigit(lead) else {
            pos = start
            return nil
        }
        let integerPart = try digitRun(ASCII.isDigit)
        if integerPart.count > 1, integerPart.first == ASCII.zero {
            throw error("leading zeros are not allowed in a number", at: start)
        }
        var isFloat = false
        var text = integerPart
        if peek() == ASCII.dot {
            pos += 1
            let fraction = try digitRun(ASCII.isDigit)
            guard !fraction.isEmpty else { throw error("expected digits after the decimal point") }
            text += [ASCII.dot] + fraction
            isFloat = true
        }
        if let e = peek(), e == 0x65 || e == 0x45 {
            pos += 1
            text.append(0x65)
            if let sign = peek(), sign == ASCII.plus || sign == ASCII.minus {
                text.append(sign)
                pos += 1
            }
            let exponent = try digitRun(ASCII.isDigit)
            guard !exponent.isEmpty else { throw error("expected digits in the exponent") }
            text += exponent
            isFloat = true
        }
        if isFloat {
            guard let value = Double(String(decoding: text, as: UTF8.self)) else {
                throw error("invalid float", at: start)
            }
            return .float(negative ? -value : value)
        }
        var magnitude: UInt64 = 0
        for c in integerPart {
            let (shifted, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = shifted.addingReportingOverflow(UInt64(c - ASCII.zero))
            guard !overflow, !carry else { return try outOfRange(start) }
            magnitude = sum
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return try outOfRange(start) }
            return .integer(magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude))
        }
        guard magnitude <= UInt64(Int64.max) else { return try outOfRange(start) }
        return .integer(Int64(magnitude))
    }

    func outOfRange(_ start: Int) throws(TOMLError) -> TOMLValue {
        var end = start
        while end < bytes.count, ASCII.isBareKey(bytes[end]) || bytes[end] == ASCII.plus { end += 1 }
        let text = String(decoding: bytes[start..<end], as: UTF8.self)
        throw error("integer \(text) does not fit in 64 bits (\(Int64.min)...\(Int64.max))", at: start)
    }
}

import Foundation
import Testing
@testable import VigilTOML

private func parse(_ text: String) throws -> TOMLTable { try TOMLDocument.parse(text) }

/// The error a document gets; fails the test when it parses.
private func failure(_ bytes: [UInt8]) -> TOMLError? {
    do {
        let table = try TOMLDocument.parse(bytes)
        Issue.record("expected an error, parsed \(table)")
        return nil
    } catch {
        return error
    }
}

private func failure(_ text: String) -> TOMLError? { failure(Array(text.utf8)) }

@Suite("TOML grammar")
struct TOMLGrammarTests {
    @Test func emptyAndCommentOnlyDocuments() throws {
        #expect(try parse("").isEmpty)
        #expect(try parse("\n# only a comment\n\r\n  \t\n").isEmpty)
    }

    @Test func keys() throws {
        let table = try parse("""
            bare_Key-1 = 1
            "quoted \\u00e9" = 2
            'literal "x"' = 3
            "" = 4
            a.b . c = 5
            1234 = 6
            """)
        #expect(table.keys == ["bare_Key-1", "quoted é", "literal \"x\"", "", "a", "1234"])
        #expect(table["a"]?.table?["b"]?.table?["c"] == .integer(5))
        #expect(table["1234"] == .integer(6))
    }

    @Test func strings() throws {
        let table = try parse(#"""
            basic = "tab\t quote\" backslash\\ \u00E9 \U0001F600 \b\f\n\r"
            literal = 'C:\Users\nobody'
            multi = """
            one
            two"""
            trimmed = """\
                  the quick \
                  fox"""
            quotes = """two "" quotes"""""
            raw = '''
            first\n
            second'''''
            """#)
        #expect(table["basic"] == .string("tab\t quote\" backslash\\ é 😀 \u{8}\u{C}\n\r"))
        #expect(table["literal"] == .string("C:\\Users\\nobody"))
        #expect(table["multi"] == .string("one\ntwo"))
        #expect(table["trimmed"] == .string("the quick fox"))
        #expect(table["quotes"] == .string("two \"\" quotes\"\""))
        #expect(table["raw"] == .string("first\\n\nsecond''"))
    }

    @Test func crlfIsReadAsLF() throws {
        let table = try TOMLDocument.parse(Array("a = \"\"\"x\r\ny\"\"\"\r\nb = 1\r\n".utf8))
        #expect(table["a"] == .string("x\ny"))
        #expect(table["b"] == .integer(1))
    }

    @Test func integers() throws {
        let table = try parse("""
            values = [0, +1, -1, 1_000, 0xDEAD_beef, 0o755, 0b1101, -0, 9223372036854775807, -9223372036854775808]
            """)
        #expect(table["values"] == .array([
            .integer(0), .integer(1), .integer(-1), .integer(1000), .integer(0xDEADBEEF), .integer(0o755),
            .integer(0b1101), .integer(0), .integer(.max), .integer(.min),
        ]))
    }

    @Test func floats() throws {
        let table = try parse("f = [1.5, -0.0, 1e3, 2E-2, 6.02e+23, 1_0.0_1, inf, -inf, +inf, 1e400]\nn = [nan, -nan]")
        #expect(table["f"] == .array([
            .float(1.5), .float(-0.0), .float(1000), .float(0.02), .float(6.02e23), .float(10.01),
            .float(.infinity), .float(-.infinity), .float(.infinity), .float(.infinity),
        ]))
        #expect(table["f"]?.array?[1].float?.sign == .minus)
        #expect(table["n"]?.array?.allSatisfy { $0.float?.isNaN == true } == true)
    }

    @Test func dateTimes() throws {
        let table = try parse("""
            odt = 1979-05-27T00:32:00.999999-07:30
            z = 1979-05-27t07:32:00z
            ldt = 1979-05-27 07:32:00
            ld = 2000-02-29
            lt = 07:32:00.123456789123
            """)
        let odt = try #require(table["odt"]?.dateTime)
        #expect(odt.date == .init(year: 1979, month: 5, day: 27))
        #expect(odt.time == .init(hour: 0, minute: 32, second: 0, nanosecond: 999_999_000))
        #expect(odt.offsetMinutes == -450)
        #expect(odt.description == "1979-05-27T00:32:00.999999-07:30")
        #expect(table["z"]?.dateTime?.description == "1979-05-27T07:32:00Z")
        #expect(table["ldt"]?.dateTime?.offsetMinutes == nil)
        #expect(table["ldt"]?.dateTime?.description == "1979-05-27T07:32:00")
        #expect(table["ld"]?.dateTime?.time == nil)
        #expect(table["lt"]?.dateTime?.time?.nanosecond == 123_456_789)
        #expect(table["lt"]?.dateTime?.date == nil)
    }

    @Test func arraysAndInlineTables() throws {
        let table = try parse("""
            mixed = [1, 'a', 2.5, true, [], {x = 1},]
            spread = [
              1, # one
              2
            ]
            point = { x = 1, y.z = 2, y.w = "s" }
            """)
        #expect(table["mixed"]?.array?.count == 6)
        #expect(table["spread"] == .array([.integer(1), .integer(2)]))
        let point = try #require(table["point"]?.table)
        #expect(point["y"]?.table?["w"] == .string("s"))
    }

    @Test func tablesAndArraysOfTables() throws {
        let table = try parse("""
            [a.b.c]
            x = 1
            [a]
            y = 2
            [[p]]
            n = 1
            [p.sub]
            m = 2
            [[p]]
            n = 3
            [[p.list]]
            [fruit]
            apple.color = "red"
            [fruit.apple.texture]
            smooth = true
            """)
        #expect(table["a"]?.table?["b"]?.table?["c"]?.table?["x"] == .integer(1))
        #expect(table["a"]?.table?["y"] == .integer(2))
        let p = try #require(table["p"]?.array)
        #expect(p.count == 2)
        #expect(p[0].table?["sub"]?.table?["m"] == .integer(2))
        #expect(p[1].table?["list"]?.array?.count == 1)
        #expect(table["fruit"]?.table?["apple"]?.table?["texture"]?.table?["smooth"] == .boolean(true))
    }

    /// Whatever is defined is defined once, and a value is never reopened.
    @Test(arguments: [
        ("a = 1\na = 2", "'a' is defined twice"),
        ("a = 1\na.b = 2", "it is already an integer"),
        ("[a]\n[a]", "table [a] is defined twice"),
        ("[a]\nb = 1\n[a.b]", "'a.b' is already an integer"),
        ("a = {}\n[a]", "is already a table"),
        ("a = {b = 1}\na.c = 2", "it is already a table"),
        ("a = []\n[[a]]", "is already an array"),
        ("[[a]]\n[a]", "is already an array of tables"),
        ("[a]\n[[a]]", "[a] is a table"),
        ("[fruit]\napple.color = 1\n[fruit.apple]", "table [fruit.apple] is defined twice"),
        ("[a.b.c]\n[a]\nb.c.t = 1", "it is defined elsewhere"),
        ("a.b = 1\n[a]", "table [a] is defined twice"),
        ("x = {a = 1, a = 2}", "defined twice in an inline table"),
        ("x = {a = {}, a.b = 1}", "in an inline table"),
    ])
    func redefinitionsAreRefused(text: String, message: String) throws {
        let error = try #require(failure(text))
        #expect(error.message.contains(message), "\(error)")
    }

    @Test(arguments: [
        ("[[[", 1, 3, "expected a key, found '['"),
        ("[[[]]]", 1, 3, "expected a key, found '['"),
        ("a = \"open", 1, 5, "the string is never closed"),
        ("a = 1\nb = 'open\nc = 2", 2, 5, "the string is not closed on its line"),
        ("a = [1,\n2", 1, 5, "the array is never closed"),
        ("a = 1\nb = \"\\x41\"", 2, 6, "invalid escape '\\x'"),
        ("a = \"\\uD800\"", 1, 6, "not a Unicode scalar value"),
        ("a = \"\\U00110000\"", 1, 6, "not a Unicode scalar value"),
        ("a = \"\\u12\"", 1, 6, "must be followed by 4 hex digits"),
        ("a = 1 b = 2", 1, 7, "expected the end of the line"),
        ("a = 01", 1, 5, "leading zeros"),
        ("a = 1__0", 1, 6, "underscore"),
        ("a = 1.", 1, 7, "digits after the decimal point"),
        ("a = 9223372036854775808", 1, 5, "does not fit in 64 bits"),
        ("a = -9223372036854775809", 1, 5, "does not fit in 64 bits"),
        ("a = 0x8000000000000000", 1, 5, "does not fit in 64 bits"),
        ("a = 1979-02-29", 1, 5, "invalid date"),
        ("a = [1 2]", 1, 8, "expected ',' or ']'"),
        ("a = {b = 1,}", 1, 12, "expected a key"),
        ("a = {b = 1\n}", 1, 11, "must stay on one line"),
        ("é = 1", 1, 1, "expected a key, a [table] header or a comment"),
        ("# bell \u{7}", 1, 8, "control character U+0007"),
        ("a = 'x\u{0}'", 1, 7, "control character U+0000"),
        ("a = 1\rb = 2", 1, 6, "control character U+000D"),
        ("\u{FEFF}a = 1", 1, 1, "byte order mark"),
    ])
    func errorsSayWhatAndWhere(text: String, line: Int, column: Int, message: String) throws {
        let error = try #require(failure(text))
        #expect(error.message.contains(message), "\(error)")
        #expect((error.line, error.column) == (line, column), "\(error)")
        #expect(error.description == "\(error.message) at line \(line), column \(column)")
    }

    @Test func invalidUTF8IsRefusedWithItsPlace() throws {
        for (bytes, column): ([UInt8], Int) in [([0x61, 0x20, 0x3D, 0x20, 0x22, 0xFF, 0x22], 6), ([0x23, 0xC0, 0xAF], 2),
                                ([0x23, 0xED, 0xA0, 0x80], 2), ([0x23, 0xF4, 0x90, 0x80, 0x80], 2), ([0x23, 0xE2, 0x82], 2)] {
            let error = try #require(failure(bytes))
            #expect(error.message.contains("not valid UTF-8"), "\(error)")
            #expect(error.line == 1 && error.column == column, "\(error)")
        }
        #expect(try TOMLDocument.parse([0x61, 0x3D, 0x22, 0xF0, 0x9F, 0x98, 0x80, 0x22])["a"] == .string("😀"))
    }

    @Test func nestingIsBounded() throws {
        let limit = TOMLDocument.maximumDepth
        func arrays(_ depth: Int) -> String { "a = " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) }
        // The key is one level, each array one more.
        _ = try parse(arrays(limit - 1))
        for text in [arrays(limit), arrays(100_000), "a = " + String(repeating: "{a=", count: 10_000),
                     "[" + Array(repeating: "a", count: 10_000).joined(separator: ".") + "]"] {
            let error = try #require(failure(text))
            #expect(error.message == "nested deeper than \(limit) levels")
        }
    }

    /// The deepest documents allowed parse on a thread with a 1 MiB stack
    /// (a debug build needs under 512 KiB): the recursion's frames stay small.
    @Test func deepestDocumentsFitASmallStack() async {
        let limit = TOMLDocument.maximumDepth
        let documents = [
            "a = " + String(repeating: "[", count: limit - 1) + String(repeating: "]", count: limit - 1),
            "a = " + String(repeating: "{a=", count: limit / 2 - 1) + "1" + String(repeating: "}", count: limit / 2 - 1),
        ]
        let parsed = await withCheckedContinuation { (done: CheckedContinuation<Int, Never>) in
            let thread = Thread {
                done.resume(returning: documents.filter { (try? TOMLDocument.parse($0)) != nil }.count)
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        #expect(parsed == documents.count)
    }

    @Test func sizeIsBounded() throws {
        let limit = TOMLDocument.maximumSize
        _ = try parse("a = '" + String(repeating: "x", count: limit - 6) + "'")
        let error = try #require(failure("a = '" + String(repeating: "x", count: limit - 5) + "'"))
        #expect(error.message == "larger than 1048576 bytes (1048577 bytes)")
    }

    /// Every prefix of a document full of constructs, and every one-byte
    /// change of it, gives a table or an error; none traps.
    @Test func noInputTraps() {
        let document = Array(#"""
            [a.b]
            s = "x\u00e9\"" # c
            m = """
            l\
              x""" 
            i = [0x1_F, -0, 1e-3, inf, 1979-05-27T07:32:00.5+01:00, {p.q = 'r'}]
            [[t]]
            d = 07:32:00
            """#.utf8)
        let replacements: [UInt8] = [0x00, 0x0A, 0x0D, 0x22, 0x27, 0x2E, 0x3D, 0x5B, 0x5D, 0x7B, 0x7D, 0x5C, 0xFF, 0xC3]
        var parsed = 0
        for end in 0...document.count where (try? TOMLDocument.parse(Array(document[0..<end]))) != nil { parsed += 1 }
        for index in document.indices {
            for byte in replacements {
                var changed = document
                changed[index] = byte
                if (try? TOMLDocument.parse(changed)) != nil { parsed += 1 }
            }
        }
        #expect(parsed > 0)
    }
}

import Foundation
import Testing
@testable import VigilProtocol

/// The hand-written coding of the frequent frames (`HotFrames`, `HeaderReader`)
/// against Foundation's generic coders, which it replaced on the hot path.
@Suite("Hot frames")
struct HotFramesTests {
    // MARK: Differential: random valid frames

    @Test("encoding matches JSONEncoder byte for byte, and decoding matches JSONDecoder", arguments: 0..<8)
    func differential(seed: Int) throws {
        var random = SeededRandom(seed: UInt64(seed) &+ 0x9E37_79B9)
        for _ in 0..<250 {
            let id: Int? = random.chance(0.4) ? nil : random.id()
            try same(Acknowledge(seq: random.uint64()), id: id)
            try same(FinishedProcessing(ack: random.chance(0.5) ? nil : random.uint64()), id: id)
            try same(Done(), id: id)
            try same(EventAccepted(seq: random.uint64(), disposition: random.string()), id: id)
            try same(DeadlineChanged(deadline: random.chance(0.3) ? nil : random.uint64()), id: id)
            try same(
                WakeRequest(
                    app: random.string(), kind: random.chance(0.3) ? nil : random.string(),
                    attributes: random.chance(0.3) ? nil : random.object(depth: 0)),
                id: id)
            try same(
                EventMessage(seq: random.uint64(), kind: random.string(), attributes: random.object(depth: 0), redelivered: random.chance(0.5)),
                id: id)
        }
    }

    /// `message` encodes as JSONEncoder encodes it, and both decoders read it back equal.
    private func same<M: Message & Equatable>(_ message: M, id: Int?) throws {
        let fast = try #require(HotFrames.header(message, id: id), "\(M.self) is a hot frame")
        let generic = MessageCodec.genericHeader(message, id: id)
        #expect(fast == generic, "\(M.self): \(String(decoding: fast, as: UTF8.self)) vs \(String(decoding: generic, as: UTF8.self))")
        let incoming = try IncomingMessage(frame: Frame(header: generic))
        #expect(incoming.type == M.type && incoming.id == id)
        let hot: M = try #require(try HotFrames.decode(incoming))
        #expect(hot == message)
        #expect(try incoming.genericDecode(M.self) == hot)
    }

    @Test("the envelope is read as JSONDecoder reads it, from headers with any members", arguments: 0..<4)
    func envelopes(seed: Int) throws {
        var random = SeededRandom(seed: UInt64(seed) &+ 77)
        for _ in 0..<300 {
            var object = random.object(depth: 1)
            object["type"] = .string(random.string())
            let id: Int? = random.chance(0.5) ? random.id() : nil
            let header = try #require(HotFrames.header(WakeRequest(app: "x", attributes: object), id: id))
            // The attributes' object as the header itself, with the id spliced in.
            let members = try IncomingMessage(frame: Frame(header: header)).members
            let inner = Array(header[members["attributes"]!.value])
            let spliced = id.map { Array(#"{"id":\#($0),"#.utf8) + inner.dropFirst() } ?? inner
            let message = try IncomingMessage(frame: Frame(header: spliced))
            let generic = try #require(MessageCodec.genericEnvelope(spliced))
            #expect(message.type == generic.type)
            #expect(message.id.map(Int64.init) == generic.id)
        }
    }

    // MARK: Malformed headers

    @Test("a header that is not strict JSON is a malformed frame naming why", arguments: [
        (#"{"type":"ack","seq":1,}"#, "expected a member name"),
        (#"{"type":"ack","seq":[1,]}"#, "expected a JSON value"),
        (#"{"type":"a\x"}"#, "unknown escape"),
        (#"{"type":"\ud800"}"#, "lone surrogate"),
        (#"{"type":"\udc00x"}"#, "lone surrogate"),
        (#"{"type":"\u12"}"#, "four hex digits"),
        (#"{"type":"ack","type":"ack"}"#, "'type' appears twice"),
        (#"{"type":"ack","seq":01}"#, "leading zero"),
        (#"{"type":"ack","seq":1.}"#, "malformed number"),
        (#"{"type":"ack","seq":-}"#, "malformed number"),
        (#"{"type":"ack","seq":1e}"#, "malformed number"),
        (#"{"type":"ack","seq":+1}"#, "expected a JSON value"),
        (#"{"type":"ack","seq":NaN}"#, "expected a JSON value"),
        (#"{"type":"ack","seq":tru}"#, "expected a JSON value"),
        (#"{"type":"ack"} x"#, "unexpected bytes after"),
        (#"{"type":"ack"}{}"#, "unexpected bytes after"),
        (#"{"type":"ack""#, "ends early"),
        (#"{"type":"ack"#, "ends inside a string"),
        (#"{"type" "ack"}"#, "':' after a member name"),
        (#"{type:"ack"}"#, "member name in quotes"),
        ("[1,2]", "expected a JSON object"),
        ("\u{FEFF}{\"type\":\"ack\"}", "expected a JSON object"),
        ("{\"type\":\"a\u{01}\"}", "control character"),
        ("{\"type\":\"a\tb\"}", "control character"),
        (#"{"id":1}"#, "no \"type\""),
        (#"{"type":7}"#, "not a string"),
        (#"{"type":null}"#, "not a string"),
    ])
    func malformed(header: String, reason: String) throws {
        let error = try #require(throws: ProtocolError.self) { try IncomingMessage(frame: Frame(header: Array(header.utf8))) }
        #expect(error.code == .malformedFrame, "\(header): \(error)")
        #expect(error.message.contains(reason), "\(header): \(error.message)")
    }

    @Test("nesting is limited to 512 levels, as JSONDecoder limits it")
    func depth() throws {
        func header(_ levels: Int) -> [UInt8] {
            Array((#"{"type":"x","a":"# + String(repeating: "[", count: levels) + String(repeating: "]", count: levels) + "}").utf8)
        }
        #expect(throws: Never.self) { try IncomingMessage(frame: Frame(header: header(511))) }
        #expect(MessageCodec.genericEnvelope(header(511)) != nil)
        let error = try #require(throws: ProtocolError.self) { try IncomingMessage(frame: Frame(header: header(512))) }
        #expect(error.message.contains("nested deeper than 512"), "\(error.message)")
        #expect(MessageCodec.genericEnvelope(header(512)) == nil)
        // 64 KiB of brackets: refused without running out of stack.
        #expect(throws: ProtocolError.self) { try IncomingMessage(frame: Frame(header: header(32_000))) }
    }

    @Test("whitespace, escapes and every kind of value are taken")
    func wellFormed() throws {
        let header = " {\n\t\"type\" : \"ev\\u0065nt\\/\\\"\\\\\\b\\f\\n\\r\\t\\ud83d\\ude00\" , \"id\":2.0e0, \"x\":[true,false,null,-0,1.5E-3,{}, []]} \r\n"
        let message = try IncomingMessage(frame: Frame(header: Array(header.utf8)))
        #expect(message.type == "event/\"\\\u{8}\u{c}\n\r\t😀")
        #expect(message.id == 2)
        #expect(MessageCodec.genericEnvelope(Array(header.utf8))?.type == message.type)
    }

    // MARK: Values of the hot frames

    @Test("integers are read exactly as written", arguments: [
        ("0", "0"), ("-0", "0"), ("1e3", "1000"), ("2.0", "2"), ("100e-2", "1"), ("0.5e1", "5"), ("1E+2", "100"),
        ("18446744073709551615", "18446744073709551615"), ("1.8446744073709551615e19", "18446744073709551615"),
        ("0.5", "fraction"), ("1e-1", "fraction"), ("10000000000000000001e-1", "fraction"), ("5e-1", "fraction"),
        ("1e400", "huge"), ("1" + String(repeating: "0", count: 45), "huge"), ("1e-400", "fraction"),
    ])
    func exactIntegers(literal: String, expected: String) {
        let value = Array(literal.utf8).withUnsafeBufferPointer { IncomingMessage.exactInteger($0) }
        switch value {
        case let .integer(number): #expect("\(number)" == expected, "\(literal)")
        case .fraction: #expect(expected == "fraction", "\(literal)")
        case .huge: #expect(expected == "huge", "\(literal)")
        }
    }

    @Test("a hot frame with a bad member is an invalid argument naming it, as the generic decoder names it", arguments: [
        (#"{"type":"ack","id":4,"seq":"three"}"#, "ack: field 'seq' has the wrong type"),
        (#"{"type":"ack","id":4}"#, "ack: missing field 'seq'"),
        (#"{"type":"ack","id":4,"seq":-1}"#, "ack: field 'seq' is -1; it must be an integer in 0…2^64-1"),
        (#"{"type":"ack","id":4,"seq":1.5}"#, "ack: field 'seq' is 1.5; it must be an integer in 0…2^64-1"),
        (#"{"type":"ack","id":4,"seq":18446744073709551616}"#, "ack: field 'seq' is 18446744073709551616; it must be an integer in 0…2^64-1"),
        (#"{"type":"ack","id":4,"seq":null}"#, "ack: field 'seq' is null; a value is required"),
    ])
    func badAck(header: String, message: String) throws {
        let incoming = try IncomingMessage(frame: Frame(header: Array(header.utf8)))
        #expect(throws: ProtocolError(.invalidArgument, message, id: 4)) { try incoming.decode(Acknowledge.self) }
        // The generic decoder refuses it too (with its own words).
        #expect(throws: ProtocolError.self) { try incoming.genericDecode(Acknowledge.self) }
    }

    @Test("event and wake members of the wrong kind are refused by both decoders", arguments: [
        #"{"type":"event","seq":1,"kind":"k","attributes":[],"redelivered":false}"#,
        #"{"type":"event","seq":1,"kind":"k","attributes":{},"redelivered":0}"#,
        #"{"type":"event","seq":1,"kind":2,"attributes":{},"redelivered":false}"#,
        #"{"type":"event","seq":1,"kind":"k","attributes":{"x":1e400},"redelivered":false}"#,
        #"{"type":"event","seq":1,"kind":"k","redelivered":false}"#,
    ])
    func badEvent(header: String) throws {
        let incoming = try IncomingMessage(frame: Frame(header: Array(header.utf8)))
        let error = try #require(throws: ProtocolError.self) { try incoming.decode(EventMessage.self) }
        #expect(error.code == .invalidArgument, "\(error)")
        #expect(throws: ProtocolError.self) { try incoming.genericDecode(EventMessage.self) }
    }

    @Test("a wake's optional members may be absent or null; nested repeated names keep the first, as JSONDecoder")
    func wakeOptionals() throws {
        for header in [#"{"type":"wake","app":"a"}"#, #"{"type":"wake","app":"a","kind":null,"attributes":null}"#] {
            let incoming = try IncomingMessage(frame: Frame(header: Array(header.utf8)))
            #expect(try incoming.decode(WakeRequest.self) == WakeRequest(app: "a"))
            #expect(try incoming.genericDecode(WakeRequest.self) == WakeRequest(app: "a"))
        }
        let header = #"{"type":"wake","app":"a","attributes":{"k":1,"k":2}}"#
        let incoming = try IncomingMessage(frame: Frame(header: Array(header.utf8)))
        #expect(try incoming.decode(WakeRequest.self) == incoming.genericDecode(WakeRequest.self))
        #expect(try incoming.decode(WakeRequest.self).attributes == ["k": 1])
    }
}

/// A small deterministic generator (SplitMix64), so a failure reproduces.
struct SeededRandom {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    mutating func chance(_ p: Double) -> Bool { Double(next() % 10_000) < p * 10_000 }

    mutating func uint64() -> UInt64 {
        switch below(4) {
        case 0: UInt64(below(100))
        case 1: [0, 1, UInt64.max, UInt64(Int64.max), 1 << 53, (1 << 53) + 1][below(6)]
        default: next()
        }
    }

    mutating func id() -> Int {
        switch below(3) {
        case 0: below(1000)
        case 1: [Int.min, Int.max, -1, 0][below(4)]
        default: Int(truncatingIfNeeded: next())
        }
    }

    mutating func string() -> String {
        let pieces = ["a", "Z", "0", " ", "/", "\"", "\\", "\n", "\t", "\r", "\u{8}", "\u{c}", "\u{0}", "\u{1f}", "\u{7f}", "é", "€", "😀",
                      "\u{2028}", "\u{FEFF}", "kind.x", "org.example"]
        return (0..<below(8)).map { _ in pieces[below(pieces.count)] }.joined()
    }

    mutating func number() -> Double {
        switch below(5) {
        case 0: Double(below(1000)) - 500
        case 1: [0.5, -0.25, 1e-7, 1e21, 1e15, 123456789.125, 9007199254740992, -1e300, .leastNonzeroMagnitude][below(9)]
        case 2: Double(Int64(truncatingIfNeeded: next()))
        case 3: Double(bitPattern: next() & 0x7FEF_FFFF_FFFF_FFFF)  // finite, any magnitude
        default: Double(below(1_000_000)) / 1000
        }
    }

    mutating func value(depth: Int) -> JSONValue {
        switch below(depth > 2 ? 4 : 6) {
        case 0: .null
        case 1: .bool(chance(0.5))
        case 2: .number(number())
        case 3: .string(string())
        case 4: .array((0..<below(4)).map { _ in value(depth: depth + 1) })
        default: .object(object(depth: depth + 1))
        }
    }

    mutating func object(depth: Int) -> [String: JSONValue] {
        var members: [String: JSONValue] = [:]
        for _ in 0..<below(5) { members[string()] = value(depth: depth) }
        return members
    }
}

import Foundation
import Testing
import VigilProtocol

/// Issue 10, items 11 and 14: every integer member of a request is range-checked
/// before anything uses it, and a header must be strict UTF-8 throughout.
@Suite("Request validation")
struct RequestValidationTests {
    private func incoming(_ header: String) throws(ProtocolError) -> IncomingMessage {
        try IncomingMessage(frame: Frame(header: Array(header.utf8)))
    }

    private func incoming(bytes: [UInt8]) throws(ProtocolError) -> IncomingMessage {
        try IncomingMessage(frame: Frame(header: bytes))
    }

    /// One request of each type that has integer members, with a valid header to break.
    struct Case: CustomStringConvertible, Sendable {
        var type: String
        var field: String
        /// The header with `VALUE` where the member's value goes.
        var template: String
        var decode: @Sendable (IncomingMessage) throws -> Void
        var description: String { "\(type).\(field)" }
    }

    static let cases: [Case] = [
        Case(type: "log", field: "limit", template: #"{"type":"log","id":4,"limit":VALUE}"#) { try $0.checkIntegerFields(); _ = try $0.decode(LogRequest.self) },
        Case(type: "ack", field: "seq", template: #"{"type":"ack","seq":VALUE}"#) { try $0.checkIntegerFields(); _ = try $0.decode(Acknowledge.self) },
        Case(type: "finishedProcessing", field: "ack", template: #"{"type":"finishedProcessing","id":4,"ack":VALUE}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(FinishedProcessing.self)
        },
        Case(type: "endBackgroundTask", field: "task", template: #"{"type":"endBackgroundTask","id":4,"task":VALUE}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(EndBackgroundTask.self)
        },
        Case(type: "openSession", field: "connectionID", template: #"{"type":"openSession","id":4,"connectionID":VALUE,"protocol":"a.b"}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(OpenSession.self)
        },
        Case(type: "write", field: "session", template: #"{"type":"write","id":4,"session":VALUE}"#) { try $0.checkIntegerFields(); _ = try $0.decode(WriteToSession.self) },
        Case(type: "closeSession", field: "session", template: #"{"type":"closeSession","id":4,"session":VALUE}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(CloseSession.self)
        },
        Case(type: "ble.respond", field: "request", template: #"{"type":"ble.respond","id":4,"request":VALUE}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(RespondToRequest.self)
        },
        Case(
            type: "ble.startAdvertising", field: "advertisement.appearance",
            template: #"{"type":"ble.startAdvertising","id":4,"advertisement":{"appearance":VALUE}}"#
        ) { try $0.checkIntegerFields(); _ = try $0.decode(StartAdvertising.self) },
        Case(
            type: "ble.read", field: "instance",
            template: #"{"type":"ble.read","id":4,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e","instance":VALUE}"#
        ) { try $0.checkIntegerFields(); _ = try $0.decode(ReadCharacteristic.self) },
        Case(
            type: "ble.write", field: "instance",
            template: #"{"type":"ble.write","id":4,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e","instance":VALUE,"withResponse":true}"#
        ) { try $0.checkIntegerFields(); _ = try $0.decode(WriteCharacteristic.self) },
        Case(
            type: "ble.notify", field: "instance",
            template: #"{"type":"ble.notify","id":4,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e","instance":VALUE,"enabled":true}"#
        ) { try $0.checkIntegerFields(); _ = try $0.decode(SetNotify.self) },
        Case(type: "hello", field: "versions[1]", template: #"{"type":"hello","versions":[1,VALUE],"role":"control"}"#) {
            try $0.checkIntegerFields()
            _ = try $0.decode(Hello.self)
        },
    ]

    static let outOfRange = [
        "-1", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "18446744073709551616", "1.5", "-0.5", "1e300", "true",
        #""7""#, "[1]", #"{"n":1}"#,
    ]

    @Test("an out-of-range or non-integer member is an invalidArgument naming member, value and range", arguments: cases)
    func outOfRangeMembers(_ test: Case) throws {
        for value in Self.outOfRange {
            // ack's seq is a UInt64: 2^63 fits it.
            if test.field == "seq" || test.field == "ack", value == "9223372036854775808" { continue }
            let message = try incoming(test.template.replacingOccurrences(of: "VALUE", with: value))
            let error = try #require(throws: ProtocolError.self, "\(test) = \(value)") { try test.decode(message) }
            #expect(error.code == .invalidArgument, "\(test) = \(value): \(error)")
            #expect(error.message.contains("'\(test.field)'"), "\(test) = \(value): \(error.message)")
            #expect(error.message.contains("…"), "\(test) = \(value): no range in \(error.message)")
            #expect(error.id == message.id)
        }
    }

    @Test("the message is exact for the crash of item 11")
    func negativeLimit() throws {
        let message = try incoming(#"{"type":"log","id":3,"limit":-1}"#)
        #expect(throws: ProtocolError(.invalidArgument, "log: field 'limit' is -1; it must be an integer in 0…2^63-1", id: 3)) {
            try message.checkIntegerFields()
        }
        let huge = try incoming(#"{"type":"log","id":3,"limit":1.5}"#)
        #expect(throws: ProtocolError(.invalidArgument, "log: field 'limit' is 1.5; it must be an integer in 0…2^63-1", id: 3)) {
            try huge.checkIntegerFields()
        }
    }

    /// Checked as the daemon does, then decoded.
    private func checked<M: Message>(_ header: String, _: M.Type) throws -> M {
        let message = try incoming(header)
        try message.checkIntegerFields()
        return try message.decode(M.self)
    }

    @Test("values at the bounds, integral floats and absent optional members decode")
    func inRange() throws {
        #expect(try checked(#"{"type":"log","limit":0}"#, LogRequest.self).limit == 0)
        #expect(try checked(#"{"type":"log","limit":9223372036854775807}"#, LogRequest.self).limit == Int.max)
        #expect(try checked(#"{"type":"log","limit":1e3}"#, LogRequest.self).limit == 1000)
        #expect(try checked(#"{"type":"log"}"#, LogRequest.self).limit == nil)
        #expect(try checked(#"{"type":"log","limit":null}"#, LogRequest.self).limit == nil)
        #expect(try checked(#"{"type":"ack","seq":18446744073709551615}"#, Acknowledge.self).seq == UInt64.max)
        #expect(try checked(#"{"type":"ack","seq":0}"#, Acknowledge.self).seq == 0)
        #expect(try checked(#"{"type":"finishedProcessing","ack":18446744073709551615}"#, FinishedProcessing.self).ack == UInt64.max)
        #expect(try checked(#"{"type":"finishedProcessing"}"#, FinishedProcessing.self).ack == nil)
        #expect(try checked(#"{"type":"finishedProcessing","ack":null}"#, FinishedProcessing.self).ack == nil)
        let advert = try checked(#"{"type":"ble.startAdvertising","advertisement":{"appearance":65535}}"#, StartAdvertising.self)
        #expect(advert.advertisement.appearance == 65535)
        #expect(try checked(#"{"type":"ble.startAdvertising","advertisement":{}}"#, StartAdvertising.self).advertisement.appearance == nil)
        #expect(try checked(#"{"type":"hello","versions":[],"role":"app"}"#, Hello.self).versions == [])
    }

    @Test("a number no decoder holds (1e400) is refused, with the request's id")
    func unreadableNumber() throws {
        let message = try incoming(#"{"type":"log","id":6,"limit":1e400}"#)
        let error = try #require(throws: ProtocolError.self) { try message.checkIntegerFields() }
        #expect(error.code == .invalidArgument && error.id == 6, "\(error)")
        #expect(error.message.contains("1e400"), "\(error.message)")
    }

    @Test("a missing required integer is still named as missing")
    func missingInteger() throws {
        #expect(throws: ProtocolError(.invalidArgument, "closeSession: missing field 'session'", id: 1)) {
            try checked(#"{"type":"closeSession","id":1}"#, CloseSession.self)
        }
    }

    @Test("the table names every request with integer members, and only requests")
    func table() {
        let expected: Set = [
            "hello", "endBackgroundTask", "ack", "finishedProcessing", "log", "openSession", "write", "closeSession", "ble.startAdvertising",
            "ble.respond", "ble.read", "ble.write", "ble.notify",
        ]
        #expect(Set(IntegerField.requests.keys) == expected)
        #expect(Set(Self.cases.map(\.type)) == expected, "a case per request")
    }

    // MARK: id

    @Test("a request id that is not a 64-bit integer is a malformed frame naming it", arguments: [
        "1.5", #""7""#, "9223372036854775808", "-9223372036854775809", "true", "[1]", "1e300",
    ])
    func badID(value: String) throws {
        let error = try #require(throws: ProtocolError.self) { try incoming(#"{"type":"status","id":\#(value)}"#) }
        #expect(error.code == .malformedFrame)
        #expect(error.message.contains("'id'") && error.message.contains("-2^63…2^63-1"), "\(error.message)")
    }

    @Test("ids at the bounds, integral floats and null are taken")
    func goodIDs() throws {
        #expect(try incoming(#"{"type":"status","id":-9223372036854775808}"#).id == Int.min)
        #expect(try incoming(#"{"type":"status","id":9223372036854775807}"#).id == Int.max)
        #expect(try incoming(#"{"type":"status","id":2.0}"#).id == 2)
        #expect(try incoming(#"{"type":"status","id":null}"#).id == nil)
    }

    // MARK: UTF-8

    static let invalidUTF8: [(String, [UInt8])] = [
        ("a stray 0xFF", [0xFF]),
        ("overlong '/'", [0xC0, 0xAF]),
        ("overlong NUL", [0xE0, 0x80, 0x80]),
        ("an encoded high surrogate", [0xED, 0xA0, 0x80]),
        ("an encoded low surrogate", [0xED, 0xBF, 0xBF]),
        ("above U+10FFFF", [0xF4, 0x90, 0x80, 0x80]),
        ("a truncated sequence", [0xE2, 0x82]),
        ("a lone continuation byte", [0x80]),
    ]

    @Test("invalid UTF-8 anywhere in the header is a malformed frame", arguments: invalidUTF8.indices)
    func invalidUTF8Anywhere(index: Int) throws {
        let (name, bad) = Self.invalidUTF8[index]
        for (before, after) in [
            (#"{"type":"hello","versions":[1],"role":"control","client":""#, #""}"#),  // a member that is decoded
            (#"{"type":"status","id":1,"future":""#, #""}"#),  // a member nobody reads
            (#"{"type":"status","id":1,""#, #"":1}"#),  // a key
            (#"{"type":"status"} "#, ""),  // after the object
        ] {
            let bytes = Array(before.utf8) + bad + Array(after.utf8)
            let error = try #require(throws: ProtocolError.self, "\(name) in \(before)") { try incoming(bytes: bytes) }
            #expect(error.code == .malformedFrame, "\(name): \(error)")
            #expect(error.message.contains("UTF-8 (byte \(before.utf8.count) "), "\(name): \(error.message)")
        }
    }

    @Test("well-formed multi-byte UTF-8 is taken")
    func validUTF8() throws {
        let message = try incoming("{\"type\":\"hello\",\"versions\":[1],\"role\":\"control\",\"client\":\"é € 𝄞 \u{10FFFF}\"}")
        #expect(try message.decode(Hello.self).client == "é € 𝄞 \u{10FFFF}")
    }

    // MARK: Replies and event kinds

    @Test("backgroundTimeRemaining sends seconds: null when unlimited")
    func unlimitedSeconds() throws {
        let header = MessageCodec.frame(BackgroundTimeRemaining(seconds: nil), id: 2).header
        let object = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])
        #expect(object["seconds"] is NSNull, "header: \(String(decoding: header, as: UTF8.self))")
        #expect(String(decoding: header, as: UTF8.self) == #"{"id":2,"seconds":null,"type":"reply"}"#)
    }

    @Test("a test wake's kind needs the mode its real source needs", arguments: [
        ("accessory.connected", BackgroundMode.externalAccessory), ("session.data", .externalAccessory),
        ("ble.notification", .bluetoothCentral), ("ble.state", .bluetoothCentral),
        ("ble.peripheral.read", .bluetoothPeripheral),
    ])
    func wakeModes(kind: String, mode: BackgroundMode) {
        #expect(BackgroundMode(wakingFor: kind) == mode)
    }

    @Test("other kinds need no mode")
    func noWakeMode() {
        for kind in ["test", "overflow", "custom.thing", "accessory", "blex"] {
            #expect(BackgroundMode(wakingFor: kind) == nil, "\(kind)")
        }
    }
}

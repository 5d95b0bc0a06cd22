import Foundation
import Testing
import VigilProtocol

@Suite("Message codec")
struct MessageCodecTests {
    @Test("every message survives the wire, with its id and body", arguments: MessageSamples.all.indices)
    func roundTrip(index: Int) throws {
        try expectRoundTrip(MessageSamples.all[index])
    }

    private func expectRoundTrip<M: Message & Equatable>(_ message: M) throws {
        // An error carries its own `id` (the request it answers): the frame's must be that one.
        let id = if let error = message as? ProtocolError { error.id } else { 5 }
        let frame = MessageCodec.frame(message, id: id, body: [0, 1, 255])
        var decoder = FrameDecoder()
        decoder.append(frame.encoded())
        let incoming = try IncomingMessage(frame: try #require(try decoder.next()))
        #expect(incoming.type == M.type)
        #expect(incoming.id == id)
        #expect(incoming.body == [0, 1, 255])
        #expect(try incoming.decode(M.self) == message)
    }

    @Test("type and id sit flat beside the message's own members", arguments: MessageSamples.all.indices)
    func flatHeader(index: Int) throws {
        let message = MessageSamples.all[index]
        let object = try headerObject(MessageCodec.frame(message, id: 12))
        #expect(object["type"] as? String == type(of: message).type)
        #expect(object["id"] as? Int == 12)
        #expect(object["message"] == nil || message is ProtocolError, "no nesting under a wrapper key")
    }

    @Test("an event's header is written as JSONEncoder wrote it (sorted keys, no escaped slashes), byte for byte")
    func eventHeaderFastPath() throws {
        let attributes: [[String: JSONValue]] = [
            [:],
            ["peripheral": "C0:DE:00:00:00:01", "service": "0000180d-0000-1000-8000-00805f9b34fb", "framing": "u16le"],
            ["n": 1, "half": .number(0.5), "negative": -3, "big": 123_456_789_012, "huge": .number(1e20), "tiny": .number(0.00001),
             "ok": true, "none": .null],
            ["text": "a \"quoted\" \\ back/slash\n\t\u{01}\u{1F} é ✓ 𝄞", "Zed": "upper first", "nested": .object(["b": .array([1, "x", .null]), "a": .object([:])])],
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for (index, attributes) in attributes.enumerated() {
            for id in [nil, 7] as [Int?] {
                let event = EventMessage(seq: UInt64(index) + 41, kind: "ble.notification", attributes: attributes, redelivered: index % 2 == 1)
                var object: [String: JSONValue] = [
                    "attributes": .object(attributes), "kind": .string(event.kind), "redelivered": .bool(event.redelivered),
                    "seq": .number(Double(event.seq)), "type": "event",
                ]
                if let id { object["id"] = .number(Double(id)) }
                let expected = String(decoding: try encoder.encode(JSONValue.object(object)), as: UTF8.self)
                let frame = MessageCodec.frame(event, id: id)
                #expect(String(decoding: frame.header, as: UTF8.self) == expected)
                #expect(try IncomingMessage(frame: frame).decode(EventMessage.self) == event)
            }
        }
    }

    @Test("without an id the header has no id member")
    func noID() throws {
        let object = try headerObject(MessageCodec.frame(Acknowledge(seq: 4)))
        #expect(object.keys.sorted() == ["seq", "type"])
    }

    @Test("the samples cover every wire type of docs/protocol.md")
    func coverage() {
        let documented: Set = [
            "hello", "welcome", "reply", "error", "beginBackgroundTask", "endBackgroundTask", "finishedProcessing",
            "refresh.schedule", "refresh.cancel", "refresh.complete", "mqtt.publish",
            "backgroundTimeRemaining", "ack", "lifecycle", "event", "backgroundTaskExpiring", "deadline",
            "status", "apps", "appAction", "wake", "log", "reload",
            "accessories", "registerForAccessoryNotifications", "openSession", "write", "closeSession",
            "sessionData", "sessionClosed", "watchAccessories", "accessoryEvent",
        ]
        #expect(Set(MessageSamples.all.map { type(of: $0).type }) == documented)
    }

    @Test("an app object sends absent values as null, so every documented member is there")
    func appInfoNulls() throws {
        let object = try headerObject(MessageCodec.frame(AppReply(app: MessageSamples.notRunningApp)))
        let app = try #require(object["app"] as? [String: Any])
        for member in ["pid", "backgroundTimeRemaining", "lastDecision", "lastReason", "launchReason", "logPath",
                       "journalIdentifier", "nextRefresh", "refreshInterval"] {
            #expect(app[member] is NSNull, "\(member) should be null")
        }
        #expect(app.count == 22)
    }

    private func headerObject(_ frame: Frame) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(frame.header)) as? [String: Any])
    }
}

@Suite("Decoding errors")
struct DecodingErrorTests {
    private func incoming(_ json: String, body: [UInt8] = []) throws(ProtocolError) -> IncomingMessage {
        try IncomingMessage(frame: Frame(header: Array(json.utf8), body: body))
    }

    @Test("a missing member is named, with the request's id")
    func missingField() throws {
        let message = try incoming(#"{"type":"beginBackgroundTask","id":7}"#)
        #expect(throws: ProtocolError(.invalidArgument, "beginBackgroundTask: missing field 'name'", id: 7)) {
            try message.decode(BeginBackgroundTask.self)
        }
    }

    @Test("a member of the wrong type is named")
    func wrongType() throws {
        let message = try incoming(#"{"type":"ack","seq":"three"}"#)
        let error = try #require(throws: ProtocolError.self) { try message.decode(Acknowledge.self) }
        #expect(error.code == .invalidArgument)
        #expect(error.message.contains("'seq'"))
    }

    @Test("an unknown enum value is an invalid argument, naming the member")
    func unknownEnumValue() throws {
        let message = try incoming(#"{"type":"appAction","id":2,"action":"explode","app":"x"}"#)
        let error = try #require(throws: ProtocolError.self) { try message.decode(AppActionRequest.self) }
        #expect(error.code == .invalidArgument)
        #expect(error.id == 2)
        #expect(error.message.contains("action"))
    }

    @Test("members a later version adds are ignored")
    func unknownMembers() throws {
        let message = try incoming(#"{"type":"hello","versions":[1],"role":"control","future":{"x":1}}"#)
        #expect(try message.decode(Hello.self) == Hello(versions: [1], role: .control))
    }

    @Test("a header that is not a JSON object with a string type is a malformed frame", arguments: [
        "not json", "[1,2]", #"{"id":3}"#, #"{"type":7}"#, "\u{FF}",
    ])
    func malformed(header: String) throws {
        let error = try #require(throws: ProtocolError.self) { try incoming(header) }
        #expect(error.code == .malformedFrame)
    }

    @Test("fatal codes are the ones that close the connection")
    func fatalCodes() {
        let fatal: [ProtocolError.Code] = [.malformedFrame, .frameTooLarge, .handshakeRequired, .unsupportedVersion, .unauthorized]
        for code in fatal { #expect(ProtocolError(code, "").closesConnection) }
        for code: ProtocolError.Code in [.unknownMessage, .invalidArgument, .unknownApp, .invalidState, .launchFailed, .queueFull, .internalError] {
            #expect(!ProtocolError(code, "").closesConnection)
        }
    }
}

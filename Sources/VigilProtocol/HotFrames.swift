/// The frames of every wake, coded by hand: `event` and `deadline` (daemon →
/// app), `ack` and `finishedProcessing` (app → daemon), `wake` (control →
/// daemon) and the replies `Done` and `EventAccepted`. Foundation's generic coders cost more
/// than everything else the daemon does for a wake; these shapes are fixed
/// and small. The output is byte for byte what `JSONEncoder` gives with
/// `.sortedKeys` and `.withoutEscapingSlashes` (a differential test checks
/// it), and decoding gives what `JSONDecoder` gives, for any header the
/// decoder takes, with the same `invalidArgument` messages. Other messages
/// still go through the generic coders.
package enum HotFrames {
    /// The header of `message`, or nil when it is not one of the hot shapes.
    package static func header<M: Message>(_ message: M, id: Int?) -> [UInt8]? {
        // Metatype comparisons, not `as?` casts: no runtime conformance lookups.
        if M.self == EventMessage.self {
            return EventHeaderWriter.header(unsafeBitCast(message, to: EventMessage.self), id: id)
        }
        if M.self == Acknowledge.self {
            let ack = unsafeBitCast(message, to: Acknowledge.self)
            var out = HeaderWriter(id: id)
            out.integer("seq", ack.seq)
            return out.finish(type: Acknowledge.type)
        }
        if M.self == FinishedProcessing.self {
            let finished = unsafeBitCast(message, to: FinishedProcessing.self)
            var out = HeaderWriter(id: id)
            if let ack = finished.ack { out.integer("ack", ack) }  // nil: left out, as JSONEncoder does
            return out.finish(type: FinishedProcessing.type)
        }
        if M.self == Done.self {
            var out = HeaderWriter(id: id)
            return out.finish(type: Done.type)
        }
        if M.self == DeadlineChanged.self {
            let changed = unsafeBitCast(message, to: DeadlineChanged.self)
            var out = HeaderWriter(id: id)
            if let deadline = changed.deadline { out.integer("deadline", deadline) }  // nil: left out, as JSONEncoder does
            return out.finish(type: DeadlineChanged.type)
        }
        if M.self == EventAccepted.self {
            let accepted = unsafeBitCast(message, to: EventAccepted.self)
            var out = HeaderWriter(id: id)
            out.string("disposition", accepted.disposition)
            out.integer("seq", accepted.seq)
            return out.finish(type: EventAccepted.type)
        }
        if M.self == WakeRequest.self {
            let wake = unsafeBitCast(message, to: WakeRequest.self)
            var out = HeaderWriter(id: id)
            out.string("app", wake.app)
            if let attributes = wake.attributes {
                guard out.json("attributes", .object(attributes)) else { return nil }
            }
            if let kind = wake.kind { out.string("kind", kind) }
            return out.finish(type: WakeRequest.type)
        }
        return nil
    }

    /// `message` decoded as `M`, or nil when `M` is not one of the hot shapes.
    package static func decode<M: Message>(_ message: IncomingMessage) throws(ProtocolError) -> M? {
        if M.self == Acknowledge.self {
            return unsafeBitCast(Acknowledge(seq: try message.require("seq", UInt64.self)), to: M.self)
        }
        if M.self == EventMessage.self {
            let event = EventMessage(
                seq: try message.require("seq", UInt64.self), kind: try message.require("kind"),
                attributes: try message.requireObject("attributes"), redelivered: try message.require("redelivered"))
            return unsafeBitCast(event, to: M.self)
        }
        if M.self == FinishedProcessing.self {
            return unsafeBitCast(FinishedProcessing(ack: try message.optional("ack", UInt64.self)), to: M.self)
        }
        if M.self == Done.self { return unsafeBitCast(Done(), to: M.self) }
        if M.self == DeadlineChanged.self {
            return unsafeBitCast(DeadlineChanged(deadline: try message.optional("deadline", UInt64.self)), to: M.self)
        }
        if M.self == EventAccepted.self {
            let accepted = EventAccepted(seq: try message.require("seq", UInt64.self), disposition: try message.require("disposition"))
            return unsafeBitCast(accepted, to: M.self)
        }
        if M.self == WakeRequest.self {
            let wake = WakeRequest(
                app: try message.require("app"), kind: try message.optional("kind"), attributes: try message.optionalObject("attributes"))
            return unsafeBitCast(wake, to: M.self)
        }
        return nil
    }
}

// MARK: Reading members, with the generic decoder's messages

extension IncomingMessage {
    private func wrongType(_ key: String) -> ProtocolError {
        ProtocolError(.invalidArgument, "\(type): field '\(key)' has the wrong type", id: id)
    }

    private func member(_ key: String) throws(ProtocolError) -> HeaderMember {
        guard let member = members[key] else {
            throw ProtocolError(.invalidArgument, "\(type): missing field '\(key)'", id: id)
        }
        guard member.kind != .null else {
            throw ProtocolError(.invalidArgument, "\(type): field '\(key)' is null; a value is required", id: id)
        }
        return member
    }

    func require(_ key: String, _: UInt64.Type) throws(ProtocolError) -> UInt64 {
        let member = try member(key)
        guard member.kind == .number else { throw wrongType(key) }
        guard let value = integer(member, in: IntegerField.uint64) else {
            throw ProtocolError(
                .invalidArgument,
                "\(type): field '\(key)' is \(describe(member)); it must be an integer in \(IntegerField.describe(IntegerField.uint64))",
                id: id)
        }
        return UInt64(value)
    }

    func optional(_ key: String, _: UInt64.Type) throws(ProtocolError) -> UInt64? {
        guard let member = members[key], member.kind != .null else { return nil }
        return try require(key, UInt64.self)
    }

    func require(_ key: String) throws(ProtocolError) -> String {
        let member = try member(key)
        guard member.kind == .string else { throw wrongType(key) }
        return string(member)
    }

    func require(_ key: String) throws(ProtocolError) -> Bool {
        let member = try member(key)
        guard member.kind == .bool else { throw wrongType(key) }
        return frame.header[member.value.lowerBound] == UInt8(ascii: "t")
    }

    func optional(_ key: String) throws(ProtocolError) -> String? {
        guard let member = members[key], member.kind != .null else { return nil }
        guard member.kind == .string else { throw wrongType(key) }
        return string(member)
    }

    func requireObject(_ key: String) throws(ProtocolError) -> [String: JSONValue] {
        let member = try member(key)
        guard member.kind == .object else { throw wrongType(key) }
        return try object(member, key)
    }

    func optionalObject(_ key: String) throws(ProtocolError) -> [String: JSONValue]? {
        guard let member = members[key], member.kind != .null else { return nil }
        guard member.kind == .object else { throw wrongType(key) }
        return try object(member, key)
    }

    private func object(_ member: HeaderMember, _ key: String) throws(ProtocolError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try jsonValue(member)
        } catch {
            throw ProtocolError(.invalidArgument, "\(type): field '\(key)': \(error)", id: id)
        }
        guard case let .object(members) = value else { throw wrongType(key) }
        return members
    }
}

// MARK: Writing

/// Writes a header's members in `JSONEncoder`'s `.sortedKeys` order: the
/// caller adds them sorted, and `id` and `type` go in their places.
struct HeaderWriter {
    private var out: [UInt8] = []
    private let id: Int?
    private var idWritten = false

    init(id: Int?) {
        self.id = id
        out.reserveCapacity(96)
        out.append(UInt8(ascii: "{"))
    }

    mutating func integer(_ key: StaticString, _ value: UInt64) {
        name(key)
        out.append(contentsOf: String(value).utf8)
    }

    mutating func string(_ key: StaticString, _ value: String) {
        name(key)
        EventHeaderWriter.appendString(value, to: &out)
    }

    /// False when the value cannot be written (a number that is not finite).
    mutating func json(_ key: StaticString, _ value: JSONValue) -> Bool {
        name(key)
        return EventHeaderWriter.append(value, to: &out)
    }

    /// Closes the object with `type` (which sorts after every other member here).
    mutating func finish(type: String) -> [UInt8] {
        string("type", type)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// `"key":`, after `id` if that sorts first; keys must come sorted.
    private mutating func name(_ key: StaticString) {
        let name = UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount)
        if let id, !idWritten, !name.lexicographicallyPrecedes("id".utf8) {
            idWritten = true
            separate()
            out.append(contentsOf: #""id":"#.utf8)
            out.append(contentsOf: String(id).utf8)
        }
        separate()
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: name)
        out.append(contentsOf: #"":"#.utf8)
    }

    private mutating func separate() {
        if out.count > 1 { out.append(UInt8(ascii: ",")) }
    }
}

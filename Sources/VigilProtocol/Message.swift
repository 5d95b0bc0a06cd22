import FoundationEssentials
import Glibc

/// A message of the local protocol: a JSON header with a fixed `type`.
///
/// Fields are flat beside `type` (and `id` for requests and replies), so a
/// client in any language reads them with its ordinary JSON library.
public protocol Message: Codable, Sendable {
    static var type: String { get }
}

/// The fields every header may carry besides its own.
public struct Envelope: Sendable {
    public var type: String
    /// Correlates a request with its reply or error.
    public var id: Int?
}

/// A frame whose envelope has been read; its typed payload is decoded on demand.
public struct IncomingMessage: Sendable {
    public let envelope: Envelope
    public let frame: Frame
    /// The header's top-level members, checked once (`HeaderReader`) and read
    /// from the bytes by the frequent frames' decoders (`HotFrames`).
    let members: HeaderMembers

    public var type: String { envelope.type }
    public var id: Int? { envelope.id }
    public var body: [UInt8] { frame.body }

    /// Reads the envelope. The whole header must be strict UTF-8 first (the JSON
    /// decoder looks only at the members it decodes, and would pass an overlong
    /// form or an encoded surrogate elsewhere on to whoever reads it later), then
    /// one JSON object (RFC 8259, checked whole by `HeaderReader`) with a string
    /// `type` and, if any, an integer `id`.
    public init(frame: Frame) throws(ProtocolError) {
        self.frame = frame
        if let offset = Self.firstInvalidUTF8(frame.header) {
            throw ProtocolError(.malformedFrame, "header is not valid UTF-8 (byte \(offset) of \(frame.header.count))")
        }
        do {
            members = try HeaderReader.members(of: frame.header)
        } catch {
            throw ProtocolError(.malformedFrame, "header is not a JSON object with a string \"type\": \(error)")
        }
        let type: String
        switch members["type"] {
        case let member? where member.kind == .string:
            type = Self.string(member, in: frame.header)
        case let member?:
            throw ProtocolError(.malformedFrame, "header is not a JSON object with a string \"type\": its \"type\" is not a string (\(member.kind))")
        case nil:
            throw ProtocolError(.malformedFrame, "header is not a JSON object with a string \"type\": it has no \"type\"")
        }
        var id: Int?
        if let member = members["id"], member.kind != .null {
            guard member.kind == .number, case let .integer(value) = Self.exactInteger(member, in: frame.header),
                  let exact = Int(exactly: value) else {
                throw ProtocolError(
                    .malformedFrame,
                    "header member 'id' is \(Self.describe(member, in: frame.header)); it must be an integer in \(IntegerField.describe(IntegerField.int64))")
            }
            id = exact
        }
        envelope = Envelope(type: type, id: id)
    }

    /// The offset of the first byte that is not part of well-formed UTF-8
    /// (overlong forms, surrogates and values above U+10FFFF are not), or nil.
    static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int? {
        // Most headers are ASCII: one quick look, then the full check only if needed.
        if !bytes.contains(where: { $0 >= 0x80 }) { return nil }
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case let .valid(scalar): offset += scalar.count
            case .emptyInput: return nil
            case .error: return offset
            }
        }
    }

    /// Decodes the payload as `M`; a mismatch is a clear `invalidArgument` error.
    public func decode<M: Message>(_: M.Type = M.self) throws(ProtocolError) -> M {
        if let decoded: M = try HotFrames.decode(self) { return decoded }
        return try genericDecode(M.self)
    }

    /// `decode` through Foundation's `JSONDecoder` only, for every type (the
    /// differential tests and the fuzz target compare `HotFrames` with it).
    package func genericDecode<M: Message>(_: M.Type = M.self) throws(ProtocolError) -> M {
        do {
            return try MessageCodec.decoder.decode(M.self, from: Data(frame.header))
        } catch let DecodingError.keyNotFound(key, _) {
            throw ProtocolError(.invalidArgument, "\(type): missing field '\(key.stringValue)'", id: id)
        } catch let DecodingError.typeMismatch(_, context) {
            throw ProtocolError(.invalidArgument, "\(type): field '\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type", id: id)
        } catch let DecodingError.dataCorrupted(context) {
            throw ProtocolError(.invalidArgument, "\(type): \(context.debugDescription) at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'", id: id)
        } catch {
            throw ProtocolError(.invalidArgument, "\(type): \(error)", id: id)
        }
    }
}

public enum MessageCodec {
    // JSONEncoder/Decoder are thread-safe for concurrent encode/decode calls.
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
    static let decoder = JSONDecoder()

    /// Encodes `message` (plus `id` when given) as one frame.
    public static func frame<M: Message>(_ message: M, id: Int? = nil, body: [UInt8] = []) -> Frame {
        if let header = HotFrames.header(message, id: id) {
            return Frame(header: header, body: body)
        }
        do {
            let header = try encoder.encode(Typed(message: message, id: id))
            return Frame(header: Array(header), body: body)
        } catch {
            // Our own message types always encode; failing here is a programming error.
            preconditionFailure("cannot encode \(M.type): \(error)")
        }
    }

    /// The header as `JSONEncoder` writes it, for every type (the
    /// differential tests and the fuzz target compare `HotFrames` with it).
    package static func genericHeader<M: Message>(_ message: M, id: Int? = nil) -> [UInt8] {
        do {
            return Array(try encoder.encode(Typed(message: message, id: id)))
        } catch {
            preconditionFailure("cannot encode \(M.type): \(error)")
        }
    }

    /// The `type` (and `id`, when it is a 64-bit integer) that `JSONDecoder`
    /// reads from a header, or nil when it reads no object with a string `type`.
    package static func genericEnvelope(_ header: [UInt8]) -> (type: String, id: Int64?)? {
        struct Probe: Decodable {
            var type: String
            var id: Int64?
            enum CodingKeys: String, CodingKey { case type, id }
            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                type = try container.decode(String.self, forKey: .type)
                id = try? container.decodeIfPresent(Int64.self, forKey: .id)
            }
        }
        guard let probe = try? decoder.decode(Probe.self, from: Data(header)) else { return nil }
        return (probe.type, probe.id)
    }

    public static func encode<M: Message>(_ message: M, id: Int? = nil, body: [UInt8] = []) -> [UInt8] {
        frame(message, id: id, body: body).encoded()
    }

    /// Adds `type` and `id` to the message's own keys in one JSON object.
    private struct Typed<M: Message>: Encodable {
        let message: M
        let id: Int?

        enum Keys: String, CodingKey { case type, id }

        func encode(to encoder: any Encoder) throws {
            try message.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(M.type, forKey: .type)
            try container.encodeIfPresent(id, forKey: .id)
        }
    }
}

import FoundationEssentials
import Glibc

/// An integer member of a request and the values it may take.
///
/// Checked on the header as sent, before the typed decode: a negative count, a
/// fraction, a number beyond 64 bits or a string where an integer belongs is an
/// `invalidArgument` naming the member, the value and the range, and nothing
/// downstream ever sees a value it could trap on.
public struct IntegerField: Sendable, Equatable {
    /// Member names from the top of the header; `*` stands for every element of an array.
    public var path: [String]
    public var range: ClosedRange<Int128>

    public init(_ path: String, _ range: ClosedRange<Int128>) {
        self.path = path.split(separator: ".").map(String.init)
        self.range = range
    }

    public static let int64 = Int128(Int64.min)...Int128(Int64.max)
    public static let nonNegative = 0...Int128(Int64.max)
    /// Ids the daemon hands out (sessions, connections, tasks, requests) count from 1.
    public static let positive = 1...Int128(Int64.max)
    public static let uint64 = 0...Int128(UInt64.max)

    /// The range as people read it: `0…2^63-1`.
    public static func describe(_ range: ClosedRange<Int128>) -> String {
        "\(describe(range.lowerBound))…\(describe(range.upperBound))"
    }

    static func describe(_ bound: Int128) -> String {
        switch bound {
        case Int128(Int64.max): "2^63-1"
        case Int128(Int64.min): "-2^63"
        case Int128(UInt64.max): "2^64-1"
        default: "\(bound)"
        }
    }
}

extension IntegerField {
    /// The integer members of every request by `type`, in one place
    /// (docs/protocol.md lists the same ranges). Other types have none.
    public static let requests: [String: [IntegerField]] = [
        Hello.type: [IntegerField("versions.*", 0...Int128(Int32.max))],
        EndBackgroundTask.type: [IntegerField("task", positive)],
        Acknowledge.type: [IntegerField("seq", uint64)],
        FinishedProcessing.type: [IntegerField("ack", uint64)],
        LogRequest.type: [IntegerField("limit", nonNegative)],
        OpenSession.type: [IntegerField("connectionID", positive)],
        WriteToSession.type: [IntegerField("session", positive)],
        CloseSession.type: [IntegerField("session", positive)],
        // GAP appearance is a 16-bit value.
        StartAdvertising.type: [IntegerField("advertisement.appearance", 0...0xFFFF)],
        RespondToRequest.type: [IntegerField("request", positive)],
        // Which characteristic of a UUID: there are at most 65535 attribute handles.
        ReadCharacteristic.type: [IntegerField("instance", 0...0xFFFF)],
        WriteCharacteristic.type: [IntegerField("instance", 0...0xFFFF)],
        SetNotify.type: [IntegerField("instance", 0...0xFFFF)],
    ]
}

// MARK: Reading numbers as sent

/// A JSON value at a header path, read as exactly as the typed decode would:
/// integers up to 64 bits (signed or not) exactly, other numbers as `Double`.
enum HeaderScalar: Decodable, Equatable {
    case integer(Int128)
    case fraction(Double)
    case null
    /// Not a number: a description for the message ("true", "a string", "an object").
    case other(String)

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .other("\(value)")
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(Int128(value))
        } else if let value = try? container.decode(UInt64.self) {
            self = .integer(Int128(value))
        } else if let value = Self.number(container) {
            self = value
        } else if let value = try? container.decode(String.self) {
            self = .other("the string \(Self.quoted(value))")
        } else if (try? decoder.unkeyedContainer()) != nil {
            self = .other("an array")
        } else {
            self = .other("an object")
        }
    }

    /// A number that is not a 64-bit integer; nil for anything but a number.
    private static func number(_ container: any SingleValueDecodingContainer) -> HeaderScalar? {
        do {
            let value = try container.decode(Double.self)
            // 1.0 and 1e3 decode as integers in the typed decode too. Beyond 2^53 a
            // Double is not exact (-2^63-1 would read as -2^63): never an integer.
            if value.isFinite, value.rounded() == value, abs(value) <= 0x1p53 {
                return .integer(Int128(value))
            }
            return .fraction(value)
        } catch DecodingError.typeMismatch {
            return nil
        } catch {
            // A number no Double holds, e.g. 1e400: the decoder's words name it.
            return .other("a number out of any range (\(error))")
        }
    }

    var description: String {
        switch self {
        case let .integer(value): "\(value)"
        case let .fraction(value): "\(value)"
        case .null: "null"
        case let .other(text): text
        }
    }

    private static func quoted(_ text: String) -> String {
        let cut = text.count > 40 ? String(text.prefix(40)) + "…" : text
        return "\"\(cut)\""
    }
}

/// The scalars at one path of a header (several for a `*` step), with their
/// paths spelled out (`versions[2]`); decodes nothing but that path.
struct HeaderProbe: Decodable {
    static let pathKey = CodingUserInfoKey(rawValue: "org.vigil.headerProbePath")!

    var found: [(path: String, value: HeaderScalar)] = []

    init(from decoder: any Decoder) throws {
        let path = decoder.userInfo[Self.pathKey] as? [String] ?? []
        let depth = decoder.codingPath.count
        guard depth < path.count else {
            found = [(Self.spell(decoder.codingPath), try HeaderScalar(from: decoder))]
            return
        }
        // Something else than the path expects (not an object, not an array) is
        // left to the typed decode, which names the member's wrong type.
        if path[depth] == "*" {
            guard var array = try? decoder.unkeyedContainer() else { return }
            while !array.isAtEnd { found += try array.decode(HeaderProbe.self).found }
        } else {
            let key = ProbeKey(stringValue: path[depth])
            guard let object = try? decoder.container(keyedBy: ProbeKey.self), object.contains(key) else { return }
            found = try object.decode(HeaderProbe.self, forKey: key).found
        }
    }

    static func spell(_ codingPath: [any CodingKey]) -> String {
        var text = ""
        for key in codingPath {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += text.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return text
    }

    struct ProbeKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// The scalars at `path` of `header` (already known to be a JSON object).
    static func values(at path: [String], in header: [UInt8]) throws -> [(path: String, value: HeaderScalar)] {
        let decoder = JSONDecoder()
        decoder.userInfo[pathKey] = path
        return try decoder.decode(HeaderProbe.self, from: Data(header)).found
    }
}

extension IncomingMessage {
    /// Checks the integer members of a request of this `type` on the header as
    /// sent (see `IntegerField`), before anything decodes or uses them. The
    /// daemon calls it for every frame, ahead of any other check of the request.
    public func checkIntegerFields() throws(ProtocolError) {
        guard let fields = IntegerField.requests[type] else { return }
        for field in fields {
            if field.path.count == 1 {
                // A top-level member: read exactly from the checked header, no decoder.
                guard let member = members[field.path[0]], member.kind != .null else { continue }
                if integer(member, in: field.range) != nil { continue }
                throw ProtocolError(
                    .invalidArgument,
                    "\(type): field '\(field.path[0])' is \(describe(member)); it must be an integer in \(IntegerField.describe(field.range))",
                    id: id)
            }
            let values: [(path: String, value: HeaderScalar)]
            do {
                values = try HeaderProbe.values(at: field.path, in: frame.header)
            } catch {
                // A number no decoder can hold (1e400) fails the whole header.
                throw ProtocolError(.invalidArgument, "\(type): a number in the header cannot be read: \(error)", id: id)
            }
            for (path, value) in values {
                if case let .integer(number) = value, field.range.contains(number) { continue }
                if case .null = value { continue }  // absent, for an optional member; the typed decode checks required ones
                throw ProtocolError(
                    .invalidArgument,
                    "\(type): field '\(path)' is \(value.description); it must be an integer in \(IntegerField.describe(field.range))",
                    id: id)
            }
        }
    }
}

import FoundationEssentials
import Glibc

/// Loss a serial device reported for a session (`session.loss`): counts since
/// the previous report, or totals since the open in `SessionInfo`.
public struct SessionLoss: Sendable, Codable, Equatable {
    public var overruns: Int
    public var parityErrors: Int
    public var frameErrors: Int
    /// Reads vigild could not count because it was killed during them: the
    /// device may have given bytes there that never reached the session log.
    /// Rare (the read(2) itself is the window), and never silent.
    public var interruptedReads: Int

    public init(overruns: Int = 0, parityErrors: Int = 0, frameErrors: Int = 0, interruptedReads: Int = 0) {
        self.overruns = overruns
        self.parityErrors = parityErrors
        self.frameErrors = frameErrors
        self.interruptedReads = interruptedReads
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        overruns = try container.decode(Int.self, forKey: .overruns)
        parityErrors = try container.decode(Int.self, forKey: .parityErrors)
        frameErrors = try container.decode(Int.self, forKey: .frameErrors)
        interruptedReads = try container.decodeIfPresent(Int.self, forKey: .interruptedReads) ?? 0
    }

    public var isEmpty: Bool { overruns == 0 && parityErrors == 0 && frameErrors == 0 && interruptedReads == 0 }

    public static func + (lhs: SessionLoss, rhs: SessionLoss) -> SessionLoss {
        SessionLoss(
            overruns: lhs.overruns + rhs.overruns, parityErrors: lhs.parityErrors + rhs.parityErrors,
            frameErrors: lhs.frameErrors + rhs.frameErrors, interruptedReads: lhs.interruptedReads + rhs.interruptedReads)
    }
}

/// The typed reading of an app event whose kind is one of `AccessoryEventKind`:
/// attributes are flat JSON in the event header, so every client decodes them
/// the same way (docs/protocol.md, "Accessories"). Bytes of `session.data`
/// are in the session log the event names (`log`, `offset`, `length`; the
/// client library copies them into the payload), or in the event body.
public enum AccessoryEventContent: Sendable, Equatable {
    case connected(AccessoryInfo)
    case disconnected(AccessoryInfo)
    /// Bytes from the device; the payload holds them (see `SessionLogReader`).
    case data(session: Int)
    /// `willReopen`: the session waits for the same accessory to be plugged in again.
    case closed(session: Int, reason: String, willReopen: Bool)
    case reopened(session: Int, accessory: AccessoryInfo)
    case loss(session: Int, SessionLoss)
    /// Watched modem lines changed: their state now, and which changed.
    case lines(session: Int, SessionLines, changed: [String])

    /// Decodes an event of an accessory kind; nil for any other kind. Malformed
    /// attributes of an accessory kind throw `invalidArgument`.
    public init?(kind: String, attributes: [String: JSONValue]) throws(ProtocolError) {
        switch kind {
        case AccessoryEventKind.connected:
            self = .connected(try AccessoryInfo(attributes: attributes))
        case AccessoryEventKind.disconnected:
            self = .disconnected(try AccessoryInfo(attributes: attributes))
        case AccessoryEventKind.data:
            self = .data(session: try Self.integer("session", in: attributes, of: kind))
        case AccessoryEventKind.closed:
            self = .closed(
                session: try Self.integer("session", in: attributes, of: kind),
                reason: attributes["reason"]?.stringValue ?? "",
                willReopen: attributes["willReopen"] == .bool(true))
        case AccessoryEventKind.reopened:
            self = .reopened(
                session: try Self.integer("session", in: attributes, of: kind), accessory: try AccessoryInfo(attributes: attributes))
        case AccessoryEventKind.loss:
            self = .loss(
                session: try Self.integer("session", in: attributes, of: kind),
                SessionLoss(
                    overruns: try Self.integer("overruns", in: attributes, of: kind),
                    parityErrors: try Self.integer("parityErrors", in: attributes, of: kind),
                    frameErrors: try Self.integer("frameErrors", in: attributes, of: kind),
                    interruptedReads: attributes["interruptedReads"] == nil ? 0 : try Self.integer("interruptedReads", in: attributes, of: kind)))
        case AccessoryEventKind.lines:
            let changed: [String] = if case let .array(names)? = attributes["changed"] { names.compactMap(\.stringValue) } else { [] }
            self = .lines(session: try Self.integer("session", in: attributes, of: kind), SessionLines(attributes: attributes), changed: changed)
        default:
            return nil
        }
    }

    /// The session the event is about; nil for connect and disconnect.
    public var session: Int? {
        switch self {
        case .connected, .disconnected: nil
        case let .data(session), let .closed(session, _, _), let .reopened(session, _), let .loss(session, _),
             let .lines(session, _, _): session
        }
    }

    /// Attributes carry numbers as JSON numbers (decoded as `Double`): only a whole number is an id or a count.
    private static func integer(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> Int {
        guard let number = attributes[key]?.numberValue, let value = Int(exactly: number) else {
            throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is missing or not a whole number")
        }
        return value
    }
}

extension AccessoryInfo {
    /// The accessory's members as event attributes (`accessory.connected`,
    /// `accessory.disconnected`, `session.reopened`): the same keys as its JSON.
    public var attributes: [String: JSONValue] {
        guard let data = try? JSONEncoder().encode(self),
              case let .object(object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else { return [:] }
        return object
    }

    /// Reads an accessory back from event attributes; other keys (such as `session`) are ignored.
    public init(attributes: [String: JSONValue]) throws(ProtocolError) {
        do {
            let data = try JSONEncoder().encode(JSONValue.object(attributes))
            self = try JSONDecoder().decode(AccessoryInfo.self, from: data)
        } catch let DecodingError.keyNotFound(key, _) {
            throw ProtocolError(.invalidArgument, "accessory attributes: missing '\(key.stringValue)'")
        } catch {
            throw ProtocolError(.invalidArgument, "accessory attributes: \(error)")
        }
    }
}

/// The typed reading of an event (for apps) or a `blePush` (for control
/// clients) whose kind is one of `PeripheralEventKind`: a remote central read,
/// wrote or subscribed to a characteristic the client published. Attributes
/// are flat JSON; the value of a write travels in the body, not here.
///
/// The daemon can build the attributes from the same type (`kind`,
/// `attributes`), so both ends agree by construction.
public enum PeripheralEventContent: Sendable, Equatable {
    /// `ble.peripheral.read`: `request`, `service`, `characteristic`, `offset`,
    /// `central` (if BlueZ names it). Answered with `ble.respond`.
    case read(request: Int, service: String, characteristic: String, offset: Int, central: String?)
    /// `ble.peripheral.write`: `request` (absent for a write without response),
    /// `service`, `characteristic`, `offset`, `central`; the value in the body.
    case write(request: Int?, service: String, characteristic: String, offset: Int, central: String?)
    /// `ble.peripheral.subscribed`: `service`, `characteristic`.
    case subscribed(service: String, characteristic: String)
    /// `ble.peripheral.unsubscribed`: `service`, `characteristic`.
    case unsubscribed(service: String, characteristic: String)
    /// `ble.peripheral.readyToUpdate`: no attributes.
    case readyToUpdate

    /// Decodes an event of a peripheral kind; nil for any other kind (including
    /// `ble.peripheral.*` kinds this version does not know). Malformed
    /// attributes of a known kind throw `invalidArgument`. `offset` defaults to 0.
    public init?(kind: String, attributes: [String: JSONValue]) throws(ProtocolError) {
        switch kind {
        case PeripheralEventKind.read:
            self = .read(
                request: try Self.integer("request", in: attributes, of: kind),
                service: try Self.string("service", in: attributes, of: kind),
                characteristic: try Self.string("characteristic", in: attributes, of: kind),
                offset: try Self.optionalInteger("offset", in: attributes, of: kind) ?? 0,
                central: try Self.optionalString("central", in: attributes, of: kind))
        case PeripheralEventKind.write:
            self = .write(
                request: try Self.optionalInteger("request", in: attributes, of: kind),
                service: try Self.string("service", in: attributes, of: kind),
                characteristic: try Self.string("characteristic", in: attributes, of: kind),
                offset: try Self.optionalInteger("offset", in: attributes, of: kind) ?? 0,
                central: try Self.optionalString("central", in: attributes, of: kind))
        case PeripheralEventKind.subscribed:
            self = .subscribed(
                service: try Self.string("service", in: attributes, of: kind),
                characteristic: try Self.string("characteristic", in: attributes, of: kind))
        case PeripheralEventKind.unsubscribed:
            self = .unsubscribed(
                service: try Self.string("service", in: attributes, of: kind),
                characteristic: try Self.string("characteristic", in: attributes, of: kind))
        case PeripheralEventKind.readyToUpdate:
            self = .readyToUpdate
        default:
            return nil
        }
    }

    /// Whether `kind` is one of the peripheral role's kinds (known to this version or not).
    public static func isPeripheralKind(_ kind: String) -> Bool {
        kind.hasPrefix("ble.peripheral.")
    }

    /// The event kind, one of `PeripheralEventKind`.
    public var kind: String {
        switch self {
        case .read: PeripheralEventKind.read
        case .write: PeripheralEventKind.write
        case .subscribed: PeripheralEventKind.subscribed
        case .unsubscribed: PeripheralEventKind.unsubscribed
        case .readyToUpdate: PeripheralEventKind.readyToUpdate
        }
    }

    /// The attributes as they go on the wire (absent optionals are left out).
    public var attributes: [String: JSONValue] {
        switch self {
        case let .read(request, service, characteristic, offset, central):
            Self.request(request, service, characteristic, offset, central)
        case let .write(request, service, characteristic, offset, central):
            Self.request(request, service, characteristic, offset, central)
        case let .subscribed(service, characteristic), let .unsubscribed(service, characteristic):
            ["service": .string(service), "characteristic": .string(characteristic)]
        case .readyToUpdate:
            [:]
        }
    }

    /// The request to answer with `ble.respond`: reads, and writes with response.
    public var request: Int? {
        switch self {
        case let .read(request, _, _, _, _): request
        case let .write(request, _, _, _, _): request
        default: nil
        }
    }

    private static func request(
        _ request: Int?, _ service: String, _ characteristic: String, _ offset: Int, _ central: String?
    ) -> [String: JSONValue] {
        var attributes: [String: JSONValue] = [
            "service": .string(service), "characteristic": .string(characteristic), "offset": .number(Double(offset)),
        ]
        if let request { attributes["request"] = .number(Double(request)) }
        if let central { attributes["central"] = .string(central) }
        return attributes
    }

    private static func string(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> String {
        guard let value = try optionalString(key, in: attributes, of: kind) else {
            throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is missing")
        }
        return value
    }

    private static func optionalString(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> String? {
        switch attributes[key] {
        case nil, .null?: return nil
        case let .string(value)?: return value
        default: throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is not a string")
        }
    }

    private static func integer(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> Int {
        guard let value = try optionalInteger(key, in: attributes, of: kind) else {
            throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is missing")
        }
        return value
    }

    private static func optionalInteger(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> Int? {
        switch attributes[key] {
        case nil, .null?: return nil
        case let .number(value)? where value.rounded() == value && value >= 0 && value < 9.0e15: return Int(value)
        default: throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is not a non-negative integer")
        }
    }
}

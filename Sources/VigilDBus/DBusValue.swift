/// One D-Bus value, typed as on the wire.
///
/// Containers carry their element signatures so an empty array or dictionary
/// still has a type (BlueZ rejects `a{sv}` sent as `av`), and dictionaries
/// are ordered pairs because D-Bus dictionaries are arrays of entries.
///
/// `unixFD` holds a raw descriptor. Sending does not take it over (libdbus
/// sends a duplicate, the sender still closes its own); a received one is a
/// fresh descriptor owned by whoever receives the message (see `DBusMessage`).
public indirect enum DBusValue: Sendable, Equatable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    /// A signature value (type `g`), e.g. "a{sv}"; validated when sent.
    case signature(String)
    case unixFD(Int32)
    /// `a<element>`; every element must have `elementSignature`.
    case array(elementSignature: String, [DBusValue])
    /// `a{<key><value>}`; keys must be of a basic type.
    case dictionary(keySignature: String, valueSignature: String, [DBusDictEntry])
    case `struct`([DBusValue])
    case variant(DBusValue)

    /// The value's complete type signature, e.g. "a{sv}".
    public var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .array(let element, _): "a" + element
        case .dictionary(let key, let value, _): "a{" + key + value + "}"
        case .struct(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }
}

/// One entry of a D-Bus dictionary.
public struct DBusDictEntry: Sendable, Equatable {
    public var key: DBusValue
    public var value: DBusValue

    public init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

extension [DBusValue] {
    /// The concatenated signature of a message body.
    public var dbusSignature: String { map(\.signature).joined() }
}

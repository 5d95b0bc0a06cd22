/// Constructors for the shapes BlueZ uses most (`ay`, `a{sv}`, `as`, `ao`),
/// so callers do not spell out element signatures.
extension DBusValue {
    /// `ay`
    public static func bytes(_ bytes: [UInt8]) -> DBusValue {
        .array(elementSignature: "y", bytes.map(DBusValue.byte))
    }

    /// `as`
    public static func strings(_ strings: [String]) -> DBusValue {
        .array(elementSignature: "s", strings.map(DBusValue.string))
    }

    /// `ao`
    public static func objectPaths(_ paths: [ObjectPath]) -> DBusValue {
        .array(elementSignature: "o", paths.map(DBusValue.objectPath))
    }

    /// `a{sv}`, keys sorted so the wire order is deterministic. The values
    /// are wrapped in variants here; pass them unwrapped.
    public static func stringVariantDictionary(_ dictionary: [String: DBusValue]) -> DBusValue {
        .dictionary(keySignature: "s", valueSignature: "v", dictionary.sorted { $0.key < $1.key }.map {
            DBusDictEntry(key: .string($0.key), value: .variant($0.value))
        })
    }
}

/// Accessors: nil when the value has another type, so parsing a reply is a
/// chain of optionals rather than a switch per field.
extension DBusValue {
    public var byte: UInt8? { if case .byte(let value) = self { value } else { nil } }
    public var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
    public var int16: Int16? { if case .int16(let value) = self { value } else { nil } }
    public var uint16: UInt16? { if case .uint16(let value) = self { value } else { nil } }
    public var int32: Int32? { if case .int32(let value) = self { value } else { nil } }
    public var uint32: UInt32? { if case .uint32(let value) = self { value } else { nil } }
    public var int64: Int64? { if case .int64(let value) = self { value } else { nil } }
    public var uint64: UInt64? { if case .uint64(let value) = self { value } else { nil } }
    public var double: Double? { if case .double(let value) = self { value } else { nil } }
    public var string: String? { if case .string(let value) = self { value } else { nil } }
    public var objectPath: ObjectPath? { if case .objectPath(let value) = self { value } else { nil } }
    public var unixFD: Int32? { if case .unixFD(let value) = self { value } else { nil } }

    /// The content of a variant; nil for anything else.
    public var variant: DBusValue? { if case .variant(let value) = self { value } else { nil } }

    /// The value with any variant wrappers removed.
    public var unwrapped: DBusValue {
        if case .variant(let inner) = self { inner.unwrapped } else { self }
    }

    /// The elements of an array (of any element type).
    public var array: [DBusValue]? { if case .array(_, let values) = self { values } else { nil } }

    /// The fields of a struct.
    public var structFields: [DBusValue]? { if case .struct(let fields) = self { fields } else { nil } }

    /// The entries of a dictionary, in wire order.
    public var dictionaryEntries: [DBusDictEntry]? {
        if case .dictionary(_, _, let entries) = self { entries } else { nil }
    }

    /// `ay` as bytes.
    public var bytes: [UInt8]? {
        guard case .array("y", let values) = self else { return nil }
        return values.compactMap(\.byte)
    }

    /// `as` as strings.
    public var strings: [String]? {
        guard case .array("s", let values) = self else { return nil }
        return values.compactMap(\.string)
    }

    /// `ao` as paths.
    public var objectPaths: [ObjectPath]? {
        guard case .array("o", let values) = self else { return nil }
        return values.compactMap(\.objectPath)
    }

    /// `a{sv}` as a dictionary of the variants' contents (later duplicate keys win).
    public var dictionaryStringVariant: [String: DBusValue]? {
        guard case .dictionary("s", "v", let entries) = self else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.string, let value = entry.value.variant else { return nil }
            result[key] = value
        }
        return result
    }

    /// A dictionary keyed by strings (`a{s?}`), values as they are.
    public var dictionaryStringKeyed: [String: DBusValue]? {
        guard case .dictionary("s", _, let entries) = self else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.string else { return nil }
            result[key] = entry.value
        }
        return result
    }

    /// A dictionary keyed by object paths (`a{o?}`), e.g. GetManagedObjects' reply.
    public var dictionaryObjectPathKeyed: [ObjectPath: DBusValue]? {
        guard case .dictionary("o", _, let entries) = self else { return nil }
        var result: [ObjectPath: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.objectPath else { return nil }
            result[key] = entry.value
        }
        return result
    }
}

import CDBus
import Glibc

/// Reads a libdbus message body into `DBusValue`s. libdbus validated the
/// message when it arrived, so this cannot meet a malformed body.
///
/// Each `h` read here is a new descriptor (libdbus dups it): it belongs to
/// whoever ends up with the values.
enum MessageDecoder {
    static func body(of message: OpaquePointer) -> [DBusValue] {
        let iter = UnsafeMutablePointer<DBusMessageIter>.allocate(capacity: 1)
        defer { iter.deallocate() }
        guard dbus_message_iter_init(message, iter) != 0 else { return [] }
        return values(iter)
    }

    /// The first argument if it is a string, without decoding the rest (match rules' arg0).
    static func firstString(of message: OpaquePointer) -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0,
              dbus_message_iter_get_arg_type(&iter) == CDBUS_TYPE_STRING else { return nil }
        var pointer: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iter, &pointer)
        return pointer.map { String(cString: $0) }
    }

    private static func values(_ iter: UnsafeMutablePointer<DBusMessageIter>) -> [DBusValue] {
        var result: [DBusValue] = []
        while dbus_message_iter_get_arg_type(iter) != CDBUS_TYPE_INVALID {
            if let value = value(iter) { result.append(value) }
            dbus_message_iter_next(iter)
        }
        return result
    }

    private static func basic<T: BitwiseCopyable>(_ iter: UnsafeMutablePointer<DBusMessageIter>, _ initial: T) -> T {
        var value = initial
        dbus_message_iter_get_basic(iter, &value)
        return value
    }

    private static func string(_ iter: UnsafeMutablePointer<DBusMessageIter>) -> String {
        var pointer: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(iter, &pointer)
        return pointer.map { String(cString: $0) } ?? ""
    }

    private static func value(_ iter: UnsafeMutablePointer<DBusMessageIter>) -> DBusValue? {
        switch dbus_message_iter_get_arg_type(iter) {
        case CDBUS_TYPE_BYTE: return .byte(basic(iter, UInt8(0)))
        case CDBUS_TYPE_BOOLEAN: return .bool(basic(iter, dbus_bool_t(0)) != 0)
        case CDBUS_TYPE_INT16: return .int16(basic(iter, Int16(0)))
        case CDBUS_TYPE_UINT16: return .uint16(basic(iter, UInt16(0)))
        case CDBUS_TYPE_INT32: return .int32(basic(iter, Int32(0)))
        case CDBUS_TYPE_UINT32: return .uint32(basic(iter, UInt32(0)))
        case CDBUS_TYPE_INT64: return .int64(basic(iter, Int64(0)))
        case CDBUS_TYPE_UINT64: return .uint64(basic(iter, UInt64(0)))
        case CDBUS_TYPE_DOUBLE: return .double(basic(iter, Double(0)))
        case CDBUS_TYPE_UNIX_FD: return .unixFD(basic(iter, Int32(-1)))
        case CDBUS_TYPE_STRING: return .string(string(iter))
        case CDBUS_TYPE_OBJECT_PATH: return .objectPath(ObjectPath(trusted: string(iter)))
        case CDBUS_TYPE_SIGNATURE: return .signature(string(iter))
        case CDBUS_TYPE_VARIANT:
            return withSubIterator(iter) { sub in value(sub).map(DBusValue.variant) }
        case CDBUS_TYPE_STRUCT:
            return withSubIterator(iter) { sub in .struct(values(sub)) }
        case CDBUS_TYPE_ARRAY:
            return array(iter)
        default:
            return nil
        }
    }

    private static func array(_ iter: UnsafeMutablePointer<DBusMessageIter>) -> DBusValue? {
        guard let full = signature(iter) else { return nil }
        let element = String(full.dropFirst())  // drop the "a"
        if dbus_message_iter_get_element_type(iter) == CDBUS_TYPE_DICT_ENTRY {
            // "{kv...}": one basic key character, then the value's complete type.
            let inner = element.dropFirst().dropLast()
            guard let key = inner.first else { return nil }
            let valueSignature = String(inner.dropFirst())
            let entries = withSubIterator(iter) { sub -> [DBusDictEntry] in
                var entries: [DBusDictEntry] = []
                while dbus_message_iter_get_arg_type(sub) == CDBUS_TYPE_DICT_ENTRY {
                    let pair = withSubIterator(sub) { values($0) }
                    if pair.count == 2 { entries.append(DBusDictEntry(key: pair[0], value: pair[1])) }
                    dbus_message_iter_next(sub)
                }
                return entries
            }
            return .dictionary(keySignature: String(key), valueSignature: valueSignature, entries)
        }
        if element == "y" {
            let bytes = withSubIterator(iter) { sub -> [UInt8] in
                var base: UnsafePointer<UInt8>?
                var count: Int32 = 0
                withUnsafeMutablePointer(to: &base) { dbus_message_iter_get_fixed_array(sub, $0, &count) }
                guard let base, count > 0 else { return [] }
                return Array(UnsafeBufferPointer(start: base, count: Int(count)))
            }
            return .array(elementSignature: "y", bytes.map(DBusValue.byte))
        }
        return .array(elementSignature: element, withSubIterator(iter) { values($0) })
    }

    private static func signature(_ iter: UnsafeMutablePointer<DBusMessageIter>) -> String? {
        guard let raw = dbus_message_iter_get_signature(iter) else { return nil }
        defer { dbus_free(raw) }
        return String(cString: raw)
    }

    private static func withSubIterator<T>(
        _ iter: UnsafeMutablePointer<DBusMessageIter>,
        _ body: (UnsafeMutablePointer<DBusMessageIter>) -> T
    ) -> T {
        let sub = UnsafeMutablePointer<DBusMessageIter>.allocate(capacity: 1)
        defer { sub.deallocate() }
        dbus_message_iter_recurse(iter, sub)
        return body(sub)
    }
}

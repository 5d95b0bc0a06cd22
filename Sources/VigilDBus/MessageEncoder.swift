import CDBus

/// Appends `DBusValue`s to a libdbus message through DBusMessageIter (the
/// variadic dbus_message_append_args is not callable from Swift).
///
/// Every iterator lives on the heap from open_container to close_container:
/// libdbus keeps writing through it, and a moved iterator produces a message
/// with a broken signature that the bus answers by dropping the connection.
enum MessageEncoder {
    /// Validates, then appends every value; throws instead of letting libdbus abort.
    static func append(_ values: [DBusValue], to message: OpaquePointer) throws(DBusError) {
        for value in values { try value.validate() }
        try LibDBus.validate(.signature, values.dbusSignature)
        let iter = UnsafeMutablePointer<DBusMessageIter>.allocate(capacity: 1)
        defer { iter.deallocate() }
        dbus_message_iter_init_append(message, iter)
        for value in values { try append(value, to: iter) }
    }

    private static func append(_ value: DBusValue, to iter: UnsafeMutablePointer<DBusMessageIter>) throws(DBusError) {
        let ok: Bool
        switch value {
        case .byte(var byte): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_BYTE, &byte) != 0
        case .bool(let bool):
            var raw: dbus_bool_t = bool ? 1 : 0
            ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_BOOLEAN, &raw) != 0
        case .int16(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_INT16, &raw) != 0
        case .uint16(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_UINT16, &raw) != 0
        case .int32(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_INT32, &raw) != 0
        case .uint32(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_UINT32, &raw) != 0
        case .int64(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_INT64, &raw) != 0
        case .uint64(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_UINT64, &raw) != 0
        case .double(var raw): ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_DOUBLE, &raw) != 0
        case .unixFD(var fd):
            // libdbus dups the fd now; the caller keeps (and closes) its own.
            ok = dbus_message_iter_append_basic(iter, CDBUS_TYPE_UNIX_FD, &fd) != 0
        case .string(let string): ok = appendString(string, CDBUS_TYPE_STRING, iter)
        case .objectPath(let path): ok = appendString(path.rawValue, CDBUS_TYPE_OBJECT_PATH, iter)
        case .signature(let signature): ok = appendString(signature, CDBUS_TYPE_SIGNATURE, iter)
        case .array("y", let values):
            let bytes = values.compactMap(\.byte)
            try container(CDBUS_TYPE_ARRAY, "y", iter) { sub throws(DBusError) in
                let appended = bytes.withUnsafeBufferPointer { buffer in
                    var base = buffer.baseAddress
                    return withUnsafeMutablePointer(to: &base) {
                        dbus_message_iter_append_fixed_array(sub, CDBUS_TYPE_BYTE, $0, Int32(buffer.count)) != 0
                    }
                }
                guard appended else { throw .init(name: DBusError.Name.noMemory, message: "append ay") }
            }
            return
        case .array(let element, let values):
            try container(CDBUS_TYPE_ARRAY, element, iter) { sub throws(DBusError) in
                for value in values { try append(value, to: sub) }
            }
            return
        case .dictionary(let key, let valueSignature, let entries):
            try container(CDBUS_TYPE_ARRAY, "{" + key + valueSignature + "}", iter) { sub throws(DBusError) in
                for entry in entries {
                    try container(CDBUS_TYPE_DICT_ENTRY, nil, sub) { pair throws(DBusError) in
                        try append(entry.key, to: pair)
                        try append(entry.value, to: pair)
                    }
                }
            }
            return
        case .struct(let fields):
            try container(CDBUS_TYPE_STRUCT, nil, iter) { sub throws(DBusError) in
                for field in fields { try append(field, to: sub) }
            }
            return
        case .variant(let inner):
            try container(CDBUS_TYPE_VARIANT, inner.signature, iter) { sub throws(DBusError) in
                try append(inner, to: sub)
            }
            return
        }
        guard ok else {
            let detail = value.signature == "h" ? " (is the fd open?)" : ""
            throw .failed("cannot append a value of type '\(value.signature)'\(detail)")
        }
    }

    private static func appendString(_ string: String, _ type: Int32, _ iter: UnsafeMutablePointer<DBusMessageIter>) -> Bool {
        string.withCString { pointer in
            var pointer: UnsafePointer<CChar>? = pointer
            return dbus_message_iter_append_basic(iter, type, &pointer) != 0
        }
    }

    /// Opens a container, fills it, and closes it (or abandons it on error, so
    /// libdbus does not assert on a message left half-open).
    private static func container(
        _ type: Int32,
        _ signature: String?,
        _ parent: UnsafeMutablePointer<DBusMessageIter>,
        _ fill: (UnsafeMutablePointer<DBusMessageIter>) throws(DBusError) -> Void
    ) throws(DBusError) {
        let sub = UnsafeMutablePointer<DBusMessageIter>.allocate(capacity: 1)
        defer { sub.deallocate() }
        let opened = if let signature {
            signature.withCString { dbus_message_iter_open_container(parent, type, $0, sub) != 0 }
        } else {
            dbus_message_iter_open_container(parent, type, nil, sub) != 0
        }
        guard opened else { throw .init(name: DBusError.Name.noMemory, message: "open container") }
        do {
            try fill(sub)
        } catch {
            dbus_message_iter_abandon_container(parent, sub)
            throw error
        }
        guard dbus_message_iter_close_container(parent, sub) != 0 else {
            throw .init(name: DBusError.Name.noMemory, message: "close container")
        }
    }
}

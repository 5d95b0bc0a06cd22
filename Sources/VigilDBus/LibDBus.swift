import CDBus

/// Small bridges to libdbus shared by the rest of the module.
enum LibDBus {
    /// libdbus's one-time global initialisation (the only global state of
    /// this module). Everything we do with a connection happens on its loop
    /// thread, but libdbus also keeps process-wide state (the shared
    /// connection table, fd-passing bookkeeping) that several connections on
    /// several loops touch, so its locks must exist: `static let` runs this
    /// exactly once, thread-safely.
    static let initialized: Bool = dbus_threads_init_default() != 0

    /// Takes the name and message out of a set C error and frees it.
    static func take(_ error: inout CDBus.DBusError, fallback: String) -> DBusError {
        defer { dbus_error_free(&error) }
        guard dbus_error_is_set(&error) != 0, let name = error.name else { return .failed(fallback) }
        return DBusError(name: String(cString: name), message: error.message.map { String(cString: $0) } ?? "")
    }

    /// libdbus aborts the process on an invalid name (its checks are fatal by
    /// default), so every name is validated here before libdbus sees it.
    static func validate(_ kind: NameKind, _ name: String) throws(DBusError) {
        let valid = name.withCString { pointer -> Bool in
            guard !name.utf8.contains(0) else { return false }
            switch kind {
            case .path: return dbus_validate_path(pointer, nil) != 0
            case .interface: return dbus_validate_interface(pointer, nil) != 0
            case .member: return dbus_validate_member(pointer, nil) != 0
            case .busName: return dbus_validate_bus_name(pointer, nil) != 0
            case .errorName: return dbus_validate_error_name(pointer, nil) != 0
            case .signature: return dbus_signature_validate(pointer, nil) != 0
            case .singleSignature: return dbus_signature_validate_single(pointer, nil) != 0
            }
        }
        guard valid else { throw .invalidArgs("invalid \(kind.rawValue) '\(name)'") }
    }

    enum NameKind: String {
        case path = "object path", interface, member = "member name", busName = "bus name"
        case errorName = "error name", signature, singleSignature = "single complete type signature"
    }
}

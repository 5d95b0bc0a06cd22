/// Checks that libdbus would accept a value before it sees it: its "fatal
/// checks" abort the process on a bad signature, a string with a NUL or an
/// array element of the wrong type, and a bad value must be an error instead.
extension DBusValue {
    func validate() throws(DBusError) {
        switch self {
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .objectPath, .unixFD:
            return
        case .string(let string):
            guard !string.utf8.contains(0) else { throw .invalidArgs("string contains a NUL character") }
        case .signature(let signature):
            try LibDBus.validate(.signature, signature)
        case .array(let element, let values):
            try LibDBus.validate(.singleSignature, element)
            for value in values {
                guard value.signature == element else {
                    throw .invalidArgs("array element of type '\(value.signature)' in an array of '\(element)'")
                }
                try value.validate()
            }
        case .dictionary(let key, let valueSignature, let entries):
            guard key.count == 1, Self.basicTypeCodes.contains(key) else {
                throw .invalidArgs("dictionary key type '\(key)' is not a basic type")
            }
            try LibDBus.validate(.singleSignature, valueSignature)
            for entry in entries {
                guard entry.key.signature == key, entry.value.signature == valueSignature else {
                    throw .invalidArgs("dictionary entry {\(entry.key.signature)\(entry.value.signature)} "
                        + "in a dictionary of {\(key)\(valueSignature)}")
                }
                try entry.key.validate()
                try entry.value.validate()
            }
        case .struct(let fields):
            guard !fields.isEmpty else { throw .invalidArgs("a struct needs at least one field") }
            for field in fields { try field.validate() }
        case .variant(let inner):
            try inner.validate()
            // Catches nesting too deep for one signature (more than 32 levels).
            try LibDBus.validate(.singleSignature, inner.signature)
        }
    }

    static let basicTypeCodes: Set<String> = ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h"]

    /// Whether the value holds a unix fd anywhere inside.
    var containsUnixFD: Bool {
        switch self {
        case .unixFD: true
        case .array(let element, let values): element.contains("h") || values.contains { $0.containsUnixFD }
        case .dictionary(_, _, let entries): entries.contains { $0.key.containsUnixFD || $0.value.containsUnixFD }
        case .struct(let fields): fields.contains { $0.containsUnixFD }
        case .variant(let inner): inner.containsUnixFD
        default: false
        }
    }
}

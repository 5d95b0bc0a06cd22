import VigilLifecycle
import VigilProtocol
import VigilTOML

/// Reads typed fields out of one TOML table, turning every mistake into a
/// `ManifestProblem` that names the file and the field (and, for a number out
/// of range, the value and the range).
struct TOMLFields {
    let table: TOMLTable
    let file: String
    let prefix: String

    init(table: TOMLTable, file: String, prefix: String = "") {
        self.table = table
        self.file = file
        self.prefix = prefix
    }

    /// Parses a whole document; a syntax error names the line and column.
    static func parse(_ bytes: [UInt8], file: String) throws(ManifestProblem) -> TOMLFields {
        do {
            return TOMLFields(table: try TOMLDocument.parse(bytes), file: file)
        } catch {
            throw ManifestProblem(file: file, field: nil, message: "not valid TOML: \(error)")
        }
    }

    static func parse(_ text: String, file: String) throws(ManifestProblem) -> TOMLFields {
        try parse(Array(text.utf8), file: file)
    }

    func problem(_ key: String, _ message: String) -> ManifestProblem {
        ManifestProblem(file: file, field: prefix + key, message: message)
    }

    /// Refuses keys this version does not know, so a typo never passes silently.
    func rejectUnknownKeys(allowed: Set<String>) throws(ManifestProblem) {
        if let unknown = table.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw problem(unknown, "unknown field (known: \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    func string(_ key: String) throws(ManifestProblem) -> String? {
        guard let value = table[key] else { return nil }
        guard let string = value.string else { throw problem(key, "must be a string, not \(value.typeDescription)") }
        return string
    }

    func requiredString(_ key: String) throws(ManifestProblem) -> String {
        guard let value = try string(key) else { throw problem(key, "is required") }
        return value
    }

    func bool(_ key: String) throws(ManifestProblem) -> Bool? {
        guard let value = table[key] else { return nil }
        guard let bool = value.bool else { throw problem(key, "must be true or false, not \(value.typeDescription)") }
        return bool
    }

    /// A number of seconds within `range`; integers are accepted too.
    func seconds(_ key: String, in range: ClosedRange<Double>) throws(ManifestProblem) -> Double? {
        guard let value = table[key] else { return nil }
        let expected = "a number of seconds from \(Self.show(range.lowerBound)) to \(Self.show(range.upperBound))"
        let number: Double
        switch value {
        case .float(let float): number = float
        case .integer(let integer): number = Double(integer)
        default: throw problem(key, "must be \(expected), not \(value.typeDescription)")
        }
        guard range.contains(number) else {  // NaN is in no range
            throw problem(key, "\(Self.show(number)) is out of range: must be \(expected)")
        }
        return number
    }

    /// An integer within `range`.
    func integer(_ key: String, in range: ClosedRange<Int>) throws(ManifestProblem) -> Int? {
        guard let value = table[key] else { return nil }
        let expected = "an integer from \(range.lowerBound) to \(range.upperBound)"
        guard let integer = value.integer else {
            let shown = value.float.map { " (\(Self.show($0)))" } ?? ""
            throw problem(key, "must be \(expected), not \(value.typeDescription)\(shown)")
        }
        guard integer >= Int64(range.lowerBound), integer <= Int64(range.upperBound) else {
            throw problem(key, "\(integer) is out of range: must be \(expected)")
        }
        return Int(integer)
    }

    /// A number as the user would write it: `5`, `0.25`, `1e+300`.
    static func show(_ number: Double) -> String {
        if number.isFinite, number == number.rounded(), abs(number) < 1e15 { return String(Int64(number)) }
        return number.description
    }

    func stringArray(_ key: String) throws(ManifestProblem) -> [String]? {
        guard let value = table[key] else { return nil }
        guard let array = value.array else {
            throw problem(key, "must be an array of strings, not \(value.typeDescription)")
        }
        var strings: [String] = []
        for (index, element) in array.enumerated() {
            guard let string = element.string else {
                throw problem("\(key)[\(index)]", "must be a string, not \(element.typeDescription)")
            }
            strings.append(string)
        }
        return strings
    }

    func subtable(_ key: String) throws(ManifestProblem) -> TOMLFields? {
        guard let value = table[key] else { return nil }
        guard let table = value.table else { throw problem(key, "must be a table, not \(value.typeDescription)") }
        return TOMLFields(table: table, file: file, prefix: prefix + key + ".")
    }

    /// A table whose values are all strings (e.g. environment variables).
    func stringTable(_ key: String) throws(ManifestProblem) -> [String: String]? {
        guard let fields = try subtable(key) else { return nil }
        var result: [String: String] = [:]
        for name in fields.table.keys {
            result[name] = try fields.requiredString(name)
        }
        return result
    }
}

extension TOMLFields {
    /// An array of tables (`[[name]]`), each read with its index in field names.
    func tableArray(_ key: String) throws(ManifestProblem) -> [TOMLFields] {
        guard let value = table[key] else { return [] }
        guard let array = value.array else {
            throw problem(key, "must be an array of tables ([[\(key)]]), not \(value.typeDescription)")
        }
        var result: [TOMLFields] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else {
                throw problem("\(key)[\(index)]", "must be a table, not \(element.typeDescription)")
            }
            result.append(TOMLFields(table: table, file: file, prefix: prefix + "\(key)[\(index)]."))
        }
        return result
    }
}

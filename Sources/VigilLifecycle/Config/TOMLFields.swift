import TOMLKit
import VigilProtocol

/// Reads typed fields out of one TOML table, turning every mistake into a
/// `ManifestProblem` that names the file and the field.
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
    static func parse(_ text: String, file: String) throws(ManifestProblem) -> TOMLFields {
        do {
            return TOMLFields(table: try TOMLTable(string: text), file: file)
        } catch let error as TOMLParseError {
            throw ManifestProblem(
                file: file, field: nil,
                message: "not valid TOML: \(error.description) at line \(error.source.begin.line), column \(error.source.begin.column)")
        } catch {
            throw ManifestProblem(file: file, field: nil, message: "not valid TOML: \(error)")
        }
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
        guard let string = value.string else { throw problem(key, "must be a string") }
        return string
    }

    func requiredString(_ key: String) throws(ManifestProblem) -> String {
        guard let value = try string(key) else { throw problem(key, "is required") }
        return value
    }

    func bool(_ key: String) throws(ManifestProblem) -> Bool? {
        guard let value = table[key] else { return nil }
        guard let bool = value.bool else { throw problem(key, "must be true or false") }
        return bool
    }

    /// A non-negative number of seconds; integers are accepted too.
    func seconds(_ key: String) throws(ManifestProblem) -> Double? {
        guard let value = table[key] else { return nil }
        guard let number = value.double ?? value.int.map(Double.init), number >= 0, number.isFinite else {
            throw problem(key, "must be a non-negative number of seconds")
        }
        return number
    }

    func positiveInt(_ key: String) throws(ManifestProblem) -> Int? {
        guard let value = table[key] else { return nil }
        guard let int = value.int, int > 0 else { throw problem(key, "must be a positive integer") }
        return int
    }

    func stringArray(_ key: String) throws(ManifestProblem) -> [String]? {
        guard let value = table[key] else { return nil }
        guard let array = value.array else { throw problem(key, "must be an array of strings") }
        var strings: [String] = []
        for (index, element) in array.enumerated() {
            guard let string = element.string else {
                throw problem("\(key)[\(index)]", "must be a string")
            }
            strings.append(string)
        }
        return strings
    }

    func subtable(_ key: String) throws(ManifestProblem) -> TOMLFields? {
        guard let value = table[key] else { return nil }
        guard let table = value.table else { throw problem(key, "must be a table") }
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
        guard let array = value.array else { throw problem(key, "must be an array of tables ([[\(key)]])") }
        var result: [TOMLFields] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else { throw problem("\(key)[\(index)]", "must be a table") }
            result.append(TOMLFields(table: table, file: file, prefix: prefix + "\(key)[\(index)]."))
        }
        return result
    }
}

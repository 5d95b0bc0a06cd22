/// One TOML value. Tables keep their keys in document order.
public enum TOMLValue: Sendable, Equatable {
    case string(String)
    case integer(Int64)
    case float(Double)
    case boolean(Bool)
    case dateTime(TOMLDateTime)
    case array([TOMLValue])
    case table(TOMLTable)

    public var string: String? { if case .string(let value) = self { value } else { nil } }
    public var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
    public var float: Double? { if case .float(let value) = self { value } else { nil } }
    public var bool: Bool? { if case .boolean(let value) = self { value } else { nil } }
    public var dateTime: TOMLDateTime? { if case .dateTime(let value) = self { value } else { nil } }
    public var array: [TOMLValue]? { if case .array(let value) = self { value } else { nil } }
    public var table: TOMLTable? { if case .table(let value) = self { value } else { nil } }

    /// The type's name as error messages say it ("a string", "an integer", …).
    public var typeDescription: String {
        switch self {
        case .string: "a string"
        case .integer: "an integer"
        case .float: "a float"
        case .boolean: "a boolean"
        case .dateTime: "a date-time"
        case .array: "an array"
        case .table: "a table"
        }
    }
}

/// A table: keys in document order, each with its value.
public struct TOMLTable: Sendable, Equatable {
    public private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]

    public init() {}

    public subscript(key: String) -> TOMLValue? { values[key] }
    public var count: Int { keys.count }
    public var isEmpty: Bool { keys.isEmpty }

    /// Adds or replaces `key`; a new key goes last.
    public mutating func set(_ value: TOMLValue, for key: String) {
        if values.updateValue(value, forKey: key) == nil { keys.append(key) }
    }

    /// Equal when they hold the same keys and values, whatever the order.
    public static func == (lhs: TOMLTable, rhs: TOMLTable) -> Bool { lhs.values == rhs.values }
}

/// A TOML date-time: an offset date-time (date, time and offset), a local
/// date-time (no offset), a local date or a local time.
public struct TOMLDateTime: Sendable, Equatable, Hashable, CustomStringConvertible {
    public struct Date: Sendable, Equatable, Hashable {
        public var year: Int
        public var month: Int
        public var day: Int
    }
    public struct Time: Sendable, Equatable, Hashable {
        public var hour: Int
        public var minute: Int
        public var second: Int
        /// Fractional seconds; digits past nanoseconds are truncated (TOML allows that).
        public var nanosecond: Int
    }

    public var date: Date?
    public var time: Time?
    /// Minutes east of UTC, for an offset date-time (`Z` is 0).
    public var offsetMinutes: Int?

    /// In TOML's own form (RFC 3339), with `Z` for a zero offset.
    public var description: String {
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        var text = ""
        if let date { text += "\(pad(date.year, 4))-\(pad(date.month, 2))-\(pad(date.day, 2))" }
        if date != nil, time != nil { text += "T" }
        if let time {
            text += "\(pad(time.hour, 2)):\(pad(time.minute, 2)):\(pad(time.second, 2))"
            if time.nanosecond > 0 {
                var fraction = pad(time.nanosecond, 9)
                while fraction.hasSuffix("0") { fraction.removeLast() }
                text += "." + fraction
            }
        }
        if let offsetMinutes {
            if offsetMinutes == 0 {
                text += "Z"
            } else {
                let magnitude = abs(offsetMinutes)
                text += (offsetMinutes < 0 ? "-" : "+") + "\(pad(magnitude / 60, 2)):\(pad(magnitude % 60, 2))"
            }
        }
        return text
    }
}

/// Why a document is not valid TOML, and where (1-based line and column; the
/// column counts characters).
public struct TOMLError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var message: String

    public init(line: Int, column: Int, message: String) {
        self.line = line
        self.column = column
        self.message = message
    }

    public var description: String { "\(message) at line \(line), column \(column)" }
}

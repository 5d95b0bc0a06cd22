/// A validated object path such as `/org/bluez/hci0`.
///
/// libdbus aborts the process when handed an invalid path, so paths are
/// checked once, here, and everything downstream takes this type.
public struct ObjectPath: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    /// Throws `InvalidArgs` unless `rawValue` is a valid object path.
    public init(_ rawValue: String) throws(DBusError) {
        try LibDBus.validate(.path, rawValue)
        self.rawValue = rawValue
    }

    /// For paths written in the source: an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        do {
            try self.init(value)
        } catch {
            preconditionFailure("invalid object path literal '\(value)'")
        }
    }

    /// Already validated (it came from libdbus).
    init(trusted rawValue: String) {
        self.rawValue = rawValue
    }

    public static let root = ObjectPath(trusted: "/")

    /// Whether `self` is `other` or lies below it.
    public func isInside(_ other: ObjectPath) -> Bool {
        other.rawValue == "/" || rawValue == other.rawValue || rawValue.hasPrefix(other.rawValue + "/")
    }

    /// `self` with one more element, e.g. `/org/bluez` + `hci0`; throws on an invalid element.
    public func appending(_ element: String) throws(DBusError) -> ObjectPath {
        try ObjectPath(rawValue == "/" ? "/" + element : rawValue + "/" + element)
    }

    public var description: String { rawValue }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }
}

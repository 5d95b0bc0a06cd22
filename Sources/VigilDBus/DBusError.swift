/// A D-Bus error: one the peer replied with, or one raised locally under the
/// same naming scheme, so callers handle "the bus said no" and "we never got
/// an answer" with one `catch` and compare names rather than parse text.
public struct DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An error name such as `org.freedesktop.DBus.Error.UnknownMethod`.
    public var name: String
    /// Human-readable detail; not meant to be parsed.
    public var message: String

    public init(name: String, message: String = "") {
        self.name = name
        self.message = message
    }

    public var description: String {
        message.isEmpty ? name : "\(name): \(message)"
    }

    /// Well-known error names (the ones BlueZ and the bus daemon use, and the
    /// ones this library raises locally).
    public enum Name {
        public static let failed = "org.freedesktop.DBus.Error.Failed"
        /// The call got no reply in time (also raised locally on our own timeout).
        public static let noReply = "org.freedesktop.DBus.Error.NoReply"
        public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
        public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
        public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
        /// The connection is closed or the bus went away (raised locally).
        public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
        public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
        public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
        public static let notSupported = "org.freedesktop.DBus.Error.NotSupported"
        public static let timeout = "org.freedesktop.DBus.Error.Timeout"
        public static let badAddress = "org.freedesktop.DBus.Error.BadAddress"
    }

    public static func failed(_ message: String) -> DBusError { DBusError(name: Name.failed, message: message) }
    public static func noReply(_ message: String) -> DBusError { DBusError(name: Name.noReply, message: message) }
    public static func invalidArgs(_ message: String) -> DBusError { DBusError(name: Name.invalidArgs, message: message) }
    public static func disconnected(_ message: String = "the connection to the bus is closed") -> DBusError {
        DBusError(name: Name.disconnected, message: message)
    }
    public static func unknownMethod(_ message: String) -> DBusError {
        DBusError(name: Name.unknownMethod, message: message)
    }
    public static func unknownObject(_ message: String) -> DBusError {
        DBusError(name: Name.unknownObject, message: message)
    }
}

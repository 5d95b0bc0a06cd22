import CDBus
import Glibc

/// A D-Bus message as a value: header fields and a typed body.
///
/// Converted to and from libdbus messages only at the connection, so the
/// rest of the daemon never handles libdbus pointers.
///
/// Unix fds in a received message's body are fresh descriptors. Who closes
/// them: the caller of `call` for a reply, the handler for a method call
/// (`DBusMethodCall`), the library for a signal (after the handlers return;
/// `dup` one to keep it).
public struct DBusMessage: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case methodCall, methodReturn, error, signal
    }

    public var kind: Kind
    public var path: ObjectPath?
    public var interface: String?
    public var member: String?
    public var destination: String?
    /// The sender's unique name, set by the bus on delivery.
    public var sender: String?
    /// The error name of an `.error` message.
    public var errorName: String?
    /// Assigned when sent; 0 for a message not sent yet.
    public var serial: UInt32
    /// For replies and errors: the serial of the call answered.
    public var replySerial: UInt32?
    /// A method call whose caller wants no answer.
    public var noReplyExpected: Bool
    public var body: [DBusValue]

    public init(
        kind: Kind, path: ObjectPath? = nil, interface: String? = nil, member: String? = nil,
        destination: String? = nil, sender: String? = nil, errorName: String? = nil,
        serial: UInt32 = 0, replySerial: UInt32? = nil, noReplyExpected: Bool = false, body: [DBusValue] = []
    ) {
        self.kind = kind
        self.path = path
        self.interface = interface
        self.member = member
        self.destination = destination
        self.sender = sender
        self.errorName = errorName
        self.serial = serial
        self.replySerial = replySerial
        self.noReplyExpected = noReplyExpected
        self.body = body
    }

    public static func methodCall(
        destination: String?, path: ObjectPath, interface: String?, member: String,
        body: [DBusValue] = [], noReplyExpected: Bool = false
    ) -> DBusMessage {
        DBusMessage(kind: .methodCall, path: path, interface: interface, member: member,
                    destination: destination, noReplyExpected: noReplyExpected, body: body)
    }

    /// A signal; `destination` nil broadcasts it.
    public static func signal(
        path: ObjectPath, interface: String, member: String, body: [DBusValue] = [], destination: String? = nil
    ) -> DBusMessage {
        DBusMessage(kind: .signal, path: path, interface: interface, member: member,
                    destination: destination, body: body)
    }

    /// The text of an error message (its first argument, by convention).
    public var errorMessage: String? { body.first?.string }

    /// The error an `.error` message carries.
    public var error: DBusError? {
        guard kind == .error else { return nil }
        return DBusError(name: errorName ?? DBusError.Name.failed, message: errorMessage ?? "")
    }
}

/// Owns one reference to a libdbus message.
final class RawMessage {
    let pointer: OpaquePointer

    init(adopting pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        dbus_message_unref(pointer)
    }
}

extension DBusMessage {
    /// The libdbus message; validates every name first, because libdbus
    /// aborts the process on an invalid one.
    func makeRaw() throws(DBusError) -> RawMessage {
        if let destination { try LibDBus.validate(.busName, destination) }
        if let interface { try LibDBus.validate(.interface, interface) }
        if let member { try LibDBus.validate(.member, member) }
        if let errorName { try LibDBus.validate(.errorName, errorName) }
        let type: Int32 = switch kind {
        case .methodCall: CDBUS_MESSAGE_TYPE_METHOD_CALL
        case .methodReturn: CDBUS_MESSAGE_TYPE_METHOD_RETURN
        case .error: CDBUS_MESSAGE_TYPE_ERROR
        case .signal: CDBUS_MESSAGE_TYPE_SIGNAL
        }
        switch kind {
        case .methodCall, .signal:
            guard path != nil, member != nil else { throw .invalidArgs("a \(kind) needs a path and a member") }
            if kind == .signal, interface == nil { throw .invalidArgs("a signal needs an interface") }
        case .methodReturn, .error:
            guard replySerial != nil else { throw .invalidArgs("a \(kind) needs a reply serial") }
            if kind == .error, errorName == nil { throw .invalidArgs("an error needs an error name") }
        }
        guard let pointer = dbus_message_new(type) else { throw .init(name: DBusError.Name.noMemory) }
        let raw = RawMessage(adopting: pointer)
        var ok = true
        if let path { ok = ok && dbus_message_set_path(pointer, path.rawValue) != 0 }
        if let interface { ok = ok && dbus_message_set_interface(pointer, interface) != 0 }
        if let member { ok = ok && dbus_message_set_member(pointer, member) != 0 }
        if let destination { ok = ok && dbus_message_set_destination(pointer, destination) != 0 }
        if let errorName { ok = ok && dbus_message_set_error_name(pointer, errorName) != 0 }
        if let replySerial { ok = ok && dbus_message_set_reply_serial(pointer, replySerial) != 0 }
        if noReplyExpected { dbus_message_set_no_reply(pointer, 1) }
        guard ok else { throw .init(name: DBusError.Name.noMemory) }
        try MessageEncoder.append(body, to: pointer)
        return raw
    }

    /// Header fields only; the body is decoded separately (and only when
    /// someone wants it, since decoding dups any fds).
    init(header pointer: OpaquePointer) {
        let kind: Kind = switch dbus_message_get_type(pointer) {
        case CDBUS_MESSAGE_TYPE_METHOD_CALL: .methodCall
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN: .methodReturn
        case CDBUS_MESSAGE_TYPE_ERROR: .error
        default: .signal
        }
        let replySerial = dbus_message_get_reply_serial(pointer)
        self.init(
            kind: kind,
            path: dbus_message_get_path(pointer).map { ObjectPath(trusted: String(cString: $0)) },
            interface: dbus_message_get_interface(pointer).map { String(cString: $0) },
            member: dbus_message_get_member(pointer).map { String(cString: $0) },
            destination: dbus_message_get_destination(pointer).map { String(cString: $0) },
            sender: dbus_message_get_sender(pointer).map { String(cString: $0) },
            errorName: dbus_message_get_error_name(pointer).map { String(cString: $0) },
            serial: dbus_message_get_serial(pointer),
            replySerial: replySerial == 0 ? nil : replySerial,
            noReplyExpected: dbus_message_get_no_reply(pointer) != 0)
    }

    /// Header and body.
    init(decoding pointer: OpaquePointer) {
        self.init(header: pointer)
        body = MessageDecoder.body(of: pointer)
    }

    /// Closes every unix fd in the body (for messages nobody took ownership of).
    func closeUnixFDs() {
        for value in body { value.closeUnixFDs() }
    }
}

extension DBusValue {
    func closeUnixFDs() {
        switch self {
        case .unixFD(let fd): _ = Glibc.close(fd)
        case .array(_, let values): values.forEach { $0.closeUnixFDs() }
        case .dictionary(_, _, let entries): entries.forEach { $0.key.closeUnixFDs(); $0.value.closeUnixFDs() }
        case .struct(let fields): fields.forEach { $0.closeUnixFDs() }
        case .variant(let inner): inner.closeUnixFDs()
        default: break
        }
    }
}

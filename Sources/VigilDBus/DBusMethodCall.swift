import Synchronization
import VigilSystem

/// An incoming method call on an exported object, answered once, now or later.
///
/// BlueZ's GATT ReadValue may have to wait for a suspended app, so answering
/// is decoupled from the handler returning: keep the call, await whatever is
/// needed, then `reply` from any task or thread (the send itself happens on
/// the loop). A call never answered leaves the caller to its timeout; a call
/// released unanswered is answered with Failed and reported through
/// `DBusConnection.onUnansweredCall`.
///
/// Unix fds among the arguments belong to the handler.
public final class DBusMethodCall: Sendable {
    public let message: DBusMessage
    public let connection: DBusConnection
    private let answered = Atomic(false)

    init(message: DBusMessage, connection: DBusConnection) {
        self.message = message
        self.connection = connection
    }

    deinit {
        guard !answered.load(ordering: .acquiring), !message.noReplyExpected else { return }
        let member = "\(message.interface ?? "").\(message.member ?? "")"
        let pending = try? message.makeErrorReply(.failed("\(member) was dropped without a reply"))
        let handoff = RawHandoff(pending)
        let connection = connection
        let message = message
        connection.loop.execute {
            connection.assumeIsolated { connection in
                if let raw = handoff.message { _ = try? connection.send(raw) }
                connection.unansweredCallHandler?(message)
            }
        }
    }

    public var path: ObjectPath { message.path ?? .root }
    public var interface: String? { message.interface }
    public var member: String { message.member ?? "" }
    public var sender: String? { message.sender }
    public var arguments: [DBusValue] { message.body }

    /// Whether an answer was sent (or the caller wants none).
    public var isAnswered: Bool { answered.load(ordering: .acquiring) || message.noReplyExpected }

    /// Answers with a method return. Throws (and leaves the call unanswered)
    /// if the values cannot be encoded; a second answer is ignored.
    public func reply(_ values: [DBusValue] = []) throws(DBusError) {
        try answer(message.makeReply(values))
    }

    /// Answers with an error.
    public func replyError(_ error: DBusError) {
        // A bad error name must still answer the call: fall back to Failed.
        let fallback = DBusError.failed("\(error.name): \(error.message)")
        guard let raw = (try? message.makeErrorReply(error)) ?? (try? message.makeErrorReply(fallback)) else { return }
        try? answer(raw)
    }

    public func replyError(name: String, message text: String) {
        replyError(DBusError(name: name, message: text))
    }

    /// The standard answer for a member the handler does not implement.
    public func replyUnknownMethod() {
        replyError(.unknownMethod(
            "no method \(member) in interface \(interface ?? "(none)") at \(path) with signature '\(message.body.dbusSignature)'"))
    }

    /// Built here, on the caller's thread, so fds are duplicated before the
    /// caller may close its own; sent on the loop.
    private func answer(_ raw: RawMessage) throws(DBusError) {
        guard !message.noReplyExpected else { return }
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let connection = connection
        let handoff = RawHandoff(raw)
        if connection.loop.isInLoopThread {
            connection.assumeIsolated { connection in
                if let raw = handoff.message { _ = try? connection.send(raw) }
            }
        } else {
            connection.loop.execute {
                connection.assumeIsolated { connection in
                    if let raw = handoff.message { _ = try? connection.send(raw) }
                }
            }
        }
    }
}

/// Moves a built message to the loop thread. It is not shared: the sender
/// gives it up, so the unchecked Sendable is sound.
private final class RawHandoff: @unchecked Sendable {
    let message: RawMessage?
    init(_ message: RawMessage?) { self.message = message }
}

extension DBusMessage {
    func makeReply(_ values: [DBusValue]) throws(DBusError) -> RawMessage {
        try DBusMessage(kind: .methodReturn, destination: sender, replySerial: serial, body: values).makeRaw()
    }

    func makeErrorReply(_ error: DBusError) throws(DBusError) -> RawMessage {
        try DBusMessage(kind: .error, destination: sender, errorName: error.name, replySerial: serial,
                        body: error.message.isEmpty ? [] : [.string(error.message)]).makeRaw()
    }
}

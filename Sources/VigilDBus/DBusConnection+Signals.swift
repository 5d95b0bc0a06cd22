import CDBus

/// Signal subscriptions: a match rule on the bus plus the same rule applied
/// locally, because the bus merges all of a connection's rules into one stream.
extension DBusConnection {
    struct Subscription {
        var rule: MatchRule
        var handler: @Sendable (DBusMessage) -> Void
    }

    /// Adds `rule` on the bus (AddMatch; active when this returns) and calls
    /// `handler` on the loop thread, in arrival order, for each matching
    /// message. Unix fds in a signal are closed once the handlers returned.
    public func subscribe(
        to rule: MatchRule,
        handler: @escaping @Sendable (DBusMessage) -> Void
    ) async throws(DBusError) -> SignalSubscription {
        try rule.validate()
        guard raw != nil else { throw .disconnected() }
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        subscriptions[id] = Subscription(rule: rule, handler: handler)
        do {
            _ = try await callBus("AddMatch", [.string(rule.ruleString)])
        } catch {
            subscriptions[id] = nil
            throw error
        }
        return SignalSubscription(connection: self, id: id)
    }

    /// Stops local delivery at once, and removes the rule from the bus.
    func unsubscribe(_ id: UInt64) {
        guard let subscription = subscriptions.removeValue(forKey: id) else { return }
        // No reply wanted: nothing to do if it fails, and close() may follow at once.
        let remove = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "RemoveMatch", body: [.string(subscription.rule.ruleString)], noReplyExpected: true)
        _ = try? send(remove)
    }

    /// Every incoming message passes here first (libdbus filter); true if consumed.
    func filter(_ handle: LibDBusHandle) -> Bool {
        guard let message = handle.pointer else { return false }
        switch dbus_message_get_type(message) {
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN, CDBUS_MESSAGE_TYPE_ERROR:
            return handleReply(message)
        case CDBUS_MESSAGE_TYPE_METHOD_CALL:
            return handleMethodCall(message)
        case CDBUS_MESSAGE_TYPE_SIGNAL:
            if dbus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
                tearDown(.disconnected("the bus closed the connection"))
                return true
            }
            deliverSignal(message)
            return false
        default:
            return false
        }
    }

    private func deliverSignal(_ raw: OpaquePointer) {
        let header = DBusMessage(header: raw)
        var firstString: String??
        let matching = subscriptions.sorted { $0.key < $1.key }.filter { _, subscription in
            subscription.rule.matches(header) {
                if firstString == nil { firstString = .some(MessageDecoder.firstString(of: raw)) }
                return firstString ?? nil
            }
        }
        guard !matching.isEmpty else { return }
        let message = DBusMessage(decoding: raw)
        defer { message.closeUnixFDs() }
        for (id, subscription) in matching where subscriptions[id] != nil {
            // An earlier handler may have cancelled this subscription: the check above skips it.
            subscription.handler(message)
        }
    }
}

/// A live subscription; `cancel()` ends it. Not cancelled on deinit: it
/// lasts until cancelled or the connection closes.
public final class SignalSubscription: Sendable {
    public let connection: DBusConnection
    let id: UInt64

    init(connection: DBusConnection, id: UInt64) {
        self.connection = connection
        self.id = id
    }

    /// No handler call starts after this returns; the bus rule is removed.
    public func cancel() async {
        await connection.unsubscribe(id)
    }
}

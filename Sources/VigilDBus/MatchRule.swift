/// Which messages a subscription wants, as a bus match rule.
///
/// The bus merges the rules of all subscriptions of a connection into one
/// stream, so the same rule is also applied locally to route each message to
/// the right handlers.
public struct MatchRule: Sendable, Hashable {
    public enum MessageType: String, Sendable, Hashable {
        case signal, methodCall = "method_call", methodReturn = "method_return", error
    }

    public var type: MessageType?
    /// A unique (":1.42") or well-known ("org.bluez") name. The bus resolves a
    /// well-known name to its owner; locally only a unique name is compared.
    public var sender: String?
    public var path: ObjectPath?
    /// The path itself or anything below it.
    public var pathNamespace: ObjectPath?
    public var interface: String?
    public var member: String?
    /// The first argument, if it is a string equal to this.
    public var arg0: String?

    public init(
        type: MessageType? = .signal, sender: String? = nil, path: ObjectPath? = nil,
        pathNamespace: ObjectPath? = nil, interface: String? = nil, member: String? = nil, arg0: String? = nil
    ) {
        self.type = type
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
        self.arg0 = arg0
    }

    /// Rejects names libdbus or the bus would refuse.
    func validate() throws(DBusError) {
        if let sender { try LibDBus.validate(.busName, sender) }
        if let interface { try LibDBus.validate(.interface, interface) }
        if let member { try LibDBus.validate(.member, member) }
        if let arg0, arg0.utf8.contains(0) { throw .invalidArgs("arg0 contains a NUL character") }
        if path != nil, pathNamespace != nil { throw .invalidArgs("a match rule cannot have both path and path_namespace") }
    }

    /// The rule as the bus's AddMatch takes it.
    public var ruleString: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // Values are quoted with '; a quote inside is written '\'' (close, escaped quote, reopen).
            parts.append("\(key)='\(value.replacingOccurrences(of: "'", with: "'\\''"))'")
        }
        add("type", type?.rawValue)
        add("sender", sender)
        add("path", path?.rawValue)
        add("path_namespace", pathNamespace?.rawValue)
        add("interface", interface)
        add("member", member)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// The local half of the filter. `firstString` is the message's first
    /// argument if that is a string (read lazily by the caller).
    func matches(_ message: DBusMessage, firstString: () -> String?) -> Bool {
        if let type {
            let kind: DBusMessage.Kind = switch type {
            case .signal: .signal
            case .methodCall: .methodCall
            case .methodReturn: .methodReturn
            case .error: .error
            }
            guard message.kind == kind else { return false }
        }
        if let sender, sender.hasPrefix(":"), message.sender != sender { return false }
        if let path, message.path != path { return false }
        if let pathNamespace {
            guard let messagePath = message.path, messagePath.isInside(pathNamespace) else { return false }
        }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let arg0, firstString() != arg0 { return false }
        return true
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

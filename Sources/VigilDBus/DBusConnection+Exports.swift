import CDBus

/// Exported objects: method calls from the bus routed to handlers by path.
///
/// Routing is ours (in the filter) rather than libdbus's object-path
/// registry: one table, plain Swift closures, and unknown paths answered
/// with UnknownObject.
extension DBusConnection {
    struct Export {
        var subtree: Bool
        var handler: @Sendable (DBusMethodCall) -> Void
    }

    /// Routes method calls for `path` (and, with `subtree`, for every path
    /// below it that has no registration of its own) to `handler`.
    ///
    /// The handler runs on the loop thread and must not block it: it answers
    /// through the `DBusMethodCall` at once or later (after an await), and
    /// answers UnknownMethod itself for members it does not know.
    public func export(
        _ path: ObjectPath,
        subtree: Bool = false,
        handler: @escaping @Sendable (DBusMethodCall) -> Void
    ) throws(DBusError) {
        guard raw != nil else { throw .disconnected() }
        guard exports[path] == nil else { throw .failed("an object is already exported at \(path)") }
        exports[path] = Export(subtree: subtree, handler: handler)
    }

    /// Removes a registration made with `export`; unknown paths are ignored.
    public func unexport(_ path: ObjectPath) {
        exports[path] = nil
    }

    /// Called for each call its handler releases without answering
    /// (the library then answers the caller with Failed, so it does not wait
    /// for its timeout): a bug in the handler, made visible.
    public func onUnansweredCall(_ handler: (@Sendable (DBusMessage) -> Void)?) {
        unansweredCallHandler = handler
    }

    /// The registration responsible for `path`: its own, else the nearest subtree above it.
    func export(for path: ObjectPath) -> Export? {
        if let exact = exports[path] { return exact }
        var best: (path: ObjectPath, export: Export)?
        for (candidate, export) in exports where export.subtree && path.isInside(candidate) {
            if best == nil || candidate.rawValue.count > (best?.path.rawValue.count ?? 0) {
                best = (candidate, export)
            }
        }
        return best?.export
    }

    func handleMethodCall(_ raw: OpaquePointer) -> Bool {
        let message = DBusMessage(decoding: raw)
        guard let path = message.path, let export = export(for: path) else {
            let error = DBusError.unknownObject("no object at \(message.path?.rawValue ?? "?")")
            if !message.noReplyExpected, let reply = try? message.makeErrorReply(error) {
                _ = try? send(reply)
            }
            message.closeUnixFDs()
            return true
        }
        export.handler(DBusMethodCall(message: message, connection: self))
        return true
    }
}

import VigilAccessories
import VigilProtocol

/// Accessory requests, shared by apps and control clients (who differ only in
/// what they may see and whether their data goes through the event queue).
extension DaemonCore {
    /// Handles `message` if it is an accessory request; false if it is not one.
    func handleAccessoryRequest(_ message: IncomingMessage, holder: SessionHolder, connection: ClientConnection) throws(ProtocolError) -> Bool {
        var app: String?
        if case let .app(id) = holder { app = id }
        switch message.type {
        case ListAccessories.type:
            send(accessoryList(for: app), id: message.id, to: connection)
        case RegisterForAccessoryNotifications.type:
            guard let app else { throw ProtocolError(.invalidArgument, "control clients use watchAccessories", id: message.id) }
            let request: RegisterForAccessoryNotifications = try message.decode()
            if request.enabled {
                accessoryState.registeredApps.insert(app)
            } else {
                accessoryState.registeredApps.remove(app)
            }
            send(Done(), id: message.id, to: connection)
        case WatchAccessories.type:
            guard app == nil else { throw ProtocolError(.invalidArgument, "apps use registerForAccessoryNotifications", id: message.id) }
            accessoryState.watchers.insert(connection.id)
            send(accessoryList(for: nil), id: message.id, to: connection)
        case OpenSession.type:
            let request: OpenSession = try message.decode()
            if let app, let accessory = accessoryState.registry.accessory(request.connectionID)?.info, !canSee(app, accessory) {
                throw ProtocolError(.notPermitted, "the app's manifest declares none of the protocols of accessory \(request.connectionID) (\(accessory.protocolStrings))", id: message.id)
            }
            send(try openSession(request, holder: holder), id: message.id, to: connection)
        case WriteToSession.type:
            let request: WriteToSession = try message.decode()
            try write(message.body, session: request.session, requestID: message.id, from: connection, holder: holder)
        case CloseSession.type:
            let request: CloseSession = try message.decode()
            guard accessoryState.sessions.sessions[request.session]?.holder == holder else {
                throw ProtocolError(.invalidArgument, "no session \(request.session) is held by this client", id: message.id)
            }
            // As any other end of the session: its log retires (what it read
            // and did not announce is still delivered) and the table is saved,
            // so a restarted daemon does not open it again.
            endSession(request.session, reason: "closed by its holder", keepForReopen: false, notify: false)
            send(Done(), id: message.id, to: connection)
        default:
            return false
        }
        return true
    }
}

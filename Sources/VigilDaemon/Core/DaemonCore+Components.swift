import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The core's side of `DaemonComponent`: one list, and every fan-out a loop
/// over it.
extension DaemonCore: DaemonServices, ConnectionHandler {
    /// A connection closed: its components are told, and the engine that the
    /// app it served has no connection now.
    func connectionClosed(_ connection: ClientConnection, app: String?) {
        componentsConnectionClosed(connection)
        if let app { withEngine { engine, _ in engine.disconnected(app) } }
    }

    var metrics: DaemonMetrics? { metricsComponent.endpoint?.metrics }

    var connectionCount: Int { clients.count }

    func connection(_ id: Int) -> ClientConnection? { clients.connection(id) }

    func connection(ofApp app: String) -> ClientConnection? {
        clients.connection(ofApp: app)
    }

    func component<C: DaemonComponent>(_ type: C.Type) -> C? {
        for component in components {
            if let match = component as? C { return match }
        }
        return nil
    }

    func components<P>(_ type: P.Type) -> [P] {
        components.compactMap { $0 as? P }
    }

    func answer(_ outcome: Result<(any Message, [UInt8]), ProtocolError>, id: Int?, connectionID: Int) {
        guard let connection = clients.connection(connectionID) else { return }  // the client left meanwhile
        switch outcome {
        case let .success((reply, body)):
            send(reply, id: id, body: body, to: connection)
        case let .failure(error):
            if let id { send(ProtocolError(error.code, error.message), id: id, to: connection) }
        }
    }

    func send(frame: [UInt8], to connection: ClientConnection) {
        clients.send(frame: frame, to: connection, services: self)
    }

    func close(_ connection: ClientConnection) {
        clients.close(connection, services: self)
    }

    func statusChanged() { systemd.update(services: self) }

    func credentials(ofApp app: String) -> SpawnCredentials? { apps.credentials(of: app, services: self) }
}

extension DaemonCore {
    /// Builds the request routing table: each type to the one component
    /// that lists it. Two components listing one type is a programming error.
    static func routes(for components: [any DaemonComponent]) -> [String: any DaemonComponent] {
        var routes: [String: any DaemonComponent] = [:]
        for component in components {
            for type in component.requestTypes {
                precondition(routes[type] == nil, "request type '\(type)' is claimed by \(routes[type]!.name) and \(component.name)")
                routes[type] = component
            }
        }
        return routes
    }

    func startComponents(restoring saved: DaemonSnapshot) throws {
        for component in components {
            try component.start(restoring: saved, services: self)
        }
    }

    func stopComponentIntake() {
        for component in components { component.stopIntake(services: self) }
    }

    func stopComponents(leavingApps: Bool) async {
        for component in components.reversed() {
            await component.stop(leavingApps: leavingApps, services: self)
        }
    }

    /// Routes a request to the component that handles its type; false if none does.
    func routeToComponent(_ message: IncomingMessage, from requester: Requester, on connection: ClientConnection) throws(ProtocolError) -> Bool {
        guard let component = requestRoutes[message.type] else { return false }
        try component.handle(message, from: requester, on: connection, services: self)
        return true
    }

    func componentsReloaded() {
        for component in components { component.manifestsReloaded(services: self) }
    }

    func componentsAppStateChanged(_ app: String, from old: AppState, to new: AppState) {
        for component in components { component.appStateChanged(app, from: old, to: new, services: self) }
    }

    func componentsWillAcknowledge(_ seq: UInt64, by app: String) {
        for observer in deliveryObservers { observer.willAcknowledge(seq, by: app, services: self) }
    }

    func componentsDidAcknowledge(by app: String) {
        for component in components { component.didAcknowledge(by: app, services: self) }
    }

    /// The launch options an app is told, with what components add (restore identifiers).
    func componentsLaunchOptions(_ launch: LaunchOptions?, of app: String) -> LaunchOptions? {
        guard var launch else { return nil }
        for component in components { component.addLaunchOptions(&launch, of: app, services: self) }
        return launch
    }

    func componentsWillSend(_ event: QueuedEvent, to app: String) {
        for observer in deliveryObservers { observer.willSend(event, to: app, services: self) }
    }

    func componentsConnectionClosed(_ connection: ClientConnection) {
        for component in components { component.connectionClosed(connection, services: self) }
    }

    func componentsStatus(_ status: inout DaemonStatus) {
        for component in components { component.addStatus(to: &status, services: self) }
    }


    func componentsSnapshot(_ snapshot: inout DaemonSnapshot) {
        for component in components { component.save(into: &snapshot, services: self) }
    }
}

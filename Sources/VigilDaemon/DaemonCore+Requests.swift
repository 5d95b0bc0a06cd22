import Glibc
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// Turns frames into engine calls and replies, per role.
extension DaemonCore {
    /// A request type as a metrics label: known types as they are, anything
    /// else (a client may send any string) as one label, so labels stay bounded.
    func metricsType(_ type: String) -> String {
        type.count <= 40 && type.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_") })
            && (type.hasPrefix("ble.") || Self.knownRequestTypes.contains(type) || requestRoutes[type] != nil) ? type : "other"
    }

    static let knownRequestTypes: Set<String> = [
        "hello", "ack", "beginBackgroundTask", "endBackgroundTask", "finishedProcessing", "backgroundTimeRemaining",
        "status", "apps", "appAction", "wake", "log", "reload", "accessories", "registerForAccessoryNotifications",
        "openSession", "write", "closeSession", "watchAccessories",
    ]

    func handle(_ frame: Frame, from connection: ClientConnection) {
        let message: IncomingMessage
        do {
            message = try IncomingMessage(frame: frame)
        } catch {
            return clients.fail(connection, error, services: self)
        }
        do {
            switch connection.phase {
            case .handshake:
                try handshake(message, connection)
            case let .app(app):
                try message.checkIntegerFields()
                try handleAppRequest(message, app: app, connection: connection)
            case .control:
                try message.checkIntegerFields()
                try handleControlRequest(message, connection: connection)
            case .closing:
                return
            }
        } catch {
            metrics?.count("vigil_request_errors_total", [("type", metricsType(message.type)), ("code", error.code.rawValue)])
            if error.closesConnection {
                clients.fail(connection, error, services: self)
            } else if case .handshake = connection.phase {
                // Before the handshake there is nothing to go on with: answer and
                // close, so a client waiting for `welcome` is never left waiting.
                clients.fail(connection, error, services: self)
            } else if let id = message.id {
                send(ProtocolError(error.code, error.message), id: id, to: connection)
            } else {
                logger.warning("client \(connection.id): \(error) (no id, nothing to answer)")
            }
        }
    }

    // MARK: Handshake

    private func handshake(_ message: IncomingMessage, _ connection: ClientConnection) throws(ProtocolError) {
        guard message.type == Hello.type else {
            throw ProtocolError(.handshakeRequired, "the first frame must be 'hello', not '\(message.type)'")
        }
        try message.checkIntegerFields()
        let hello: Hello = try message.decode()
        guard let version = hello.versions.filter(ProtocolVersion.supported.contains).max() else {
            throw ProtocolError(.unsupportedVersion, "no common protocol version: client speaks \(hello.versions), daemon speaks \(ProtocolVersion.supported)")
        }
        let pid = connection.credentials.pid
        let owner = apps.app(owning: pid, services: self)
        switch hello.role {
        case .control:
            if let owner {
                throw ProtocolError(.unauthorized, "process \(pid) belongs to app \(owner): apps cannot use the control role")
            }
            if case let .readOnly(reason) = try controlAccess(for: connection.credentials) {
                connection.readOnlyReason = reason
            }
            connection.phase = .control
            send(Welcome(version: version, daemon: Self.version, role: .control, limits: limits), to: connection)
        case .app:
            guard let owner, engine.apps[owner]?.pid != nil else {
                throw ProtocolError(.unauthorized, "process \(pid) is not part of an app launched by vigild")
            }
            if let claimed = hello.app, claimed != owner {
                throw ProtocolError(.unauthorized, "process \(pid) belongs to app \(owner), not \(claimed)")
            }
            clients.attach(connection, to: owner, services: self)
            // Welcome first, then whatever the engine sends on connecting (didBecomeActive, events).
            guard let app = withEngine({ engine, now in engine.identified(owner, now: now) }) else {
                throw ProtocolError(.unauthorized, "process \(pid) belongs to an app that is gone")
            }
            send(
                Welcome(
                    version: version, daemon: Self.version, role: .app, app: owner, state: app.state,
                    launch: componentsLaunchOptions(app.launch, of: owner), deadline: app.deadline, limits: limits,
                    features: [Welcome.Feature.finishAcknowledges]),
                to: connection)
            // The connecting process, told apart from a later one with its pid:
            // it may acknowledge on this connection what it was sent on an
            // earlier one, even of an earlier daemon (docs/lifecycle.md).
            let process = ProcessStat.read(pid).map { ProcessIdentity(pid: pid, startTime: $0.startTime) }
            _ = withEngine { engine, now in engine.connected(owner, now: now, process: process) }
        }
    }

    // MARK: App role

    private func handleAppRequest(_ message: IncomingMessage, app: String, connection: ClientConnection) throws(ProtocolError) {
        switch message.type {
        case Acknowledge.type:
            let ack: Acknowledge = try message.decode()
            componentsWillAcknowledge(ack.seq, by: app)
            withEngine { engine, now in engine.acknowledge(app, upTo: ack.seq, now: now) }
            componentsDidAcknowledge(by: app)
            metrics?.acknowledged(by: app, now: now)
        case BeginBackgroundTask.type:
            let request: BeginBackgroundTask = try message.decode()
            let task = withEngine { engine, now in engine.beginBackgroundTask(app, name: request.name, now: now) }
            send(BackgroundTaskGranted(task: task), id: message.id, to: connection)
        case EndBackgroundTask.type:
            let request: EndBackgroundTask = try message.decode()
            guard engine.apps[app]?.tasks.contains(where: { $0.id == request.task }) == true else {
                throw ProtocolError(.invalidArgument, "no background task \(request.task) is held", id: message.id)
            }
            // Reply before the engine may freeze the app.
            send(Done(), id: message.id, to: connection)
            try withEngine { engine, now throws(ProtocolError) in try engine.endBackgroundTask(app, task: request.task, now: now) }
        case FinishedProcessing.type:
            let finished: FinishedProcessing = try message.decode()
            guard let seq = finished.ack else {
                send(Done(), id: message.id, to: connection)
                withEngine { engine, now in engine.finishedProcessing(app, now: now) }
                return
            }
            // `ack` then `finishedProcessing` in one engine call: one journal
            // commit, one timer rearm, one loop turn. The order is the two
            // frames': what the ack lets go out, then the reply, then the finish.
            componentsWillAcknowledge(seq, by: app)
            withEngine { engine, now in
                engine.finishedProcessing(app, acknowledgingUpTo: seq, now: now) {
                    componentsDidAcknowledge(by: app)
                    send(Done(), id: message.id, to: connection)
                }
            }
            metrics?.acknowledged(by: app, now: now)
        case QueryBackgroundTime.type:
            let seconds = withEngine { engine, now in engine.backgroundTimeRemaining(app, now: now) }
            send(BackgroundTimeRemaining(seconds: seconds), id: message.id, to: connection)
        default:
            if try routeToComponent(message, from: .app(app), on: connection) { return }
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)' for an app", id: message.id)
        }
    }

    // MARK: Control role

    private func handleControlRequest(_ message: IncomingMessage, connection: ClientConnection) throws(ProtocolError) {
        if let reason = connection.readOnlyReason, !Self.readOnlyControlRequests.contains(message.type) {
            throw ProtocolError(.notPermitted, "'\(message.type)' is not permitted: \(reason)", id: message.id)
        }
        switch message.type {
        case StatusRequest.type:
            send(status(), id: message.id, to: connection)
        case ListApps.type:
            send(AppList(apps: engine.apps.keys.sorted().compactMap(appInfo)), id: message.id, to: connection)
        case AppActionRequest.type:
            let request: AppActionRequest = try message.decode()
            try withEngine { engine, now throws(ProtocolError) in
                switch request.action {
                case .launch: try engine.launch(request.app, now: now)
                case .background: try engine.moveToBackground(request.app, now: now)
                case .foreground: try engine.moveToForeground(request.app, now: now)
                case .quit: try engine.forceQuit(request.app, now: now)
                case .terminate: try engine.terminate(request.app, now: now)
                }
            }
            guard let info = appInfo(request.app) else {
                throw ProtocolError(.unknownApp, "no app with id '\(request.app)'")
            }
            send(AppReply(app: info), id: message.id, to: connection)
        case WakeRequest.type:
            let request: WakeRequest = try message.decode()
            let kind = request.kind ?? "test"
            // As a real source would: an app lacking the kind's mode is not woken for it.
            let event = QueuedEvent(
                kind: kind, attributes: request.attributes ?? [:], payload: message.body, wakeMode: BackgroundMode(wakingFor: kind))
            let result = try withEngine { engine, now throws(ProtocolError) in
                try engine.deliver(event, to: request.app, now: now)
            }
            send(EventAccepted(seq: result.seq, disposition: result.disposition.rawValue), id: message.id, to: connection)
        case LogRequest.type:
            let request: LogRequest = try message.decode()
            if let since = request.since, !since.isFinite {
                throw ProtocolError(.invalidArgument, "log: since must be a finite time (seconds since the epoch)", id: message.id)
            }
            answerLog(request, id: message.id, connection: connection)
        case ReloadRequest.type:
            reloadManifests()
            send(ReloadResult(apps: engine.apps.keys.sorted(), problems: manifestProblems), id: message.id, to: connection)
        default:
            if try routeToComponent(message, from: .control(connection: connection.id), on: connection) { return }
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)' for a control client", id: message.id)
        }
    }

    func status() -> DaemonStatus {
        var status = DaemonStatus(
            daemon: Self.version, pid: getpid(), protocolVersion: ProtocolVersion.current, socket: socketPath,
            suspension: apps.suspension.mechanism, suspensionDetail: apps.suspension.detail, cgroupRoot: apps.suspension.cgroupRoot,
            apps: engine.apps.count, manifestProblems: manifestProblems, timings: config.timings.asDictionary,
            uptime: Double((MonotonicInstant.now() - started).components.seconds), onStop: onStop.rawValue,
            bluetooth: nil)
        componentsStatus(&status)
        return status
    }

    func appInfo(_ id: String) -> AppInfo? {
        guard let app = engine.apps[id] else { return nil }
        let now = self.now
        var info = AppInfo(
            id: id, state: app.state, pid: app.pid, backgroundModes: app.manifest.backgroundModes.sorted { $0.rawValue < $1.rawValue },
            exitsOnSuspend: app.manifest.exitsOnSuspend, forceQuit: app.forceQuit, wakes: app.wakes, launches: app.launches,
            backgroundTimeUsed: engine.backgroundTimeUsed(id, now: now),
            backgroundTimeRemaining: engine.backgroundTimeRemaining(id, now: now),
            tasks: app.tasks, queuedEvents: app.queue.queuedCount, unacknowledgedEvents: app.queue.unacknowledgedCount,
            droppedEvents: app.queue.totalDropped, lastDecision: app.lastDecision?.action.rawValue,
            lastReason: app.lastDecision?.reason, launchReason: app.launch?.reason, logPath: apps.logFile(of: id, config: config),
            manifestPath: app.manifest.path)
        if info.logPath == nil { info.journalIdentifier = id }
        if let refresh = app.refresh {
            info.nextRefresh = Double(refresh.due - min(refresh.due, now)) / 1e9
            info.refreshInterval = Double(refresh.stretchedInterval) / 1e9
        }
        return info
    }
}

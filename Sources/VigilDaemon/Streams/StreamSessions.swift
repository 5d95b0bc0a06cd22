import Glibc
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// The one stream-session layer: every byte transport's sessions (serial
/// accessories, L2CAP channels) with their logs, the announce, acknowledge
/// and hold-back rules, back-pressure, pending writes, and their end. A
/// transport opens a session here, attaches an endpoint (`StreamEndpoint`)
/// when it has one open, and decides only what differs: what an endpoint's
/// end means (`StreamTransport.endpointEnded`).
///
/// Serves `write` and `closeSession` for every transport's sessions.
final class StreamSessions: EventDeliveryObserver {
    let name = "streams"
    let requestTypes: Set<String> = [WriteToSession.type, CloseSession.type]

    /// Changed only through `add` and `remove`, which keep `idsByHolder`.
    private var sessions: [Int: StreamSession] = [:]
    /// Each holder's session ids, ascending: every acknowledgement and
    /// suspension asks for an app's sessions (`sessions(heldBy:)`), which
    /// must not cost a walk over every session of every app.
    private var idsByHolder: [SessionHolder: [Int]] = [:]
    private var nextID = 1
    /// Ended sessions whose logs still back data events their app has not
    /// acknowledged (they go to its next process): session id -> app.
    var retiredLogs: [Int: String] = [:]
    /// Session logs made readable to an app's group: session id -> gid
    /// (pruned when the log is deleted).
    var grantedLogs: [Int: gid_t] = [:]
    /// `sessions.json` as the last daemon left it: the records no transport
    /// has taken back yet (`takeSaved`), written again until they are.
    private var unclaimed: [SavedStreamSession] = []

    /// The layer's key beside the transport's in a saved session: a record session.
    static let recordsKey = "records"

    /// The largest range one data event names: what an app copies out at once.
    static let maxDataEventBytes = 1 << 20

    // MARK: Start and stop

    /// Reads `sessions.json`: the records of apps still known and not
    /// force-quit wait for their transports (`takeSaved`); logs no session
    /// or queued event needs are deleted.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        let file = StreamSessionFile(directory: services.config.stateDirectory)
        do {
            let contents = try file.load()
            nextID = max(nextID, contents.nextSessionID, (contents.sessions.map(\.id).max() ?? 0) + 1)
            unclaimed = contents.sessions.filter { record in
                guard case let .app(app) = record.holder, let known = services.engine.apps[app] else { return false }
                return !known.forceQuit
            }
        } catch {
            services.logger.error("cannot read \(file.path), no session re-established: \(error)")
        }
        collectLogs(services: services)
    }

    /// Transports close their endpoints in their own stop (a serial port may
    /// be left with the port keeper); what is left is closed here.
    func stop<S: DaemonServices>(leavingApps: Bool, services: isolated S) async {
        for id in sessions.keys.sorted() {
            if let session = sessions[id] { closeEndpoint(session, services: services) }
        }
    }

    /// The records of `transport`'s sessions the last daemon left (once).
    func takeSaved(transport: String) -> [SavedStreamSession] {
        let mine = unclaimed.filter { $0.transport == transport }
        unclaimed.removeAll { $0.transport == transport }
        return mine
    }

    // MARK: The table

    /// Opens a session with a new id and its log (no endpoint yet).
    /// `records`: a record session (`SessionRecords`), whose endpoint keeps
    /// message boundaries (`StreamEndpoint` appends whole records).
    func open<S: DaemonServices>(
        holder: SessionHolder, name: String, transport: any StreamTransport, wakeMode: BackgroundMode, coalescing: Duration? = nil,
        records: Bool = false, details: [String: JSONValue] = [:], services: isolated S
    ) throws(SystemError) -> Int {
        let id = nextID
        let log = try openLog(id, services: services)
        nextID += 1
        add(StreamSession(
            id: id, holder: holder, name: name, transport: transport, wakeMode: wakeMode,
            coalescing: coalescing.flatMap { $0 > .zero ? $0 : nil }, details: details, records: records, log: log))
        return id
    }

    /// Takes back a session the last daemon recorded (from `takeSaved`),
    /// without an endpoint: its log agrees with the app's queue again, and
    /// what it read and never announced is announced.
    @discardableResult
    func restore<S: DaemonServices>(
        _ saved: SavedStreamSession, transport: any StreamTransport, wakeMode: BackgroundMode, coalescing: Duration? = nil,
        services: isolated S
    ) -> Bool {
        let log: SessionLog
        do {
            log = try openLog(saved.id, services: services)
        } catch {
            services.logger.error("session \(saved.id): cannot open its log: \(error)")
            return false
        }
        let session = StreamSession(
            id: saved.id, holder: saved.holder, name: saved.name, transport: transport, wakeMode: wakeMode,
            coalescing: coalescing.flatMap { $0 > .zero ? $0 : nil }, details: saved.details,
            records: saved.details[Self.recordsKey] == .bool(true), log: log)
        add(session)
        if let app = session.app { restoreLog(session, app: app, services: services) }
        return true
    }

    /// A session that never carried data (its endpoint could not be opened): gone without a trace.
    func forget(_ id: Int) {
        guard let session = remove(id) else { return }
        session.log.remove()
        grantedLogs[id] = nil
    }

    func contains(_ id: Int) -> Bool { sessions[id] != nil }
    func holder(of id: Int) -> SessionHolder? { sessions[id]?.holder }
    func isOpen(_ id: Int) -> Bool { sessions[id]?.endpoint != nil }
    func isPaused(_ id: Int) -> Bool { sessions[id]?.readingPaused ?? false }
    var count: Int { sessions.count }

    func addSummary<S: DaemonServices>(to parts: inout [String], services: isolated S) {
        parts.append("\(sessions.count) sessions")
    }

    /// The ids of the sessions `holder` holds, of one transport or all, ascending.
    func sessions(heldBy holder: SessionHolder, transport: (any StreamTransport)? = nil) -> [Int] {
        guard let ids = idsByHolder[holder] else { return [] }  // every acknowledgement and suspension asks: most have none
        guard let transport else { return ids }
        return ids.filter { sessions[$0]?.transport === transport }
    }

    private func add(_ session: StreamSession) {
        remove(session.id)  // a restore over a session of the same id replaces it
        sessions[session.id] = session
        var ids = idsByHolder[session.holder, default: []]
        ids.insert(session.id, at: ids.firstIndex { $0 > session.id } ?? ids.endIndex)
        idsByHolder[session.holder] = ids
    }

    @discardableResult
    private func remove(_ id: Int) -> StreamSession? {
        guard let session = sessions.removeValue(forKey: id) else { return nil }
        idsByHolder[session.holder]?.removeAll { $0 == id }
        if idsByHolder[session.holder]?.isEmpty == true { idsByHolder[session.holder] = nil }
        return session
    }

    /// Changes what the transport saves of a session (written with the next `record`).
    func setDetails(_ id: Int, _ details: [String: JSONValue]) {
        sessions[id]?.details = details
    }

    /// Writes the apps' sessions to `sessions.json`: at once, at each open,
    /// end and move (rare), so the next daemon re-establishes them.
    func record<S: DaemonServices>(services: isolated S) {
        let file = StreamSessionFile(directory: services.config.stateDirectory)
        let recorded = sessions.values.filter { $0.app != nil }.map { session in
            var details = session.details
            if session.records { details[Self.recordsKey] = .bool(true) }
            return SavedStreamSession(
                id: session.id, holder: session.holder, name: session.name, transport: session.transport.transportName,
                details: details)
        }
        do {
            try file.save(StreamSessionFile.Contents(nextSessionID: nextID, sessions: (recorded + unclaimed).sorted { $0.id < $1.id }))
        } catch {
            services.logger.error("cannot record sessions in \(file.path): \(error)")
        }
        services.statusChanged()  // the session count is in systemd's STATUS= line
    }

    // MARK: Endpoints

    /// Starts carrying `endpoint` for the session: its reads go into the log,
    /// the holder's writes to it.
    func attach<S: DaemonServices>(_ endpoint: any StreamEndpoint, to id: Int, services: isolated S) throws {
        guard let session = sessions[id] else { return }
        closeEndpoint(session, services: services)
        session.endpoint = endpoint
        session.bytesIn = 0
        session.bytesOut = 0
        do {
            try updateWatch(session, services: services)
        } catch {
            session.endpoint = nil
            throw error
        }
    }

    /// Closes the session's endpoint, if it has one; its pending writes are
    /// answered with an error. The session stays (waiting to reopen, or about to end).
    func detach<S: DaemonServices>(_ id: Int, services: isolated S) {
        guard let session = sessions[id] else { return }
        closeEndpoint(session, services: services)
    }

    private func closeEndpoint<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        guard let endpoint = session.endpoint else { return }
        if let watch = session.watch { services.loop.removeWatch(watch) }
        session.watch = nil
        endpoint.close()
        session.endpoint = nil
        session.readingPaused = false
        session.wantsWritable = false
        for write in session.pendingWrites {
            if let connection = services.connection(write.clientConnection), let id = write.requestID {
                services.send(ProtocolError(.invalidState, "session \(session.id) closed before the write completed"), id: id, to: connection)
            }
        }
        session.pendingWrites = []
    }

    /// Ends a session: its endpoint closes, and unless it waits to reopen
    /// (`willReopen`) it leaves the table, its log retired (what it read and
    /// did not announce is still delivered), its transport told
    /// (`sessionEnded`); then its holder hears `session.closed` (`notify`).
    func end<S: DaemonServices>(_ id: Int, reason: String, willReopen: Bool, notify: Bool = true, services: isolated S) {
        guard let session = sessions[id] else { return }
        closeEndpoint(session, services: services)
        if !willReopen {
            retire(session, services: services)
            remove(id)
            session.transport.sessionEnded(id, services: services)
            record(services: services)
        }
        services.logger.info("session \(id) closed: \(reason)\(willReopen ? "; it waits to reopen" : "")")
        if notify { notifyClosed(session, reason: reason, willReopen: willReopen, services: services) }
    }

    /// Tells the holder the session closed (without ending it: a session
    /// that waits to reopen).
    func notifyClosed<S: DaemonServices>(_ id: Int, reason: String, willReopen: Bool, services: isolated S) {
        guard let session = sessions[id] else { return }
        notifyClosed(session, reason: reason, willReopen: willReopen, services: services)
    }

    private func notifyClosed<S: DaemonServices>(_ session: StreamSession, reason: String, willReopen: Bool, services: isolated S) {
        switch session.holder {
        case let .app(app):
            let event = QueuedEvent(
                kind: AccessoryEventKind.closed,
                attributes: ["session": .number(Double(session.id)), "reason": .string(reason), "willReopen": .bool(willReopen)],
                wakeMode: session.wakeMode)
            _ = try? services.withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
        case let .control(connectionID):
            if let connection = services.connection(connectionID) {
                services.send(SessionClosed(session: session.id, reason: reason, willReopen: willReopen), to: connection)
            }
        }
    }

    /// Delivers an event of the session to its app (a control client gets none).
    func deliver<S: DaemonServices>(_ kind: String, _ attributes: [String: JSONValue], of id: Int, services: isolated S) {
        guard let session = sessions[id], let app = session.app else { return }
        var attributes = attributes
        attributes["session"] = .number(Double(id))
        let event = QueuedEvent(kind: kind, attributes: attributes, wakeMode: session.wakeMode)
        _ = try? services.withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
    }

    // MARK: Reading

    private func ready<S: DaemonServices>(_ id: Int, _ events: IOEvents, services: isolated S) {
        guard let session = sessions[id], let endpoint = session.endpoint else { return }
        if events.contains(.writable) { flushWrites(session, services: services) }
        guard sessions[id] === session, session.endpoint === endpoint else { return }  // a failed write ended it
        if session.readingPaused, events.contains(.hangup) || events.contains(.error) {
            if endpoint.discardsInputAtHangup {
                // The kernel discards a hung-up tty's input anyway: end rather than spin.
                return session.transport.endpointEnded(id, reason: "the device hung up while the app's buffer was full", services: services)
            }
            // What the kernel holds stays readable: stop watching (a hang-up
            // is reported whatever the mask) until there is room, then read the rest.
            if let watch = session.watch { services.loop.removeWatch(watch) }
            session.watch = nil
            return
        }
        if events.contains(.readable) || events.contains(.hangup) || events.contains(.error) {
            read(session, services: services)
        }
    }

    /// Reads the endpoint straight into the session's log while the holder
    /// has room. When the log is full (bytes read and not yet acknowledged),
    /// reading stops: the endpoint's own buffer fills and its flow control
    /// (RTS/CTS, LE credits) holds the device back. What one readiness
    /// yields (up to 16 reads, so one busy device cannot starve the loop;
    /// epoll is level-triggered and calls again) is announced after its first
    /// read and at its end.
    private func read<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        guard let endpoint = session.endpoint else { return }
        if let app = session.app, !canBuffer(session, app: app, services: services) { return pause(session, services: services) }
        for round in 0..<16 {
            guard !session.log.isFull else {
                announce(session, services: services)
                return pause(session, services: services)
            }
            let outcome: StreamRead
            do {
                outcome = try endpoint.read(into: session.log)
            } catch {
                announce(session, services: services)  // what came before the failure is the holder's
                return session.transport.endpointEnded(session.id, reason: "read failed: \(error)", services: services)
            }
            switch outcome {
            case .wouldBlock:
                announce(session, services: services)
                reportLoss(session, endpoint, services: services)
                return
            case .full:
                announce(session, services: services)
                return pause(session, services: services)
            case let .ended(reason):
                // Never read it again (no spinning on a dead endpoint).
                announce(session, services: services)
                return session.transport.endpointEnded(session.id, reason: reason, services: services)
            case let .bytes(count):
                session.bytesIn += UInt64(count)
                // The first read of a readiness is announced at once (if no
                // event of the session is queued): a suspended app's wake then
                // overlaps the reads that follow instead of waiting for them.
                if round == 0 { announce(session, services: services) }
            }
        }
        announce(session, services: services)
        reportLoss(session, endpoint, services: services)
    }

    /// Whether the app's queue and this session's log have room for more.
    private func canBuffer<S: DaemonServices>(_ session: StreamSession, app: String, services: isolated S) -> Bool {
        guard let record = services.engine.apps[app], !record.queue.isFull else { return false }
        return !session.log.isFull
    }

    private func pause<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        guard !session.readingPaused else { return }
        session.readingPaused = true
        try? updateWatch(session, services: services)
        services.logger.info("session \(session.id): buffer full (\(session.log.buffered) bytes unacknowledged); reading paused, flow control holds the device")
    }

    /// After an app acknowledged events: its sessions that have room read again.
    private func resumeReading<S: DaemonServices>(for app: String, services: isolated S) {
        for id in sessions(heldBy: .app(app)) {
            guard let session = sessions[id], session.endpoint != nil, session.readingPaused,
                  canBuffer(session, app: app, services: services) else { continue }
            session.readingPaused = false
            try? updateWatch(session, services: services)
            read(session, services: services)
        }
    }

    /// Watches for what the session waits for. With nothing to wait for, a
    /// socket is not watched at all (epoll would report a hang-up over and
    /// over); a tty keeps an empty watch, so its hang-up ends the session.
    private func updateWatch<S: DaemonServices>(_ session: StreamSession, services: isolated S) throws {
        guard let endpoint = session.endpoint else { return }
        var events: IOEvents = session.readingPaused ? [] : .readable
        if session.wantsWritable { events.insert(.writable) }
        if events.isEmpty && !endpoint.discardsInputAtHangup {
            if let watch = session.watch { services.loop.removeWatch(watch) }
            session.watch = nil
        } else if let watch = session.watch {
            try services.loop.updateWatch(watch, for: events)
        } else {
            let id = session.id
            session.watch = try services.loop.watch(
                endpoint.descriptor, for: events,
                services.watchCallback(StreamSessions.self) { streams, events, services in streams.ready(id, events, services: services) })
        }
    }

    /// Loss the endpoint counted since the last report goes to the holder:
    /// counted and reported, never silent.
    private func reportLoss<S: DaemonServices>(_ session: StreamSession, _ endpoint: any StreamEndpoint, services: isolated S) {
        guard let loss = endpoint.newLoss(), !loss.isEmpty else { return }
        services.logger.warning("session \(session.id): the device reported loss: \(loss.overruns) overrun(s), \(loss.parityErrors) parity and \(loss.frameErrors) framing error(s)")
        deliver(AccessoryEventKind.loss, [
            "overruns": .number(Double(loss.overruns)), "parityErrors": .number(Double(loss.parityErrors)),
            "frameErrors": .number(Double(loss.frameErrors)),
        ], of: session.id, services: services)
    }

    // MARK: Writing

    /// `write`: queued, written as the endpoint takes it, answered once it
    /// took every byte (a client that waits for the reply is held back at
    /// the device's pace).
    func write<S: DaemonServices>(
        _ bytes: [UInt8], session id: Int, requestID: Int?, from connection: ClientConnection, holder: SessionHolder,
        services: isolated S
    ) throws(ProtocolError) {
        guard let session = sessions[id], session.holder == holder else {
            throw ProtocolError(.invalidArgument, "no session \(id) is held by this client")
        }
        guard session.endpoint != nil else { throw ProtocolError(.invalidState, session.transport.notOpenReason(id)) }
        if bytes.isEmpty {
            services.send(BytesWritten(written: 0), id: requestID, to: connection)
            return
        }
        session.pendingWrites.append(StreamSession.PendingWrite(requestID: requestID, clientConnection: connection.id, bytes: bytes))
        flushWrites(session, services: services)
    }

    /// Writes as much as the endpoint takes, in pieces of at most its
    /// `writeChunk`; answers each write once done.
    private func flushWrites<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        guard let endpoint = session.endpoint else { return }
        while var write = session.pendingWrites.first {
            let count = min(endpoint.writeChunk, write.bytes.count - write.offset)
            let written: Int?
            do {
                written = try write.bytes[write.offset..<write.offset + count].withUnsafeBytes { try endpoint.write($0) }
            } catch {
                return session.transport.endpointEnded(session.id, reason: "write failed: \(error)", services: services)
            }
            guard let written, written > 0 else { break }
            write.offset += written
            session.bytesOut += UInt64(written)
            if write.offset < write.bytes.count {
                session.pendingWrites[0] = write
                continue
            }
            session.pendingWrites.removeFirst()
            if let id = write.requestID, let connection = services.connection(write.clientConnection) {
                services.send(BytesWritten(written: write.bytes.count), id: id, to: connection)
            }
        }
        let wanted = !session.pendingWrites.isEmpty
        guard wanted != session.wantsWritable else { return }
        session.wantsWritable = wanted
        try? updateWatch(session, services: services)
    }

    // MARK: Requests and fan-outs

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let holder = SessionHolder(requester)
        switch message.type {
        case WriteToSession.type:
            let request: WriteToSession = try message.decode()
            try write(message.body, session: request.session, requestID: message.id, from: connection, holder: holder, services: services)
        case CloseSession.type:
            let request: CloseSession = try message.decode()
            guard sessions[request.session]?.holder == holder else {
                throw ProtocolError(.invalidArgument, "no session \(request.session) is held by this client", id: message.id)
            }
            // As any other end of the session: its log retires (what it read
            // and did not announce is still delivered) and the table is saved,
            // so a restarted daemon does not open it again.
            end(request.session, reason: "closed by its holder", willReopen: false, notify: false, services: services)
            services.send(Done(), id: message.id, to: connection)
        default:
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'", id: message.id)
        }
    }

    /// An app that stopped running: its sessions end with its process
    /// (quietly: no later process held them; its unacknowledged data stays
    /// queued and is redelivered). One that was suspended holding data back
    /// is woken to acknowledge (`wakeIfHeldBack`).
    func appStateChanged<S: DaemonServices>(_ app: String, from old: AppState, to new: AppState, services: isolated S) {
        if new == .notRunning {
            for id in sessions(heldBy: .app(app)) {
                end(id, reason: "the app is no longer running", willReopen: false, notify: false, services: services)
            }
        } else if new == .suspended {
            wakeIfHeldBack(app, services: services)
        }
    }

    /// A control client's sessions end with its connection.
    func connectionClosed<S: DaemonServices>(_ connection: ClientConnection, services: isolated S) {
        for id in sessions(heldBy: .control(connection.id)) {
            end(id, reason: "its control connection closed", willReopen: false, notify: false, services: services)
        }
    }

    func willAcknowledge<S: DaemonServices>(_ seq: UInt64, by app: String, services: isolated S) {
        logsBeforeAcknowledging(seq, by: app, services: services)
    }

    func didAcknowledge<S: DaemonServices>(by app: String, services: isolated S) {
        removeRetiredLogs(of: app, services: services)
        resumeReading(for: app, services: services)
    }

    func willSend<S: DaemonServices>(_ event: QueuedEvent, to app: String, services: isolated S) {
        grantLog(named: event, to: app, services: services)
    }

    /// The control role's session objects (`accessories`), every transport's.
    func infos() -> [SessionInfo] {
        sessions.keys.sorted().compactMap(info)
    }

    func info(_ id: Int) -> SessionInfo? {
        guard let session = sessions[id] else { return nil }
        let loss = session.endpoint?.lossSinceOpen ?? StreamLoss()
        let fields = session.transport.sessionFields(id)
        return SessionInfo(
            session: id, connectionID: fields.connectionID, protocol: session.name, holder: "\(session.holder)",
            lineSettings: fields.lineSettings, bytesIn: session.bytesIn, bytesOut: session.bytesOut,
            bufferedBytes: session.log.buffered, readingPaused: session.readingPaused,
            overruns: loss.overruns, parityErrors: loss.parityErrors, frameErrors: loss.frameErrors)
    }

    func addMetrics<S: DaemonServices>(to metrics: DaemonMetrics, services: isolated S) {
        metrics.gauge("vigil_sessions", [], Double(sessions.count))
        for info in infos() {
            let session = [("session", String(info.session))]
            metrics.gauge("vigil_session_buffered_bytes", session, Double(info.bufferedBytes))
            metrics.total("vigil_session_bytes_in_total", session, info.bytesIn)
            metrics.total("vigil_session_bytes_out_total", session, info.bytesOut)
            metrics.total("vigil_session_overruns_total", session, UInt64(max(info.overruns, 0)))
            metrics.total("vigil_session_parity_errors_total", session, UInt64(max(info.parityErrors, 0)))
            metrics.total("vigil_session_frame_errors_total", session, UInt64(max(info.frameErrors, 0)))
        }
    }

    // For the layer's own files (`StreamSessions+Logs`).
    func session(_ id: Int) -> StreamSession? { sessions[id] }
    var savedIDs: [Int] { unclaimed.map(\.id) }
}

extension SessionHolder {
    /// A session is held by the client that opened it.
    init(_ requester: Requester) {
        switch requester {
        case let .app(app): self = .app(app)
        case let .control(connection): self = .control(connection)
        }
    }
}

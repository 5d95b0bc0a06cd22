import Glibc
import SystemPackage
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// Session logs: where a session's bytes go (see `SessionLog`). The layer
/// reads into the log, announces ranges of it to the app as `session.data`
/// events, and frees a range when the event naming it is acknowledged. One
/// data event per session is queued at a time: the next announces everything
/// read meanwhile, so a fast stream becomes a few large events paced by the
/// app's acknowledgements.
extension StreamSessions {
    static func logDirectory(_ config: DaemonConfig) -> String { "\(config.stateDirectory)/session-logs" }

    /// Opens (or, after a daemon restart, takes back) a session's log.
    func openLog<S: DaemonServices>(_ id: Int, services: isolated S) throws(SystemError) -> SessionLog {
        let config = services.config
        let directory = Self.logDirectory(config)
        // The state directory exists; its logs folder is made on first use.
        // 0711: an app of another user may open its own log (made readable
        // to it by `grantLog`) but not list the others.
        if mkdir(directory, 0o711) != 0 && errno != EEXIST {
            throw SystemError(Errno(rawValue: errno), "mkdir", path: directory)
        }
        _ = chmod(directory, 0o711)  // made 0700 by an older daemon, or by the umask
        let (log, discarded) = try SessionLog.openOrCreate(
            path: SessionLog.path(session: id, in: config.stateDirectory), capacity: config.sessionBufferLimit)
        if let discarded {
            services.logger.error("session \(id): its log \(log.path) was unusable (\(discarded)); started a new one, unacknowledged bytes in it are lost")
        }
        return log
    }

    /// The stream range a data event names, if it names one in a log.
    static func logRange(of event: QueuedEvent, session: Int) -> Range<UInt64>? {
        guard event.kind == AccessoryEventKind.data, event.attributes["session"] == .number(Double(session)),
              event.attributes["log"] != nil,
              let offset = event.attributes["offset"]?.numberValue, let length = event.attributes["length"]?.numberValue,
              let start = UInt64(exactly: offset), let count = UInt64(exactly: length)
        else { return nil }
        return start..<start + count
    }

    private static func isData(_ event: QueuedEvent, of session: Int) -> Bool {
        event.kind == AccessoryEventKind.data && event.attributes["session"] == .number(Double(session))
    }

    /// Announces what the session read and did not announce (`all`: even
    /// while one of its data events is queued: it is about to end).
    func announce<S: DaemonServices>(_ id: Int, all: Bool = false, services: isolated S) {
        guard let session = session(id) else { return }
        announce(session, all: all, services: services)
    }

    /// Tells the holder about bytes read since the last announcement. An app
    /// gets a data event unless one of this session's is still queued
    /// (`all` overrides that when the session ends: nothing may stay
    /// unannounced); a terminal gets the bytes in a frame, and they count as
    /// acknowledged at once.
    /// `acknowledging`: an acknowledgement up to this seq is about to be
    /// handled; events it covers no longer count as queued.
    func announce<S: DaemonServices>(_ session: StreamSession, all: Bool = false, acknowledging: UInt64 = 0, services: isolated S) {
        let log = session.log
        switch session.holder {
        case let .control(connectionID):
            let count = Int(log.written - session.announced)
            guard count > 0 else { return }
            let bytes = log.bytes(from: session.announced, count: count)
            session.announced = log.written
            log.acknowledge(upTo: session.announced)
            releaseWhenQuiet(session, services: services)
            if let connection = services.connection(connectionID) { services.send(SessionData(session: session.id), body: bytes, to: connection) }
        case let .app(app):
            let id = session.id
            if !all, services.engine.queuedEvents(of: app).contains(where: { $0.seq > acknowledging && Self.isData($0, of: id) }) { return }
            if !all, holdsAnnouncement(session, services: services) { return }
            if log.written > session.announced {
                session.lastAnnouncement = .now()
                if let timer = session.announceTimer { services.loop.cancelTimer(timer) }
                session.announceTimer = nil
            }
            while log.written > session.announced {
                // A record session's event ends at a record's end: an app reads whole records.
                let length = session.records
                    ? log.recordsEnd(from: session.announced, limit: eventBytes(log)) - session.announced
                    : min(log.written - session.announced, UInt64(eventBytes(log)))
                guard length > 0 else { return }  // no whole record (cannot happen: records are appended whole)
                var attributes: [String: JSONValue] = [
                    "session": .number(Double(id)), "log": .string(log.path),
                    "offset": .number(Double(session.announced)), "length": .number(Double(length)),
                ]
                if session.records { attributes["framing"] = .string(SessionRecords.framing) }
                let event = QueuedEvent(
                    kind: AccessoryEventKind.data, attributes: attributes,
                    wakeMode: session.wakeMode, stream: "session.data/\(id)")
                do {
                    _ = try services.withEngine { engine, now throws(ProtocolError) in
                        try engine.deliver(event, to: app, canBeHeldBack: true, now: now)
                    }
                } catch {
                    // canBuffer checked the queue first; reading stops until there is room.
                    services.logger.error("session \(id): data event for \(app) not queued: \(error); it follows once the queue has room")
                    return
                }
                session.announced += length
                if !all { return }
            }
        }
    }

    /// Whether a streaming session's new bytes wait before they are
    /// announced: only where the session has a coalescing window (L2CAP
    /// channels), only while the last data event went out less than that
    /// window ago, and only while they are less than one event's worth. A
    /// lone read after a quiet spell is announced at once; a stream becomes
    /// one event per window (a timer announces what came meanwhile) instead
    /// of one per read, when an awake app acknowledges each event before the
    /// next read.
    private func holdsAnnouncement<S: DaemonServices>(_ session: StreamSession, services: isolated S) -> Bool {
        guard let window = session.coalescing, let last = session.lastAnnouncement else { return false }
        let pending = session.log.written - session.announced
        guard pending > 0, pending < UInt64(eventBytes(session.log)) else { return false }
        let due = last.advanced(by: window)
        guard MonotonicInstant.now() < due else { return false }
        if session.announceTimer == nil {
            let id = session.id
            session.announceTimer = services.loop.schedule(at: due, services.callback(StreamSessions.self) { streams, services in
                guard let session = streams.session(id) else { return }
                session.announceTimer = nil
                streams.announce(session, services: services)
            })
        }
        return true
    }

    /// At most a quarter of the ring per event: the daemon reads into the
    /// rest while the app handles this range (an event of the whole ring
    /// would make them take turns).
    private func eventBytes(_ log: SessionLog) -> Int {
        min(Self.maxDataEventBytes, max(1, log.capacity / 4))
    }

    /// Before an app's acknowledgement up to `seq` is handled (and journaled):
    /// each of its sessions announces what it read since its last event, if
    /// that event is among the acknowledged, so an app done with its window is
    /// not suspended only to be woken for the next range; and the log records
    /// what the app is done with: everything before the first data event the
    /// acknowledgement leaves queued. The log goes first: a daemon killed
    /// between the two finds events the log says were acknowledged and
    /// withdraws them (`restoreLog`); the other order would announce those
    /// bytes again under a new sequence number.
    func logsBeforeAcknowledging<S: DaemonServices>(_ seq: UInt64, by app: String, services: isolated S) {
        for id in sessions(heldBy: .app(app)) {
            guard let session = session(id) else { continue }
            announce(session, acknowledging: seq, services: services)
            guard let queue = services.engine.apps[app]?.queue else { continue }
            // Only sent events can be acknowledged (the engine ignores the rest).
            let remaining = queue.events.enumerated().lazy
                .filter { $0.offset >= queue.sentCount || $0.element.seq > seq }
                .compactMap { Self.logRange(of: $0.element, session: id) }
            session.log.acknowledge(upTo: remaining.first?.lowerBound ?? session.announced)
            releaseWhenQuiet(session, services: services)
        }
    }

    /// How long a session reads nothing before the pages of its acknowledged
    /// bytes go back to the kernel. While bytes stream, the ring's pages are
    /// written over in place: giving them back after every acknowledgement
    /// made each read fault in fresh pages (ext4 `page_mkwrite`) and each app
    /// copy fault them into its mapping again.
    static let quietBeforeRelease: Duration = .seconds(1)

    /// After an acknowledgement: the log's acknowledged pages go back once the
    /// session has been quiet for `quietBeforeRelease`. A timer runs only
    /// while such pages are resident, so an idle daemon has none.
    func releaseWhenQuiet<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        guard session.log.holdsAcknowledgedPages, session.releaseTimer == nil else { return }
        session.writtenAtReleaseArm = session.log.written
        let id = session.id
        session.releaseTimer = services.loop.schedule(after: Self.quietBeforeRelease, services.callback(StreamSessions.self) { streams, services in
            guard let session = streams.session(id) else { return }
            session.releaseTimer = nil
            if session.log.written == session.writtenAtReleaseArm {
                session.log.releaseAcknowledgedPages()
            } else {
                streams.releaseWhenQuiet(session, services: services)  // still streaming
            }
        })
    }

    /// A session ended for good: what it read and did not announce becomes
    /// events now, and its log stays until the app acknowledged them (its
    /// next process gets them if this one died).
    func retire<S: DaemonServices>(_ session: StreamSession, services: isolated S) {
        announce(session, all: true, services: services)
        if let timer = session.releaseTimer { services.loop.cancelTimer(timer) }
        if let timer = session.announceTimer { services.loop.cancelTimer(timer) }
        session.releaseTimer = nil
        session.announceTimer = nil
        session.log.releaseAcknowledgedPages()
        if let app = session.app,
           services.engine.queuedEvents(of: app).contains(where: { Self.logRange(of: $0, session: session.id) != nil }) {
            retiredLogs[session.id] = app
        } else {
            session.log.remove()
            grantedLogs[session.id] = nil
        }
    }

    /// After an app's acknowledgement: logs of ended sessions that no queued
    /// event names any more are deleted.
    func removeRetiredLogs<S: DaemonServices>(of app: String, services: isolated S) {
        guard !retiredLogs.isEmpty else { return }
        let retired = retiredLogs.filter { $0.value == app }.keys
        guard !retired.isEmpty else { return }
        let queued = services.engine.queuedEvents(of: app)
        for id in retired where !queued.contains(where: { Self.logRange(of: $0, session: id) != nil }) {
            retiredLogs[id] = nil
            grantedLogs[id] = nil
            unlink(SessionLog.path(session: id, in: services.config.stateDirectory))
        }
    }

    /// After a daemon restart: makes a restored session's log agree with the
    /// app's queue. Events whose range the app had acknowledged (the log says
    /// so; the journal had not recorded it yet) are withdrawn; events naming
    /// bytes the log no longer holds are withdrawn and reported as loss;
    /// bytes read and never announced are announced. A daemon killed during a
    /// read is reported too: the device may have given bytes that were never
    /// counted.
    func restoreLog<S: DaemonServices>(_ session: StreamSession, app: String, services: isolated S) {
        let log = session.log
        let id = session.id
        var lost: [String] = []
        let withdrawn = services.withEngine { engine, _ in
            engine.withdraw(from: app, reason: "session \(id): already acknowledged, or no longer in its log") { event in
                guard let range = Self.logRange(of: event, session: id) else { return false }
                if range.lowerBound < log.acknowledged { return true }
                if range.upperBound > log.written {
                    lost.append("\(range)")
                    return true
                }
                return false
            }
        }
        if !withdrawn.isEmpty {
            services.logger.notice("session \(id): \(withdrawn.count) data event(s) withdrawn on restore\(lost.isEmpty ? "" : "; not in the log: \(lost.joined(separator: ", "))")")
        }
        let ends = services.engine.queuedEvents(of: app).compactMap { Self.logRange(of: $0, session: id)?.upperBound }
        session.announced = max(log.acknowledged, ends.max() ?? 0)
        if log.wasInterruptedDuringRead || !lost.isEmpty {
            services.logger.warning("session \(id): vigild was killed while reading the device; bytes that read took may be lost")
            deliver(AccessoryEventKind.loss, [
                "overruns": .number(0), "parityErrors": .number(0), "frameErrors": .number(0),
                "interruptedReads": .number(log.wasInterruptedDuringRead ? 1 : 0), "lostRanges": .number(Double(lost.count)),
            ], of: id, services: services)
            log.clearInterruptedRead()
        }
        announce(session, services: services)
    }

    /// At start: deletes logs of sessions that are gone and that no queued
    /// event names; keeps the others as retired. Logs of the sessions the
    /// last daemon recorded wait for their transports.
    func collectLogs<S: DaemonServices>(services: isolated S) {
        let directory = Self.logDirectory(services.config)
        guard let handle = opendir(directory) else { return }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name.hasSuffix(".log") { names.append(name) }
        }
        closedir(handle)
        var referenced: [Int: String] = [:]
        for (app, record) in services.engine.apps {
            for event in record.queue.events where event.kind == AccessoryEventKind.data && event.attributes["log"] != nil {
                if let number = event.attributes["session"]?.numberValue, let id = Int(exactly: number) { referenced[id] = app }
            }
        }
        let saved = Set(savedIDs)
        for name in names {
            guard let id = Int(name.dropLast(4)) else { continue }
            if session(id) != nil || saved.contains(id) { continue }
            if let app = referenced[id] {
                retiredLogs[id] = app
            } else {
                unlink("\(directory)/\(name)")
            }
        }
    }

    /// An app suspended while one of its sessions holds data back would
    /// never wake again: data waits for its acknowledgement (reading paused at
    /// a full log, or bytes read and not yet announced because an event is
    /// still unacknowledged), and nothing new may arrive to wake it. The
    /// held-back data counts as data arriving, so the app gets a fresh window
    /// to acknowledge; but only if it acknowledged something since the last
    /// such wake, so a hung app is not woken in a loop.
    func wakeIfHeldBack<S: DaemonServices>(_ app: String, services: isolated S) {
        for id in sessions(heldBy: .app(app)) {
            guard let session = session(id) else { continue }
            guard session.readingPaused || session.log.written > session.announced else { continue }
            if session.acknowledgedAtHeldBackWake == session.log.acknowledged {
                services.logger.warning("session \(id): \(app) acknowledged nothing during its last window; not woken again until other work arrives", metadata: ["app": "\(app)"])
                continue
            }
            session.acknowledgedAtHeldBackWake = session.log.acknowledged
            // After the current engine call: the engine is mid-transition.
            services.loop.execute(services.callback(StreamSessions.self) { _, services in
                services.withEngine { engine, now in
                    _ = engine.wake(app, reason: "session \(id) holds data back until its buffer is acknowledged", now: now)
                }
            })
            return
        }
    }

    /// Before an app is told the path of a session log: the log becomes
    /// readable by the app's group (0640, group = the app's gid) and by
    /// nobody else; the folder is 0711, so it can be entered but not listed.
    /// The file stays the daemon's: the app can neither write, truncate nor
    /// chmod it (a truncated mapping would crash the daemon).
    func grantLog<S: DaemonServices>(named event: QueuedEvent, to app: String, services: isolated S) {
        guard event.kind == AccessoryEventKind.data, event.attributes["log"] != nil,
              let number = event.attributes["session"]?.numberValue, let id = Int(exactly: number),
              let credentials = services.credentials(ofApp: app), credentials.uid != geteuid()
        else { return }
        if grantedLogs[id] == credentials.gid { return }
        let path = SessionLog.path(session: id, in: services.config.stateDirectory)
        let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            services.logger.error("session \(id): cannot open its log \(path) to let \(app) read it: \(String(cString: strerror(errno)))", metadata: ["app": "\(app)"])
            return
        }
        defer { Glibc.close(fd) }
        guard fchown(fd, geteuid(), credentials.gid) == 0, fchmod(fd, 0o640) == 0 else {
            services.logger.error("session \(id): cannot give \(app) (gid \(credentials.gid)) read access to \(path): \(String(cString: strerror(errno)))", metadata: ["app": "\(app)"])
            return
        }
        grantedLogs[id] = credentials.gid
    }
}

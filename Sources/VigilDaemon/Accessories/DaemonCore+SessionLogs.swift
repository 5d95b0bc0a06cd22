import Glibc
import SystemPackage
import VigilAccessories
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// Session logs: where a session's device bytes go (see `SessionLog`). The
/// daemon reads into the log, announces ranges of it to the app as
/// `session.data` events, and frees a range when the event naming it is
/// acknowledged. One data event per session is queued at a time: the next
/// announces everything read meanwhile, so a fast stream becomes a few large
/// events paced by the app's acknowledgements.
extension DaemonCore {
    /// The largest range one data event names: what an app copies out at once.
    static let maxDataEventBytes = 1 << 20

    var sessionLogDirectory: String { "\(config.stateDirectory)/session-logs" }

    /// Opens (or, after a daemon restart, takes back) a session's log.
    func openLog(_ session: Int) throws(SystemError) -> OpenLog {
        if let open = accessoryState.logs[session] { return open }
        // The state directory exists; its logs folder is made on first use.
        // 0711: an app of another user may open its own log (made readable
        // to it by `grantSessionLog`) but not list the others.
        if mkdir(sessionLogDirectory, 0o711) != 0 && errno != EEXIST {
            throw SystemError(Errno(rawValue: errno), "mkdir", path: sessionLogDirectory)
        }
        _ = chmod(sessionLogDirectory, 0o711)  // made 0700 by an older daemon, or by the umask
        let (log, discarded) = try SessionLog.openOrCreate(
            path: SessionLog.path(session: session, in: config.stateDirectory), capacity: accessoryState.bufferLimit)
        if let discarded {
            logger.error("session \(session): its log \(log.path) was unusable (\(discarded)); started a new one, unacknowledged bytes in it are lost")
        }
        let open = OpenLog(log)
        accessoryState.logs[session] = open
        return open
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

    /// Tells the holder about bytes read since the last announcement. An app
    /// gets a data event unless one of this session's is still queued
    /// (`all` overrides that when the session ends: nothing may stay
    /// unannounced); a terminal gets the bytes in a frame, and they count as
    /// acknowledged at once.
    /// `acknowledging`: an acknowledgement up to this seq is about to be
    /// handled; events it covers no longer count as queued.
    func announce(_ session: Int, all: Bool = false, acknowledging: UInt64 = 0) {
        guard let open = accessoryState.logs[session], let record = accessoryState.sessions.sessions[session] else { return }
        switch record.holder {
        case let .control(connectionID):
            let count = Int(open.log.written - open.announced)
            guard count > 0 else { return }
            let bytes = open.log.bytes(from: open.announced, count: count)
            open.announced = open.log.written
            open.log.acknowledge(upTo: open.announced)
            releaseWhenQuiet(session)
            if let connection = connections[connectionID] { send(SessionData(session: session), body: bytes, to: connection) }
        case let .app(app):
            if !all, engine.queuedEvents(of: app).contains(where: { $0.seq > acknowledging && Self.isData($0, of: session) }) { return }
            if !all, holdsAnnouncement(session, open) { return }
            if open.log.written > open.announced {
                open.lastAnnouncement = .now()
                if let timer = open.announceTimer { loop.cancelTimer(timer) }
                open.announceTimer = nil
            }
            while open.log.written > open.announced {
                let length = min(open.log.written - open.announced, UInt64(eventBytes(open)))
                let event = QueuedEvent(
                    kind: AccessoryEventKind.data,
                    attributes: [
                        "session": .number(Double(session)), "log": .string(open.log.path),
                        "offset": .number(Double(open.announced)), "length": .number(Double(length)),
                    ],
                    wakeMode: sessionWakeMode(session), stream: "session.data/\(session)")
                do {
                    _ = try withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, canBeHeldBack: true, now: now) }
                } catch {
                    // canBuffer checked the queue first; reading stops until there is room.
                    logger.error("session \(session): data event for \(app) not queued: \(error); it follows once the queue has room")
                    return
                }
                open.announced += length
                if !all { return }
            }
        }
    }

    /// Whether a streaming session's new bytes wait before they are
    /// announced: only where `announceCoalescing` gives a window (L2CAP
    /// channels), only while the last data event went out less than that
    /// window ago, and only while they are less than one event's worth. A
    /// lone read after a quiet spell is announced at once; a stream becomes
    /// one event per window (a timer announces what came meanwhile) instead
    /// of one per read, when an awake app acknowledges each event before the
    /// next read.
    private func holdsAnnouncement(_ session: Int, _ open: OpenLog) -> Bool {
        guard let window = announceCoalescing(session), let last = open.lastAnnouncement else { return false }
        let pending = open.log.written - open.announced
        guard pending > 0, pending < UInt64(eventBytes(open)) else { return false }
        let due = last.advanced(by: window)
        guard MonotonicInstant.now() < due else { return false }
        if open.announceTimer == nil {
            open.announceTimer = loop.schedule(at: due) { [unowned self] in
                self.assumeIsolated { core in
                    guard let open = core.accessoryState.logs[session] else { return }
                    open.announceTimer = nil
                    core.announce(session)
                }
            }
        }
        return true
    }

    /// At most a quarter of the ring per event: the daemon reads into the
    /// rest while the app handles this range (an event of the whole ring
    /// would make them take turns).
    private func eventBytes(_ open: OpenLog) -> Int {
        min(Self.maxDataEventBytes, max(1, open.log.capacity / 4))
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
    func sessionLogsBeforeAcknowledging(_ seq: UInt64, by app: String) {
        for record in accessoryState.sessions.sessions(heldBy: .app(app)) {
            guard let open = accessoryState.logs[record.id] else { continue }
            announce(record.id, acknowledging: seq)
            guard let queue = engine.apps[app]?.queue else { continue }
            // Only sent events can be acknowledged (the engine ignores the rest).
            let remaining = queue.events.enumerated().lazy
                .filter { $0.offset >= queue.sentCount || $0.element.seq > seq }
                .compactMap { Self.logRange(of: $0.element, session: record.id) }
            open.log.acknowledge(upTo: remaining.first?.lowerBound ?? open.announced)
            releaseWhenQuiet(record.id)
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
    func releaseWhenQuiet(_ session: Int) {
        guard let open = accessoryState.logs[session], open.log.holdsAcknowledgedPages, open.releaseTimer == nil else { return }
        open.writtenAtReleaseArm = open.log.written
        open.releaseTimer = loop.schedule(after: Self.quietBeforeRelease) { [unowned self] in
            self.assumeIsolated { core in
                guard let open = core.accessoryState.logs[session] else { return }
                open.releaseTimer = nil
                if open.log.written == open.writtenAtReleaseArm {
                    open.log.releaseAcknowledgedPages()
                } else {
                    core.releaseWhenQuiet(session)  // still streaming
                }
            }
        }
    }

    /// A session ended for good: what it read and did not announce becomes
    /// events now, and its log stays until the app acknowledged them (its
    /// next process gets them if this one died).
    func retireLog(_ session: Int, holder: SessionHolder) {
        announce(session, all: true)
        guard let open = accessoryState.logs.removeValue(forKey: session) else { return }
        if let timer = open.releaseTimer { loop.cancelTimer(timer) }
        if let timer = open.announceTimer { loop.cancelTimer(timer) }
        open.log.releaseAcknowledgedPages()
        if case let .app(app) = holder,
           engine.queuedEvents(of: app).contains(where: { Self.logRange(of: $0, session: session) != nil }) {
            accessoryState.retiredLogs[session] = app
        } else {
            open.log.remove()
        }
    }

    /// After an app's acknowledgement: logs of ended sessions that no queued
    /// event names any more are deleted.
    func removeRetiredLogs(of app: String) {
        let retired = accessoryState.retiredLogs.filter { $0.value == app }.keys
        guard !retired.isEmpty else { return }
        let queued = engine.queuedEvents(of: app)
        for session in retired where !queued.contains(where: { Self.logRange(of: $0, session: session) != nil }) {
            accessoryState.retiredLogs[session] = nil
            unlink(SessionLog.path(session: session, in: config.stateDirectory))
        }
    }

    /// After a daemon restart, before reopening: takes back a restored
    /// session's log and makes it agree with the app's queue. Events whose
    /// range the app had acknowledged (the log says so; the journal had not
    /// recorded it yet) are withdrawn; events naming bytes the log no longer
    /// holds are withdrawn and reported as loss; bytes read and never
    /// announced are announced. A daemon killed during a read is reported too:
    /// the device may have given bytes that were never counted.
    func restoreLog(_ session: Int, app: String) {
        let open: OpenLog
        do {
            open = try openLog(session)
        } catch {
            logger.error("session \(session): cannot open its log: \(error)")
            return
        }
        let log = open.log
        var lost: [String] = []
        let withdrawn = engine.withdraw(from: app, reason: "session \(session): already acknowledged, or no longer in its log") { event in
            guard let range = Self.logRange(of: event, session: session) else { return false }
            if range.lowerBound < log.acknowledged { return true }
            if range.upperBound > log.written {
                lost.append("\(range)")
                return true
            }
            return false
        }
        if !withdrawn.isEmpty {
            logger.notice("session \(session): \(withdrawn.count) data event(s) withdrawn on restore\(lost.isEmpty ? "" : "; not in the log: \(lost.joined(separator: ", "))")")
        }
        let ends = engine.queuedEvents(of: app).compactMap { Self.logRange(of: $0, session: session)?.upperBound }
        open.announced = max(log.acknowledged, ends.max() ?? 0)
        if log.wasInterruptedDuringRead || !lost.isEmpty {
            logger.warning("session \(session): vigild was killed while reading the device; bytes that read took may be lost")
            let event = QueuedEvent(
                kind: AccessoryEventKind.loss,
                attributes: ["session": .number(Double(session)), "overruns": .number(0), "parityErrors": .number(0), "frameErrors": .number(0),
                             "interruptedReads": .number(log.wasInterruptedDuringRead ? 1 : 0),
                             "lostRanges": .number(Double(lost.count))],
                wakeMode: .externalAccessory)
            _ = try? withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
            log.clearInterruptedRead()
        }
        announce(session)
    }

    /// After restore: deletes logs of sessions that are gone and that no
    /// queued event names; keeps the others as retired.
    func collectSessionLogs() {
        guard let directory = opendir(sessionLogDirectory) else { return }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name.hasSuffix(".log") { names.append(name) }
        }
        closedir(directory)
        var referenced: [Int: String] = [:]
        for (app, record) in engine.apps {
            for event in record.queue.events where event.kind == AccessoryEventKind.data && event.attributes["log"] != nil {
                if let number = event.attributes["session"]?.numberValue, let session = Int(exactly: number) { referenced[session] = app }
            }
        }
        for name in names {
            guard let session = Int(name.dropLast(4)) else { continue }
            if accessoryState.logs[session] != nil || accessoryState.sessions.sessions[session] != nil { continue }
            if let app = referenced[session] {
                accessoryState.retiredLogs[session] = app
            } else {
                unlink("\(sessionLogDirectory)/\(name)")
            }
        }
    }
}

import Glibc
import VigilAccessories
import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilSystem

/// Sessions: serial ports kept open and read while their app is suspended,
/// with bounded buffering and flow control instead of loss.
extension DaemonCore {
    func openSession(_ request: OpenSession, holder: SessionHolder) throws(ProtocolError) -> SessionOpened {
        guard let accessory = accessoryState.registry.accessory(request.connectionID) else {
            throw ProtocolError(.invalidArgument, "no accessory with connection id \(request.connectionID) is connected")
        }
        var declared: [String]?
        if case let .app(app) = holder {
            declared = engine.apps[app]?.manifest.accessoryProtocols ?? []
        }
        let lineSettings = request.lineSettings ?? accessory.info.lineSettings
        let settings: SerialSettings
        do {
            settings = try SerialSettings(parsing: lineSettings)
        } catch {
            throw ProtocolError(.invalidArgument, "line settings '\(lineSettings)': \(error)")
        }
        var sessions = accessoryState.sessions
        let record = try sessions.open(
            holder: holder, accessory: accessory.info, identity: accessory.identity, protocol: request.protocol,
            declaredProtocols: declared, lineSettings: settings.description, reopen: request.reopen ?? false)
        if accessoryState.ports[record.id] != nil {
            // Already open for this holder (re-established after a daemon restart).
            return SessionOpened(session: record.id, accessory: accessory.info)
        }
        cancelReopen(record.id)
        do {
            _ = try openLog(record.id)
        } catch {
            throw ProtocolError(.invalidState, "cannot create the session's log: \(error)")
        }
        do {
            try openPort(record.id, node: accessory.info.deviceNode, settings: settings)
        } catch {
            accessoryState.logs.removeValue(forKey: record.id)?.log.remove()
            throw ProtocolError(.invalidState, "cannot open \(accessory.info.deviceNode): \(error)")
        }
        accessoryState.sessions = sessions
        recordSessions()
        logger.info("session \(record.id) opened: \(holder) on \(DeviceText.quoted(accessory.info.name)) for \(request.protocol) (\(settings))")
        return SessionOpened(session: record.id, accessory: accessory.info)
    }

    /// Opens the session's port, or takes the one an earlier daemon left with
    /// the port keeper (its unread input intact), and gives the keeper a copy.
    private func openPort(_ session: Int, node: String, settings: SerialSettings) throws {
        let serial = try keptPort(for: session, node: node, settings: settings) ?? SerialPort.open(path: node, settings: settings)
        let port = OpenPort(port: serial)
        port.watch = try loop.watch(port.port.fd, for: .readable) { [unowned self] events in
            self.assumeIsolated { $0.portReady(session, events) }
        }
        accessoryState.ports[session] = port
        keepPort(serial.fd, session: session)
    }

    func closePort(_ session: Int) {
        closeChannelSocket(session)  // an L2CAP channel's session
        guard let port = accessoryState.ports.removeValue(forKey: session) else { return }
        if let watch = port.watch { loop.removeWatch(watch) }
        releaseKeptPort(session)
        port.port.close()
        for write in port.pendingWrites {
            if let connection = connections[write.clientConnection], let id = write.requestID {
                send(ProtocolError(.invalidState, "session \(session) closed before the write completed"), id: id, to: connection)
            }
        }
    }

    /// Ends a session: closes its port and tells its holder. A session that asked
    /// to reopen stays in the table, waiting for the same accessory to return.
    func endSession(_ id: Int, reason: String, keepForReopen: Bool, notify: Bool = true) {
        guard let record = accessoryState.sessions.sessions[id] else { return }
        closePort(id)
        if !keepForReopen {
            cancelReopen(id)
            retireLog(id, holder: record.holder)
            accessoryState.sessions.close(id)
            recordSessions()
        }
        logger.info("session \(id) closed: \(reason)\(keepForReopen ? "; it reopens when the accessory returns" : "")")
        guard notify else { return }
        switch record.holder {
        case let .app(app):
            let event = QueuedEvent(
                kind: AccessoryEventKind.closed,
                attributes: ["session": .number(Double(id)), "reason": .string(reason), "willReopen": .bool(keepForReopen)],
                wakeMode: .externalAccessory)
            _ = try? withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
        case let .control(connectionID):
            if let connection = connections[connectionID] {
                send(SessionClosed(session: id, reason: reason, willReopen: keepForReopen), to: connection)
            }
        }
    }

    func reopenSessions(for accessory: Accessory) {
        let waiting = accessoryState.sessions.toReopen(
            on: accessory.info, identity: accessory.identity,
            byPortOnly: accessoryState.registry.sharedIdentities.contains(accessory.identity),
            isWaiting: { accessoryState.ports[$0] == nil && accessoryState.reopenRetries[$0] == nil })
        for record in waiting {
            accessoryState.sessions.rebind(record.id, to: accessory.info)
            reopen(record.id, on: accessory)
        }
        if !waiting.isEmpty { recordSessions() }
    }

    /// Writes the apps' sessions to `sessions.json` (see `SessionRecordFile`).
    func recordSessions() {
        do {
            try SessionRecordFile(directory: config.stateDirectory).save(accessoryState.sessions)
        } catch {
            logger.error("cannot record sessions in \(config.stateDirectory)/sessions.json: \(error)")
        }
        updateSystemdStatus()  // the session count is in systemd's STATUS= line
    }

    /// Re-establishes the sessions an earlier daemon recorded, with their ids,
    /// for apps that are still known and not force-quit: reopened at once on
    /// their accessory when it is connected (the app is told `reopened`, which
    /// wakes it by the usual rule); otherwise a `reopen` session waits for it as
    /// after an unplug, and any other session ends, its app told. Call once
    /// accessories are enumerated and apps adopted.
    func restoreSessions() {
        let file = SessionRecordFile(directory: config.stateDirectory)
        let saved: SessionRecordFile.Contents
        do {
            saved = try file.load()
        } catch {
            logger.error("cannot read \(file.path), no session re-established: \(error)")
            return releaseUnclaimedKeptPorts()
        }
        let kept = saved.sessions.filter { record in
            guard case let .app(app) = record.holder, let known = engine.apps[app] else { return false }
            return !known.forceQuit
        }
        accessoryState.sessions.restore(kept, nextSessionID: saved.nextSessionID)
        for record in kept {
            guard case let .app(app) = record.holder else { continue }
            if Self.isChannelRecord(record) { restoreChannelWakeMode(record, app: app) }
            restoreLog(record.id, app: app)
        }
        collectSessionLogs()
        var pending = Set(kept.map(\.id))
        for accessory in accessoryState.registry.connected.values.sorted(by: { $0.info.connectionID < $1.info.connectionID }) {
            let matched = accessoryState.sessions.toReopen(
                on: accessory.info, identity: accessory.identity,
                byPortOnly: accessoryState.registry.sharedIdentities.contains(accessory.identity),
                restoring: pending, isWaiting: { pending.contains($0) })
            for record in matched {
                pending.remove(record.id)
                accessoryState.sessions.rebind(record.id, to: accessory.info)
                logger.info("session \(record.id) of \(record.holder) re-established after a daemon restart")
                reopen(record.id, on: accessory)
            }
        }
        for id in pending.sorted() {
            guard let record = accessoryState.sessions.sessions[id] else { continue }
            if Self.isChannelRecord(record) {
                restoreChannelSession(record)  // DaemonCore+L2CAPRestore.swift
            } else if record.reopen {
                logger.info("session \(id) of \(record.holder) re-established after a daemon restart; it reopens when the accessory returns")
            } else {
                endSession(id, reason: "the accessory was gone when vigild restarted", keepForReopen: false)
            }
        }
        releaseUnclaimedKeptPorts()
        recordSessions()
    }

    /// Opens a waiting session's port on the accessory's connection. A failed
    /// open never ends the session: it keeps waiting, as its holder was told
    /// (`willReopen: true`). The node may be gone again already (a fast
    /// unplug-plug-unplug: its remove event follows, and the next plug reopens)
    /// or busy for a moment; either way it is tried again, with a bounded
    /// backoff, for as long as this connection lasts.
    private func reopen(_ id: Int, on accessory: Accessory) {
        guard let record = accessoryState.sessions.sessions[id] else { return }
        let connectionID = accessory.info.connectionID
        if let timer = accessoryState.reopenRetries[id]?.timer { loop.cancelTimer(timer) }
        do {
            try openPort(id, node: accessory.info.deviceNode, settings: try SerialSettings(parsing: record.lineSettings))
        } catch {
            var retry = accessoryState.reopenRetries[id].flatMap { $0.connectionID == connectionID ? $0 : nil }
                ?? ReopenRetry(connectionID: connectionID)
            let delay = retry.backoff.failed()
            let vanished = (error as? SystemError).map { [ENOENT, ENXIO, ENODEV, EIO].contains($0.errno.rawValue) } ?? false
            let message = "session \(id): could not reopen \(DeviceText.escaped(accessory.info.deviceNode)) (attempt \(retry.backoff.failures)): \(error); it waits for the accessory, next try in \(delay)"
            // Attempts 1, 2, 4, 8, ...: a node that stays unopenable is not a log flood.
            if retry.backoff.failures.nonzeroBitCount == 1 {
                if vanished { logger.info("\(message)") } else { logger.warning("\(message)") }
            }
            retry.timer = loop.schedule(after: delay) { [unowned self] in
                self.assumeIsolated { core in
                    guard core.accessoryState.reopenRetries[id]?.connectionID == connectionID else { return }
                    // The session may have been closed (or reopened) meanwhile.
                    guard let current = core.accessoryState.registry.accessory(connectionID),
                          core.accessoryState.sessions.sessions[id]?.connectionID == connectionID,
                          core.accessoryState.ports[id] == nil
                    else { return core.cancelReopen(id) }
                    core.reopen(id, on: current)
                }
            }
            accessoryState.reopenRetries[id] = retry
            return
        }
        accessoryState.reopenRetries[id] = nil
        logger.info("session \(id) reopened on connection \(connectionID)")
        if case let .app(app) = record.holder {
            var attributes = accessory.info.attributes
            attributes["session"] = .number(Double(id))
            let event = QueuedEvent(kind: AccessoryEventKind.reopened, attributes: attributes, wakeMode: .externalAccessory)
            _ = try? withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
        }
    }

    /// Stops trying to reopen the session on its current connection (the
    /// accessory went away, or the session ended).
    func cancelReopen(_ id: Int) {
        if let timer = accessoryState.reopenRetries.removeValue(forKey: id)?.timer { loop.cancelTimer(timer) }
    }

    // MARK: Reading

    private func portReady(_ session: Int, _ events: IOEvents) {
        guard let port = accessoryState.ports[session] else { return }
        if events.contains(.writable) { flushWrites(session) }
        if port.readingPaused && (events.contains(.hangup) || events.contains(.error)) {
            // epoll reports a hang-up even with reading paused; the kernel discards
            // an unplugged tty's input anyway, so end the session rather than spin.
            let reopen = accessoryState.sessions.sessions[session]?.reopen ?? false
            return endSession(session, reason: "the device hung up while the app's buffer was full", keepForReopen: reopen)
        }
        if events.contains(.readable) || events.contains(.hangup) || events.contains(.error) {
            readPort(session, port)
        }
    }

    /// Reads what the device sent straight into the session's log, as long as
    /// the holder has room. When the log is full (bytes read and not yet
    /// acknowledged), reading stops: the tty's own buffer fills and flow
    /// control holds the device. What one readiness yields (up to 16 reads) is
    /// announced after its first read and at its end.
    private func readPort(_ session: Int, _ port: OpenPort) {
        guard let record = accessoryState.sessions.sessions[session], let open = accessoryState.logs[session] else { return }
        if case let .app(app) = record.holder, !canBuffer(session, app: app) { return pauseReading(session, port) }
        // A bounded number of reads per readiness, so one busy device cannot
        // starve the loop; epoll is level-triggered and calls again.
        for round in 0..<16 {
            guard !open.log.isFull else {
                announce(session)
                return pauseReading(session, port)
            }
            var outcome = SerialRead.wouldBlock
            do {
                _ = try open.log.fill { buffer in
                    outcome = try port.port.read(into: buffer)
                    if case let .bytes(count) = outcome { return count }
                    return nil
                }
            } catch {
                announce(session)  // what came before the failure is the holder's
                return endSession(session, reason: "read failed: \(error)", keepForReopen: record.reopen)
            }
            switch outcome {
            case .wouldBlock:
                announce(session)
                reportLoss(session, port, record)
                return
            case .hangup:
                // EOF or EIO: the device is gone. Never read it again (no spinning);
                // udev's remove follows and tells the apps.
                announce(session)
                return endSession(session, reason: "the device hung up", keepForReopen: record.reopen)
            case let .bytes(count):
                port.bytesIn += UInt64(count)
                // The first read of a readiness is announced at once (if no
                // event of the session is queued): a suspended app's wake then
                // overlaps the reads that follow instead of waiting for them.
                if round == 0 { announce(session) }
            }
        }
        announce(session)
        reportLoss(session, port, record)
    }

    /// Whether the app's queue and this session's buffer have room for more.
    private func canBuffer(_ session: Int, app: String) -> Bool {
        guard let record = engine.apps[app], !record.queue.isFull else { return false }
        return accessoryState.logs[session].map { !$0.log.isFull } ?? false
    }

    /// Bytes read for the holder and not yet acknowledged.
    func bufferedBytes(_ session: Int) -> Int {
        accessoryState.logs[session]?.log.buffered ?? 0
    }

    private func pauseReading(_ session: Int, _ port: OpenPort) {
        guard !port.readingPaused, let watch = port.watch else { return }
        port.readingPaused = true
        try? loop.updateWatch(watch, for: port.wantsWritable ? .writable : [])
        logger.info("session \(session): buffer full (\(bufferedBytes(session)) bytes unacknowledged); reading paused, flow control holds the device")
    }

    /// After an app acknowledged events: resume sessions that have room again.
    func resumeReading(for app: String) {
        for record in accessoryState.sessions.sessions(heldBy: .app(app)) {
            guard let port = accessoryState.ports[record.id], port.readingPaused, canBuffer(record.id, app: app),
                  let watch = port.watch else { continue }
            port.readingPaused = false
            try? loop.updateWatch(watch, for: port.wantsWritable ? [.readable, .writable] : .readable)
            readPort(record.id, port)
        }
        resumeChannels(for: app)
    }

    /// An app suspended while one of its sessions holds data back would never
    /// wake again: data waits for its acknowledgement (reading paused at a
    /// full log, or bytes read and not yet announced because an event is still
    /// unacknowledged), and nothing new may arrive to wake it. The held-back
    /// data counts as data arriving, so the app gets a fresh window to
    /// acknowledge; but only if it acknowledged something since the last such
    /// wake, so a hung app is not woken in a loop.
    func wakeIfHeldBack(_ app: String) {
        for record in accessoryState.sessions.sessions(heldBy: .app(app)) {
            guard let open = accessoryState.logs[record.id] else { continue }
            let paused = accessoryState.ports[record.id]?.readingPaused ?? channelReadingPaused(record.id)
            guard paused || open.log.written > open.announced else { continue }
            if open.acknowledgedAtHeldBackWake == open.log.acknowledged {
                logger.warning("session \(record.id): \(app) acknowledged nothing during its last window; not woken again until other work arrives", metadata: ["app": "\(app)"])
                continue
            }
            open.acknowledgedAtHeldBackWake = open.log.acknowledged
            // After the current engine call: the engine is mid-transition.
            loop.execute { [unowned self] in
                self.assumeIsolated { core in
                    core.withEngine { engine, now in
                        _ = engine.wake(app, reason: "session \(record.id) holds data back until its buffer is acknowledged", now: now)
                    }
                }
            }
            return
        }
    }

    /// Loss the kernel or UART counted since the last report goes to the holder:
    /// counted and reported, never silent.
    private func reportLoss(_ session: Int, _ port: OpenPort, _ record: SessionRecord) {
        guard let now = port.port.lineCounters(), let last = port.reported, now != last else { return }
        let overruns = now.overrun - last.overrun + now.bufferOverrun - last.bufferOverrun
        let parity = now.parity - last.parity
        let frame = now.frame - last.frame
        port.reported = now
        guard overruns + parity + frame > 0 else { return }
        logger.warning("session \(session): the device reported loss: \(overruns) overrun(s), \(parity) parity and \(frame) framing error(s)")
        if case let .app(app) = record.holder {
            let event = QueuedEvent(
                kind: AccessoryEventKind.loss,
                attributes: ["session": .number(Double(session)), "overruns": .number(Double(overruns)),
                             "parityErrors": .number(Double(parity)), "frameErrors": .number(Double(frame))],
                wakeMode: .externalAccessory)
            _ = try? withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: app, now: now) }
        }
    }

    // MARK: Writing

    func write(_ bytes: [UInt8], session: Int, requestID: Int?, from connection: ClientConnection, holder: SessionHolder) throws(ProtocolError) {
        guard let record = accessoryState.sessions.sessions[session], record.holder == holder else {
            throw ProtocolError(.invalidArgument, "no session \(session) is held by this client")
        }
        if isChannel(session) { return try writeChannel(bytes, session: session, requestID: requestID, from: connection) }
        guard let port = accessoryState.ports[session] else {
            throw ProtocolError(.invalidState, "session \(session) is waiting for its accessory to return")
        }
        port.pendingWrites.append(OpenPort.PendingWrite(requestID: requestID, clientConnection: connection.id, bytes: bytes))
        flushWrites(session)
    }

    /// Writes as much as the device takes; answers each write once done, so a
    /// client that waits for the reply is held back by the device.
    private func flushWrites(_ session: Int) {
        guard let port = accessoryState.ports[session] else { return }
        while var write = port.pendingWrites.first {
            let written: Int?
            do {
                written = try write.bytes[write.offset...].withUnsafeBytes { try port.port.write($0) }
            } catch {
                return endSession(session, reason: "write failed: \(error)", keepForReopen: accessoryState.sessions.sessions[session]?.reopen ?? false)
            }
            guard let written, written > 0 else { break }
            write.offset += written
            port.bytesOut += UInt64(written)
            if write.offset < write.bytes.count {
                port.pendingWrites[0] = write
                continue
            }
            port.pendingWrites.removeFirst()
            if let id = write.requestID, let connection = connections[write.clientConnection] {
                send(BytesWritten(written: write.bytes.count), id: id, to: connection)
            }
        }
        let wanted = !port.pendingWrites.isEmpty
        guard wanted != port.wantsWritable, let watch = port.watch else { return }
        port.wantsWritable = wanted
        var events: IOEvents = port.readingPaused ? [] : .readable
        if wanted { events.insert(.writable) }
        try? loop.updateWatch(watch, for: events)
    }

    func sessionInfo(_ id: Int) -> SessionInfo? {
        guard let record = accessoryState.sessions.sessions[id] else { return nil }
        let port = accessoryState.ports[id]
        let buffered = bufferedBytes(id)
        let counters = port?.port.lineCounters()
        let baseline = port?.baseline
        return SessionInfo(
            session: id, connectionID: record.connectionID, protocol: record.protocolString, holder: "\(record.holder)",
            lineSettings: record.lineSettings, bytesIn: port?.bytesIn ?? l2capState.channels[id]?.bytesIn ?? 0,
            bytesOut: port?.bytesOut ?? l2capState.channels[id]?.bytesOut ?? 0,
            bufferedBytes: buffered, readingPaused: port?.readingPaused ?? channelReadingPaused(id),
            overruns: (counters?.overrun ?? 0) - (baseline?.overrun ?? 0) + (counters?.bufferOverrun ?? 0) - (baseline?.bufferOverrun ?? 0),
            parityErrors: (counters?.parity ?? 0) - (baseline?.parity ?? 0),
            frameErrors: (counters?.frame ?? 0) - (baseline?.frame ?? 0))
    }
}

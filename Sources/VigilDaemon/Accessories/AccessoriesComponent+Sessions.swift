import Glibc
import VigilAccessories
import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilStreams
import VigilSystem

/// Accessory sessions: one per accessory connection and protocol, on a
/// serial port the stream layer reads while the app is suspended; a
/// `reopen` session waits for its accessory to come back.
extension AccessoriesComponent {
    func openSession<S: DaemonServices>(_ request: OpenSession, holder: SessionHolder, services: isolated S) throws(ProtocolError) -> SessionOpened {
        guard let accessory = registry.accessory(request.connectionID) else {
            throw ProtocolError(.invalidArgument, "no accessory with connection id \(request.connectionID) is connected")
        }
        guard let streams = services.component(StreamSessions.self) else {
            throw ProtocolError(.internalError, "no stream sessions in this daemon")
        }
        var declared: [String]?
        if case let .app(app) = holder {
            declared = services.engine.apps[app]?.manifest.accessoryProtocols ?? []
        }
        // A HID accessory has no line settings: its sessions carry reports.
        let isHID = accessory.info.isHID
        if isHID, request.lineSettings != nil {
            throw ProtocolError(.invalidArgument, "accessory \(request.connectionID) is a HID device: it takes no line settings")
        }
        let lineSettings = request.lineSettings ?? accessory.info.lineSettings
        var settings = SerialSettings.default
        if !isHID {
            do {
                settings = try SerialSettings(parsing: lineSettings)
            } catch {
                throw ProtocolError(.invalidArgument, "line settings '\(lineSettings)': \(error)")
            }
        }
        let settingsText = isHID ? "" : settings.description
        if let existing = table.existing(holder: holder, connectionID: accessory.info.connectionID, protocol: request.protocol) {
            // Already open for this holder (re-established after a daemon
            // restart), or waiting to reopen on this connection: its own again.
            if !isOpen(existing.id) {
                cancelReopen(existing.id, services: services)
                do {
                    try openEndpoint(existing.id, accessory: accessory.info, settings: settings, streams: streams, services: services)
                } catch {
                    throw Self.openError(error, node: accessory.info.deviceNode)
                }
            }
            return SessionOpened(session: existing.id, accessory: accessory.info)
        }
        // Checked before the stream layer numbers a session: refusals cost no id.
        var probe = table
        _ = try probe.open(
            id: 0, holder: holder, accessory: accessory.info, identity: accessory.identity, protocol: request.protocol,
            declaredProtocols: declared, lineSettings: settingsText, reopen: request.reopen ?? false)
        let id: Int
        do {
            id = try streams.open(
                holder: holder, name: request.protocol, transport: self, wakeMode: .externalAccessory, records: isHID, services: services)
        } catch {
            throw ProtocolError(.invalidState, "cannot create the session's log: \(error)")
        }
        let record = try table.open(
            id: id, holder: holder, accessory: accessory.info, identity: accessory.identity, protocol: request.protocol,
            declaredProtocols: declared, lineSettings: settingsText, reopen: request.reopen ?? false)
        do {
            try openEndpoint(id, accessory: accessory.info, settings: settings, streams: streams, services: services)
        } catch {
            table.close(id)
            streams.forget(id)
            throw Self.openError(error, node: accessory.info.deviceNode)
        }
        streams.setDetails(id, SavedStreamSession.details(of: record))
        streams.record(services: services)
        services.logger.info("session \(id) opened: \(holder) on \(DeviceText.quoted(accessory.info.name)) for \(request.protocol) (\(isHID ? "HID reports" : settings.description))")
        return SessionOpened(session: id, accessory: accessory.info)
    }

    /// A port that could not be opened: `notSupported` when the driver cannot
    /// take the line settings (a BOTHER rate), `invalidState` otherwise.
    private static func openError(_ error: any Error, node: String) -> ProtocolError {
        if let error = error as? SerialLineError, case .notSupported = error {
            return ProtocolError(.notSupported, "cannot open \(node): \(error)")
        }
        return ProtocolError(.invalidState, "cannot open \(node): \(error)")
    }

    /// Opens the session's device: a hidraw node (`openHID`) or a serial port.
    private func openEndpoint<S: DaemonServices>(
        _ session: Int, accessory: AccessoryInfo, settings: SerialSettings, streams: StreamSessions, services: isolated S
    ) throws {
        if accessory.isHID {
            try openHID(session, node: accessory.deviceNode, streams: streams, services: services)
        } else {
            try openPort(session, node: accessory.deviceNode, settings: settings, streams: streams, services: services)
        }
    }

    /// Opens the session's port, or takes the one an earlier daemon left with
    /// the port keeper (its unread input intact), gives the keeper a copy,
    /// and hands the port to the stream layer.
    private func openPort<S: DaemonServices>(
        _ session: Int, node: String, settings: SerialSettings, streams: StreamSessions, services: isolated S
    ) throws {
        let serial = try keptPort(for: session, node: node, settings: settings, services: services)
            ?? SerialPort.open(path: node, settings: settings)
        let endpoint = SerialEndpoint(port: serial) { [unowned self] in self.portClosed(session) }
        ports[session] = endpoint
        do {
            try streams.attach(endpoint, to: session, services: services)
        } catch {
            ports[session] = nil
            serial.close()
            throw error
        }
        keepPort(serial.fd, session: session, services: services)
    }

    /// The stream layer closed a port (whoever ended it): the keeper lets go.
    private func portClosed(_ session: Int) {
        ports[session] = nil
        releaseKeptPort(session)
    }

    /// Ends a session (closing its port) and tells its holder. A session that
    /// asked to reopen stays, waiting for the same accessory to return.
    func endSession<S: DaemonServices>(_ id: Int, reason: String, keepForReopen: Bool, notify: Bool = true, services: isolated S) {
        services.component(StreamSessions.self)?.end(id, reason: reason, willReopen: keepForReopen, notify: notify, services: services)
    }

    func reopenSessions<S: DaemonServices>(for accessory: Accessory, services: isolated S) {
        let waiting = table.toReopen(
            on: accessory.info, identity: accessory.identity, byPortOnly: registry.sharedIdentities.contains(accessory.identity),
            isWaiting: { !isOpen($0) && reopenRetries[$0] == nil })
        for record in waiting {
            rebind(record.id, to: accessory.info, services: services)
            reopen(record.id, on: accessory, services: services)
        }
        if !waiting.isEmpty { services.component(StreamSessions.self)?.record(services: services) }
    }

    private func rebind<S: DaemonServices>(_ id: Int, to accessory: AccessoryInfo, services: isolated S) {
        table.rebind(id, to: accessory)
        if let record = table.sessions[id] { services.component(StreamSessions.self)?.setDetails(id, SavedStreamSession.details(of: record)) }
    }

    /// Re-establishes the accessory sessions an earlier daemon recorded, with
    /// their ids (the stream layer kept only those of apps still known and
    /// not force-quit): reopened at once on their accessory when it is
    /// connected (the app is told `reopened`, which wakes it by the usual
    /// rule); otherwise a `reopen` session waits for it as after an unplug,
    /// and any other session ends, its app told. Runs once accessories are
    /// enumerated and apps adopted.
    func restoreSessions<S: DaemonServices>(services: isolated S) {
        defer { releaseUnclaimedKeptPorts() }
        guard let streams = services.component(StreamSessions.self) else { return }
        var restored: [SessionRecord] = []
        for saved in streams.takeSaved(transport: transportName) {
            do {
                let record = try saved.decode(SessionRecord.self)
                guard streams.restore(saved, transport: self, wakeMode: .externalAccessory, services: services) else { continue }
                restored.append(record)
            } catch {
                services.logger.error("session \(saved.id): its record in sessions.json is unreadable (\(error)); not re-established")
            }
        }
        table.restore(restored)
        var pending = Set(restored.map(\.id))
        for accessory in registry.connected.values.sorted(by: { $0.info.connectionID < $1.info.connectionID }) {
            let matched = table.toReopen(
                on: accessory.info, identity: accessory.identity, byPortOnly: registry.sharedIdentities.contains(accessory.identity),
                restoring: pending, isWaiting: { pending.contains($0) })
            for record in matched {
                pending.remove(record.id)
                rebind(record.id, to: accessory.info, services: services)
                services.logger.info("session \(record.id) of \(record.holder) re-established after a daemon restart")
                reopen(record.id, on: accessory, services: services)
            }
        }
        for id in pending.sorted() {
            guard let record = table.sessions[id] else { continue }
            if record.reopen {
                services.logger.info("session \(id) of \(record.holder) re-established after a daemon restart; it reopens when the accessory returns")
            } else {
                endSession(id, reason: "the accessory was gone when vigild restarted", keepForReopen: false, services: services)
            }
        }
        streams.record(services: services)
    }

    /// Opens a waiting session's port on the accessory's connection. A failed
    /// open never ends the session: it keeps waiting, as its holder was told
    /// (`willReopen: true`). The node may be gone again already (a fast
    /// unplug-plug-unplug: its remove event follows, and the next plug reopens)
    /// or busy for a moment; either way it is tried again, with a bounded
    /// backoff, for as long as this connection lasts.
    private func reopen<S: DaemonServices>(_ id: Int, on accessory: Accessory, services: isolated S) {
        guard let record = table.sessions[id], let streams = services.component(StreamSessions.self) else { return }
        let connectionID = accessory.info.connectionID
        if let timer = reopenRetries[id]?.timer { services.loop.cancelTimer(timer) }
        do {
            let settings = accessory.info.isHID ? SerialSettings.default : try SerialSettings(parsing: record.lineSettings)
            try openEndpoint(id, accessory: accessory.info, settings: settings, streams: streams, services: services)
        } catch {
            var retry = reopenRetries[id].flatMap { $0.connectionID == connectionID ? $0 : nil } ?? ReopenRetry(connectionID: connectionID)
            let delay = retry.backoff.failed()
            let vanished = (error as? SystemError).map { [ENOENT, ENXIO, ENODEV, EIO].contains($0.errno.rawValue) } ?? false
            let message = "session \(id): could not reopen \(DeviceText.escaped(accessory.info.deviceNode)) (attempt \(retry.backoff.failures)): \(error); it waits for the accessory, next try in \(delay)"
            // Attempts 1, 2, 4, 8, ...: a node that stays unopenable is not a log flood.
            if retry.backoff.failures.nonzeroBitCount == 1 {
                if vanished { services.logger.info("\(message)") } else { services.logger.warning("\(message)") }
            }
            retry.timer = services.loop.schedule(after: delay, services.callback(AccessoriesComponent.self) { accessories, services in
                guard accessories.reopenRetries[id]?.connectionID == connectionID else { return }
                // The session may have been closed (or reopened) meanwhile.
                guard let current = accessories.registry.accessory(connectionID),
                      accessories.table.sessions[id]?.connectionID == connectionID,
                      !accessories.isOpen(id)
                else { return accessories.cancelReopen(id, services: services) }
                accessories.reopen(id, on: current, services: services)
            })
            reopenRetries[id] = retry
            return
        }
        reopenRetries[id] = nil
        services.logger.info("session \(id) reopened on connection \(connectionID)")
        streams.deliver(AccessoryEventKind.reopened, accessory.info.attributes, of: id, services: services)
    }

    /// Stops trying to reopen the session on its current connection (the
    /// accessory went away, or the session ended).
    func cancelReopen<S: DaemonServices>(_ id: Int, services: isolated S) {
        if let timer = reopenRetries.removeValue(forKey: id)?.timer { services.loop.cancelTimer(timer) }
    }

    // MARK: StreamTransport

    /// EOF, EIO, a failed read or write: the session ends, or waits for its
    /// accessory when it asked to reopen.
    func endpointEnded<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        endSession(session, reason: reason, keepForReopen: table.sessions[session]?.reopen ?? false, services: services)
    }

    func notOpenReason(_ session: Int) -> String {
        "session \(session) is waiting for its accessory to return"
    }

    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S) {
        cancelReopen(session, services: services)
        endLineControl(session, services: services)
        table.close(session)
    }

    func sessionFields(_ session: Int) -> (connectionID: UInt64, lineSettings: String) {
        guard let record = table.sessions[session] else { return (0, "") }
        return (record.connectionID, record.lineSettings)
    }
}

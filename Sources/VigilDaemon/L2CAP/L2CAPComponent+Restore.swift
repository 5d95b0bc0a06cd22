import VigilBluetooth
import VigilL2CAP
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilStreams

/// L2CAP across a daemon restart (SIGKILL included). An app's published PSMs
/// and its channels opened with `reopen` are in the state file with the rest
/// of its Bluetooth intents (`SavedL2CAP`), written before the request's
/// reply; a channel's session is in `sessions.json` like a serial session's,
/// and its log keeps what vigild read before it died.
///
/// On start: the channels' sessions come back (their logs' unacknowledged
/// bytes are delivered again); a `reopen` channel waits for its link, which
/// the restored central brings back by itself, and opens again on the same
/// session (`ble.l2cap.reopened`); any other channel ends, its holder told
/// why. The published PSMs listen again, as fixed PSMs even where the kernel
/// picked them, so a central that read the PSM from a GATT characteristic
/// still finds it; a PSM that cannot be bound again is logged and reported
/// to its app (`ble.l2cap.unpublished`). What the kernel held unread in a
/// socket when vigild died is lost with it.
extension L2CAPComponent {
    /// Runs after the Bluetooth central is restored and started (it comes
    /// earlier in the start order) and after the stream layer read `sessions.json`.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        restoring = services.config.bluetooth ? saved.bluetooth?.l2cap ?? [:] : [:]
        restoreSessions(services: services)
        resume(services: services)
    }

    /// The state file's L2CAP part: apps' published PSMs and `reopen`
    /// channels, open or waiting for their link (control clients' end with
    /// their connection). Intents not yet restored are kept as they were.
    func saved() -> [String: SavedL2CAP] {
        var result = restoring
        for (psm, entry) in published.sorted(by: { $0.key < $1.key }) {
            guard case let .app(app) = entry.client else { continue }
            result[app, default: SavedL2CAP()].published.append(SavedPSM(
                psm: Int(psm), dynamic: entry.dynamic, security: entry.options.security?.description,
                receiveMTU: Int(entry.options.receiveMTU ?? Self.defaultReceiveMTU),
                coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: entry.coalesce)))
        }
        var requests = waiting
        for (session, channel) in channels { requests[session] = channel.request }
        for (session, request) in requests.sorted(by: { $0.key < $1.key }) where request.reopen {
            guard case let .app(app) = request.client else { continue }
            result[app, default: SavedL2CAP()].channels.append(SavedChannel(
                session: session, peer: request.peer, psm: Int(request.psm.value), security: request.options.security?.description,
                receiveMTU: Int(request.options.receiveMTU ?? Self.defaultReceiveMTU),
                coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: request.coalesce)))
        }
        return result
    }

    /// An app's L2CAP intent changed (publish, unpublish, a `reopen` channel
    /// opened): the state file says so before the reply, so a PSM the app
    /// advertises is one the next daemon listens on.
    func saveIntent<S: DaemonServices>(of client: BluetoothClient, services: isolated S) {
        guard case .app = client else { return }
        services.saveState()
    }

    // MARK: Restoring

    /// The channel sessions an earlier daemon recorded: a `reopen` channel
    /// waits for its link (its app hears it closed with `willReopen`, as
    /// after a link loss); any other ends, its app told why.
    private func restoreSessions<S: DaemonServices>(services: isolated S) {
        guard let streams = services.component(StreamSessions.self) else { return }
        for record in streams.takeSaved(transport: transportName) {
            guard case let .app(app) = record.holder else { continue }
            let saved = restoring[app]?.channels.first { $0.session == record.id }
            // A channel a central opened to a PSM the app published wakes it
            // as a peripheral; the app's own channels as a central.
            let channelPSM = record.name.split(separator: "/").last.flatMap { Int($0) }
            let incoming = saved == nil && (restoring[app]?.published.contains { $0.psm == channelPSM } ?? false)
            var window: Duration?
            if let saved { window = try? coalescing(saved.coalesceMilliseconds) }
            guard streams.restore(record, transport: self, wakeMode: incoming ? .bluetoothPeripheral : .bluetoothCentral,
                                  coalescing: window, services: services) else { continue }
            guard services.config.bluetooth else {
                finishChannel(record.id, reason: "vigild restarted with Bluetooth disabled in its config", services: services)
                continue
            }
            guard let saved else {
                finishChannel(record.id, reason: "vigild restarted, and an L2CAP channel's socket ends with it (the channel was not opened with reopen)",
                              services: services)
                continue
            }
            let request: ChannelRequest
            do throws(ProtocolError) {
                let options = try options(security: saved.security, receiveMTU: saved.receiveMTU)
                request = ChannelRequest(client: .app(app), peer: saved.peer, psm: try psm(saved.psm), options: options, reopen: true,
                                         coalesce: try coalescing(saved.coalesceMilliseconds))
            } catch {
                finishChannel(record.id, reason: "vigild restarted and cannot reopen the channel: \(error.message)", services: services)
                continue
            }
            waiting[record.id] = request
            let reason = "vigild restarted; the channel reopens when the link to \(saved.peer) is back (bytes vigild had not read from it are lost)"
            services.logger.info("l2cap: session \(record.id) of \(app) re-established after a daemon restart: PSM \(saved.psm) on \(saved.peer) reopens when the link is back")
            streams.notifyClosed(record.id, reason: reason, willReopen: true, services: services)
        }
        streams.record(services: services)
    }

    /// Once the central is restored: the published PSMs listen again, and
    /// `reopen` channels whose app no longer wants the link end (nothing
    /// would bring it back).
    private func resume<S: DaemonServices>(services: isolated S) {
        let restored = restoring
        restoring = [:]
        for (app, saved) in restored.sorted(by: { $0.key < $1.key }) {
            guard let known = services.engine.apps[app], !known.forceQuit else { continue }
            for entry in saved.published {
                relisten(entry, app: app, services: services)
            }
        }
        for (session, request) in waiting.sorted(by: { $0.key < $1.key }) where undecided[session] == nil {
            guard services.bluetoothLinks?.wantsLink(request.client, address: request.peer) != true else { continue }
            waiting[session] = nil
            finishChannel(session, reason: "vigild restarted, and the app no longer asks for the link to \(request.peer)", services: services)
        }
        if !restored.isEmpty { services.saveState() }
    }

    /// Listens on a restored PSM again (a fixed PSM now, whoever picked it),
    /// or tells the app it could not.
    private func relisten<S: DaemonServices>(_ saved: SavedPSM, app: String, services: isolated S) {
        let client = BluetoothClient.app(app)
        do throws(ProtocolError) {
            let options = try options(security: saved.security, receiveMTU: saved.receiveMTU)
            let coalesce = try coalescing(saved.coalesceMilliseconds)
            if let existing = published[UInt16(clamping: saved.psm)] {
                throw ProtocolError(.invalidState, "PSM \(saved.psm) is already published by \(existing.client)")
            }
            _ = try listen(try psm(saved.psm), options: options, coalesce: coalesce, client: client, dynamic: saved.dynamic, services: services)
            services.logger.info("l2cap: \(app)'s PSM \(saved.psm) listens again after a daemon restart")
        } catch {
            let reason = "vigild restarted and cannot listen on PSM \(saved.psm) again: \(error.message)"
            services.logger.error("l2cap: \(app): \(reason); the app is told (\(L2CAPEventKind.unpublished))")
            deliver(L2CAPEventKind.unpublished, ["psm": .number(Double(saved.psm)), "reason": .string(reason)],
                    mode: .bluetoothPeripheral, to: client, services: services)
        }
    }
}

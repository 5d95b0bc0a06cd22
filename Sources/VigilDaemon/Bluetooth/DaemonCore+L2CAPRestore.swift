import VigilAccessories
import VigilBluetooth
import VigilL2CAP
import VigilLifecycle
import VigilProtocol

/// L2CAP across a daemon restart (SIGKILL included). An app's published PSMs
/// and its channels opened with `reopen` are in the state file with the rest
/// of its Bluetooth intents (`SavedL2CAP`), written before the request's
/// reply; a channel's session is in `sessions.json` like a serial session's,
/// and its log keeps what vigild read before it died.
///
/// On start: `restoreSessions` takes the channels' sessions back (their logs'
/// unacknowledged bytes are delivered again); a `reopen` channel waits for
/// its link, which the restored central brings back by itself, and opens
/// again on the same session (`ble.l2cap.reopened`); any other channel ends,
/// its holder told why. `resumeL2CAP` listens on the published PSMs again,
/// as fixed PSMs even where the kernel picked them, so a central that read
/// the PSM from a GATT characteristic still finds it; a PSM that cannot be
/// bound again is logged and reported to its app (`ble.l2cap.unpublished`).
/// What the kernel held unread in a socket when vigild died is lost with it.
extension DaemonCore {
    /// The state file's L2CAP part: apps' published PSMs and `reopen`
    /// channels, open or waiting for their link (control clients' end with
    /// their connection). Intents not yet restored are kept as they were.
    func savedL2CAP() -> [String: SavedL2CAP] {
        var result = l2capState.restoring
        for (psm, published) in l2capState.published.sorted(by: { $0.key < $1.key }) {
            guard case let .app(app) = published.client else { continue }
            result[app, default: SavedL2CAP()].published.append(SavedPSM(
                psm: Int(psm), dynamic: published.dynamic, security: published.options.security?.description,
                receiveMTU: Int(published.options.receiveMTU ?? Self.defaultL2CAPReceiveMTU),
                coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: published.coalesce)))
        }
        var requests = l2capState.waiting
        for (session, channel) in l2capState.channels { requests[session] = channel.request }
        for (session, request) in requests.sorted(by: { $0.key < $1.key }) where request.reopen {
            guard case let .app(app) = request.client else { continue }
            result[app, default: SavedL2CAP()].channels.append(SavedChannel(
                session: session, peer: request.peer, psm: Int(request.psm.value), security: request.options.security?.description,
                receiveMTU: Int(request.options.receiveMTU ?? Self.defaultL2CAPReceiveMTU),
                coalesceMilliseconds: L2CAPCoalescing.milliseconds(of: request.coalesce)))
        }
        return result
    }

    /// An app's L2CAP intent changed (publish, unpublish, a `reopen` channel
    /// opened): the state file says so before the reply, so a PSM the app
    /// advertises is one the next daemon listens on.
    func saveL2CAPIntent(of client: BluetoothClient) {
        guard case .app = client else { return }
        saveState()
    }

    // MARK: Restoring

    /// At start, before `restoreSessions`: what the state file says.
    func prepareL2CAPRestore(_ saved: [String: SavedL2CAP]?) {
        l2capState.restoring = config.bluetooth ? saved ?? [:] : [:]
    }

    static func isChannelRecord(_ record: SessionRecord) -> Bool {
        record.protocolString.hasPrefix("l2cap:")
    }

    /// A restored channel session's wake mode, set before its log is
    /// restored (its data events wake by it): `bluetooth-peripheral` for a
    /// channel a central opened to a PSM the app published, else `bluetooth-central`.
    func restoreChannelWakeMode(_ record: SessionRecord, app: String) {
        let saved = l2capState.restoring[app]
        let psm = record.protocolString.split(separator: "/").last.flatMap { Int($0) }
        let reopens = saved?.channels.contains { $0.session == record.id } ?? false
        let incoming = !reopens && (saved?.published.contains { $0.psm == psm } ?? false)
        l2capState.wakeModes[record.id] = incoming ? .bluetoothPeripheral : .bluetoothCentral
    }

    /// `restoreSessions`, for a channel's session an earlier daemon recorded:
    /// a `reopen` channel waits for its link (its app hears it closed with
    /// `willReopen`, as after a link loss); any other ends, its app told why.
    func restoreChannelSession(_ record: SessionRecord) {
        guard case let .app(app) = record.holder else { return }
        let wakeMode = l2capState.wakeModes[record.id] ?? .bluetoothCentral
        guard config.bluetooth else {
            return finishChannel(record.id, wakeMode: wakeMode, reason: "vigild restarted with Bluetooth disabled in its config")
        }
        guard let saved = l2capState.restoring[app]?.channels.first(where: { $0.session == record.id }) else {
            return finishChannel(record.id, wakeMode: wakeMode,
                                 reason: "vigild restarted, and an L2CAP channel's socket ends with it (the channel was not opened with reopen)")
        }
        let request: ChannelRequest
        do throws(ProtocolError) {
            let options = try options(security: saved.security, receiveMTU: saved.receiveMTU)
            request = ChannelRequest(client: .app(app), peer: saved.peer, psm: try psm(saved.psm), options: options, reopen: true,
                                     coalesce: try channelCoalescing(saved.coalesceMilliseconds))
        } catch {
            return finishChannel(record.id, wakeMode: wakeMode, reason: "vigild restarted and cannot reopen the channel: \(error.message)")
        }
        l2capState.waiting[record.id] = request
        let reason = "vigild restarted; the channel reopens when the link to \(saved.peer) is back (bytes vigild had not read from it are lost)"
        logger.info("l2cap: session \(record.id) of \(app) re-established after a daemon restart: PSM \(saved.psm) on \(saved.peer) reopens when the link is back")
        notifyChannelClosed(record.id, holder: record.holder, wakeMode: wakeMode, reason: reason, willReopen: true)
    }

    /// Once the central and peripheral are restored: the published PSMs
    /// listen again, and `reopen` channels whose app no longer wants the
    /// link end (nothing would bring it back).
    func resumeL2CAP() {
        let restoring = l2capState.restoring
        l2capState.restoring = [:]
        for (app, saved) in restoring.sorted(by: { $0.key < $1.key }) {
            guard let known = engine.apps[app], !known.forceQuit else { continue }
            for published in saved.published {
                relisten(published, app: app)
            }
        }
        for (session, request) in l2capState.waiting.sorted(by: { $0.key < $1.key }) where l2capState.undecided[session] == nil {
            guard central?.assumeIsolated({ $0.wantsLink(request.client, address: request.peer) }) != true else { continue }
            l2capState.waiting[session] = nil
            finishChannel(session, wakeMode: l2capState.wakeModes[session] ?? .bluetoothCentral,
                          reason: "vigild restarted, and the app no longer asks for the link to \(request.peer)")
        }
        if !restoring.isEmpty { saveState() }
    }

    /// Listens on a restored PSM again (a fixed PSM now, whoever picked it),
    /// or tells the app it could not.
    private func relisten(_ saved: SavedPSM, app: String) {
        let client = BluetoothClient.app(app)
        do throws(ProtocolError) {
            let options = try options(security: saved.security, receiveMTU: saved.receiveMTU)
            let coalesce = try channelCoalescing(saved.coalesceMilliseconds)
            if let existing = l2capState.published[UInt16(clamping: saved.psm)] {
                throw ProtocolError(.invalidState, "PSM \(saved.psm) is already published by \(existing.client)")
            }
            _ = try listen(try psm(saved.psm), options: options, coalesce: coalesce, client: client, dynamic: saved.dynamic)
            logger.info("l2cap: \(app)'s PSM \(saved.psm) listens again after a daemon restart")
        } catch {
            let reason = "vigild restarted and cannot listen on PSM \(saved.psm) again: \(error.message)"
            logger.error("l2cap: \(app): \(reason); the app is told (\(L2CAPEventKind.unpublished))")
            deliverBluetoothEvent(L2CAPEventKind.unpublished, ["psm": .number(Double(saved.psm)), "reason": .string(reason)], [],
                                  mode: .bluetoothPeripheral, to: client)
        }
    }
}

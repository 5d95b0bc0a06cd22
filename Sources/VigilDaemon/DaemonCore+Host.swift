import FoundationEssentials
import Glibc
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The engine's effects, carried out with real processes, cgroups and sockets.
///
/// The engine only ever runs on this actor's executor, so these nonisolated
/// entry points assert that and step back into the actor synchronously.
///
/// A spawn (milliseconds: fork, exec, the process records) journals the
/// engine's pending changes first: bytes just read from a port are then
/// durable before the daemon spends that time, and a SIGKILL within it loses
/// none of them. A thaw does not (since 2026-11-26): it is one pwrite(2) or
/// kill(2), and the event it is for is journaled before it is sent, a few
/// system calls later in the same loop turn, together with its `sent` record
/// (one journal write per wake, not two).
extension DaemonCore: LifecycleHost {
    nonisolated func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32 {
        try assumeIsolated { core in
            core.commitJournal(compactIfDue: false)
            return try core.apps.spawn(manifest, launch: launch, services: core)
        }
    }

    nonisolated func freeze(_ app: String) {
        assumeIsolated { $0.apps.freeze(app, services: $0) }
    }

    nonisolated func thaw(_ app: String) {
        assumeIsolated { $0.apps.thaw(app, services: $0) }
    }

    nonisolated func kill(_ app: String) {
        assumeIsolated { $0.apps.kill(app, services: $0) }
    }

    nonisolated func send(_ message: OutboundMessage, to app: String) {
        assumeIsolated { $0.sendToApp(message, app) }
    }

    nonisolated func record(_ decision: Decision) {
        assumeIsolated { $0.recordDecision(decision) }
    }

    nonisolated func stateChanged(_ app: String, from old: AppState, to new: AppState) {
        assumeIsolated { $0.appStateChanged(app, from: old, to: new) }
    }
}

extension DaemonCore {
    /// Event sources that treat foreground and background differently hear of
    /// every state change here.
    /// The engine is mid-transition when it reports a change, so reactions
    /// (which may deliver events) run once the current engine call returns.
    func appStateChanged(_ app: String, from old: AppState, to new: AppState) {
        pendingStateChanges.append((app, old, new))
    }

    func dispatchStateChanges() {
        guard !pendingStateChanges.isEmpty else { return }
        while !pendingStateChanges.isEmpty {
            let (app, old, new) = pendingStateChanges.removeFirst()
            componentsAppStateChanged(app, from: old, to: new)
        }
        systemd.update(services: self)
    }
}

extension DaemonCore {
    /// Delivers an engine message to the app's current connection.
    func sendToApp(_ message: OutboundMessage, _ app: String) {
        guard let connection = clients.connection(ofApp: app) else { return }
        switch message {
        case let .lifecycle(lifecycle):
            hold(lifecycle, to: connection)
        case let .event(event, redelivered):
            commitJournal(compactIfDue: false)  // journaled before the app can see it
            componentsWillSend(event, to: app)  // e.g. a session log readable by the app before it learns the path
            hold(
                EventMessage(seq: event.seq, kind: event.kind, attributes: event.attributes, redelivered: redelivered),
                body: event.payload, to: connection)
        case let .taskExpiring(expiring):
            hold(expiring, to: connection)
        case let .deadline(deadline):
            hold(DeadlineChanged(deadline: deadline), to: connection)
        }
    }

    /// Within an engine call (`withEngine`), a frame to an app waits in its
    /// connection until the outermost call returns (`ClientConnections.hold`).
    private func hold<M: Message>(_ message: M, body: [UInt8] = [], to connection: ClientConnection) {
        let frame = MessageCodec.encode(message, body: body)
        if engineCallDepth > 0 {
            clients.hold(frame: frame, to: connection)
        } else {
            clients.send(frame: frame, to: connection, services: self)
        }
    }
}

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

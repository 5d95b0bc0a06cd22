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
            return try core.spawn(manifest, launch: launch)
        }
    }

    nonisolated func freeze(_ app: String) {
        assumeIsolated { core in
            core.markStopped(app, true)  // recorded first: a crash right after leaves it stopped
            core.applySuspension(app, "freeze") { try $0.freeze($1, pid: $2) }
        }
    }

    nonisolated func thaw(_ app: String) {
        assumeIsolated { core in
            core.applySuspension(app, "thaw") { try $0.thaw($1, pid: $2) }
            core.markStopped(app, false)
        }
    }

    nonisolated func kill(_ app: String) {
        assumeIsolated { $0.applySuspension(app, "kill") { try $0.kill($1, pid: $2) } }
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
    func logPath(of app: String) -> String { config.logDirectory + "/" + app + ".log" }

    func spawn(_ manifest: AppManifest, launch: LaunchOptions) throws -> Int32 {
        // Who it runs as, resolved now: an account made after the manifest was read is found.
        let identity = try identity(of: manifest)
        appIdentities[manifest.id] = identity
        let runAs = identity.credentials == nil ? "" : " as \(identity.summary)"
        let banner = "vigild: starting \(manifest.exec.joined(separator: " "))\(runAs) (reason: \(launch.reason.rawValue))"
        let output = try openAppOutput(manifest.id, banner: banner)
        defer { Glibc.close(output.fd) }

        var environment = SpawnRequest.currentEnvironment()
        if identity.credentials != nil {
            // The daemon's per-user locations are not the app user's.
            for name in ["XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "MAIL"] {
                environment[name] = nil
            }
            environment.merge(identity.environment) { _, user in user }
        }
        environment.merge(manifest.environment) { _, app in app }
        // Set only when its output is the journal: the daemon's own names the daemon's stderr.
        environment["JOURNAL_STREAM"] = output.journalStream
        environment["VIGIL_SOCKET"] = socketPath
        environment["VIGIL_APP_ID"] = manifest.id
        environment["VIGIL_LAUNCH_REASON"] = launch.reason.rawValue
        let request = SpawnRequest(
            executable: manifest.exec[0], arguments: Array(manifest.exec.dropFirst()), environment: environment,
            // An app of another user starts in "/" unless told otherwise, not in the daemon's folder.
            workingDirectory: manifest.workingDirectory ?? (identity.credentials == nil ? nil : "/"),
            cgroup: try suspender.prepareSpawn(for: manifest.id),
            output: output.fd, newSession: true, name: manifest.id, credentials: identity.credentials)
        let process = try ProcessSpawner.spawn(request)
        // Recorded at once, for the next daemon should this one die.
        let startTime = ProcessStat.read(process.pid)?.startTime ?? 0
        watchExit(of: manifest.id, pid: process.pid, pidfd: process.pidfd, isChild: true, startTime: startTime, stopped: false)
        saveProcessRecords()
        return process.pid
    }

    /// Follows a process's end through its pidfd: no polling, no SIGCHLD.
    func watchExit(of app: String, pid: Int32, pidfd: Int32, isChild: Bool, startTime: UInt64, stopped: Bool) {
        var process = AppProcess(pid: pid, pidfd: pidfd, watch: nil, isChild: isChild, startTime: startTime, stopped: stopped)
        process.watch = try? loop.watch(pidfd, for: .readable) { [unowned self] _ in
            self.assumeIsolated { $0.processEnded(app, pid: pid) }
        }
        processes[app] = process
    }

    /// Notes a freeze or thaw. `processes.json` is not rewritten for it: a
    /// successor reads whether an app is stopped from the system itself
    /// (`cgroup.freeze`, or state `T` in /proc), and rewriting (and, through
    /// Foundation's atomic write, fsyncing) the whole file twice per wake was
    /// most of a wake's cost, growing with the number of apps.
    func markStopped(_ app: String, _ stopped: Bool) {
        guard processes[app] != nil else { return }
        processes[app]!.stopped = stopped
    }

    func processEnded(_ app: String, pid: Int32) {
        guard let process = processes[app], process.pid == pid else { return }
        if let watch = process.watch { loop.removeWatch(watch) }
        var status = "status unknown (not our child)"
        var crashed = false
        if let result = try? ProcessControl.reap(SpawnedProcess(pid: pid, pidfd: process.pidfd)) {
            switch result {
            case .unknown:
                break
            case let .exited(code):
                status = "exit \(code)"
                crashed = code != 0
            case let .signaled(signal):
                status = "signal \(signal)"
                crashed = true
            }
        }
        Glibc.close(process.pidfd)
        processes[app] = nil
        saveProcessRecords()
        // The app's tree ends with its main process: no orphaned helpers.
        try? suspender.kill(app, pid: pid)
        if let connectionID = appConnections[app], let connection = connections[connectionID] {
            close(connection)
        }
        withEngine { engine, now in
            engine.processExited(app, pid: pid, status: status, crashed: crashed, now: now)
        }
        if processes.isEmpty, stopWaiter != nil { endStopWait() }
    }

    func applySuspension(_ app: String, _ what: String, _ action: (any Suspender, String, Int32) throws -> Void) {
        guard let pid = processes[app]?.pid ?? engine.apps[app]?.pid else { return }
        do {
            try action(suspender, app, pid)
        } catch {
            logger.error("\(what) \(app) failed: \(error)", metadata: ["app": "\(app)"])
        }
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
        updateSystemdStatus()
    }
}

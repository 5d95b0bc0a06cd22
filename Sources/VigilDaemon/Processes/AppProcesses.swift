import FoundationEssentials
import Glibc
import Logging
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The apps' processes: launching them (as their manifests' users, output to
/// the journal or a file), following each to its end through a pidfd,
/// freezing and thawing them (`Suspender`), the records a successor needs to
/// adopt them (`processes.json`), and adopting what a predecessor left.
///
/// The core carries out the engine's effects (`LifecycleHost`) through this
/// component, and holds it directly rather than looking it up: freeze and
/// thaw are on every wake's path.
final class AppProcesses: DaemonComponent {
    let name = "apps"
    /// How apps are confined and suspended (cgroup freezer or signals).
    private let suspender: any Suspender
    private var processes: [String: AppProcess] = [:]
    /// What the next daemon needs to adopt the app processes (see `ProcessRecord`).
    private let records: ProcessRecordFile
    /// Each app's user and groups, resolved at its launch (cleared by a reload).
    var identities: [String: AppIdentity] = [:]
    /// Apps whose output went to a journal stream at their last launch (the
    /// rest write `<log-dir>/<id>.log`): what `AppInfo` reports as their log.
    var outputInJournal: Set<String> = []
    /// Set while the stop waits for apps to end (`on-stop = "terminate"`).
    private var stopWaiter: CheckedContinuation<Void, Never>?
    private var stopTimer: TimerID?
    /// The socket apps are told to connect to (`VIGIL_SOCKET`).
    private let socketPath: String

    struct AppProcess {
        var pid: Int32
        var pidfd: Int32
        var watch: WatchID?
        /// Whether we can reap it (adopted processes are not our children).
        var isChild: Bool
        /// /proc/PID/stat field 22, recorded to tell a reused pid apart.
        var startTime: UInt64
        /// Whether the daemon has it stopped (frozen or SIGSTOPped).
        var stopped: Bool
    }

    init(config: DaemonConfig, socketPath: String, logger: Logger) {
        suspender = Self.makeSuspender(config: config, logger: logger)
        records = ProcessRecordFile(directory: config.stateDirectory)
        self.socketPath = socketPath
    }

    /// Picks the cgroup freezer where it works, and says why not where it doesn't.
    static func makeSuspender(config: DaemonConfig, logger: Logger) -> any Suspender {
        if config.suspension == .signal {
            return SignalSuspender(reason: "chosen in the configuration (suspension = \"signal\")")
        }
        let failure: String
        if let mount = Cgroup.unifiedMountPoint() {
            let root: String
            if let configured = config.cgroupRoot {
                root = configured
            } else {
                let own = (try? Cgroup.ofSelf()) ?? "/"
                root = mount + (own == "/" ? "" : own) + "/vigil"
            }
            if Cgroup.isUsable(at: parentDirectory(of: root)) || Cgroup.isUsable(at: root) {
                do {
                    return try CgroupSuspender(root: Cgroup(path: root), mountPoint: mount)
                } catch {
                    failure = "cannot create \(root): \(error)"
                }
            } else {
                failure = "no writable cgroup v2 tree at \(root) (run as root, or under systemd with Delegate=yes)"
            }
        } else {
            failure = "cgroup2 is not mounted"
        }
        if config.suspension == .cgroup {
            logger.error("suspension = \"cgroup\" was asked for, but \(failure); using signals")
        }
        return SignalSuspender(reason: failure)
    }

    // MARK: The component's hooks

    /// How apps are suspended here, and why (for `status` and the log).
    var suspension: (mechanism: SuspensionMechanism, detail: String, cgroupRoot: String?) {
        (suspender.mechanism, suspender.detail, suspender.cgroupRoot)
    }

    func manifestsReloaded<S: DaemonServices>(services: isolated S) {
        identities = [:]
    }

    /// The app a peer process belongs to, if any (a connection's handshake).
    func app<S: DaemonServices>(owning pid: Int32, services: isolated S) -> String? {
        suspender.app(owning: pid, running: services.engine.apps.compactMapValues(\.pid))
    }

    /// Where the app's output goes: its log file, or (nil) the journal.
    func logFile(of app: String, config: DaemonConfig) -> String? {
        outputInJournal.contains(app) ? nil : Self.logPath(of: app, config: config)
    }

    static func logPath(of app: String, config: DaemonConfig) -> String { config.logDirectory + "/" + app + ".log" }

    // MARK: Adoption

    /// Adopts what the last daemon left, then relaunches the apps that have
    /// restored events to handle: before any other component delivers.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        adoptSurvivors(services: services)
        services.engine.relaunchForRestoredEvents(now: services.now)
    }

    /// Adopts the apps an earlier daemon left running (or frozen, or stopped),
    /// found through its process records and, with the freezer, the cgroup tree.
    private func adoptSurvivors<S: DaemonServices>(services: isolated S) {
        let logger = services.logger
        var recorded: [ProcessRecord] = []
        do {
            recorded = try records.load()
        } catch {
            logger.error("cannot read \(records.path), adopting only what the cgroup tree shows: \(error)")
        }
        var notes: [String] = []
        let engine = services.engine!
        for survivor in suspender.survivors(recorded: recorded, known: Set(engine.apps.keys), notes: &notes) {
            // The pidfd pins the process; checked again after it is open, in case the pid was reused meanwhile.
            guard let pidfd = try? ProcessControl.pidfdOpen(survivor.pid) else { continue }
            guard ProcessStat.read(survivor.pid)?.startTime == survivor.startTime else {
                Glibc.close(pidfd)
                continue
            }
            watchExit(of: survivor.app, pid: survivor.pid, pidfd: pidfd, isChild: false, startTime: survivor.startTime,
                      stopped: survivor.frozen, services: services)
            engine.adopt(survivor.app, pid: survivor.pid, frozen: survivor.frozen, now: services.now, how: survivor.how)
        }
        for note in notes { logger.notice("adoption: \(note)") }
        saveRecords(logger: logger)
    }

    // MARK: The engine's effects

    func spawn<S: DaemonServices>(_ manifest: AppManifest, launch: LaunchOptions, services: isolated S) throws -> Int32 {
        // Who it runs as, resolved now: an account made after the manifest was read is found.
        let identity = try identity(of: manifest, config: services.config)
        identities[manifest.id] = identity
        let runAs = identity.credentials == nil ? "" : " as \(identity.summary)"
        let banner = "vigild: starting \(manifest.exec.joined(separator: " "))\(runAs) (reason: \(launch.reason.rawValue))"
        let output = try openOutput(manifest.id, banner: banner, config: services.config, logger: services.logger)
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
        watchExit(of: manifest.id, pid: process.pid, pidfd: process.pidfd, isChild: true, startTime: startTime, stopped: false,
                  services: services)
        saveRecords(logger: services.logger)
        return process.pid
    }

    func freeze<S: DaemonServices>(_ app: String, services: isolated S) {
        markStopped(app, true)  // recorded first: a crash right after leaves it stopped
        applySuspension(app, "freeze", services: services) { try $0.freeze($1, pid: $2) }
    }

    func thaw<S: DaemonServices>(_ app: String, services: isolated S) {
        applySuspension(app, "thaw", services: services) { try $0.thaw($1, pid: $2) }
        markStopped(app, false)
    }

    func kill<S: DaemonServices>(_ app: String, services: isolated S) {
        applySuspension(app, "kill", services: services) { try $0.kill($1, pid: $2) }
    }

    /// Follows a process's end through its pidfd: no polling, no SIGCHLD.
    private func watchExit<S: DaemonServices>(
        of app: String, pid: Int32, pidfd: Int32, isChild: Bool, startTime: UInt64, stopped: Bool, services: isolated S
    ) {
        var process = AppProcess(pid: pid, pidfd: pidfd, watch: nil, isChild: isChild, startTime: startTime, stopped: stopped)
        process.watch = try? services.loop.watch(pidfd, for: .readable, services.watchCallback(AppProcesses.self) { apps, _, services in
            apps.processEnded(app, pid: pid, services: services)
        })
        processes[app] = process
    }

    /// Notes a freeze or thaw. `processes.json` is not rewritten for it: a
    /// successor reads whether an app is stopped from the system itself
    /// (`cgroup.freeze`, or state `T` in /proc), and rewriting (and, through
    /// Foundation's atomic write, fsyncing) the whole file twice per wake was
    /// most of a wake's cost, growing with the number of apps.
    private func markStopped(_ app: String, _ stopped: Bool) {
        guard processes[app] != nil else { return }
        processes[app]!.stopped = stopped
    }

    private func processEnded<S: DaemonServices>(_ app: String, pid: Int32, services: isolated S) {
        guard let process = processes[app], process.pid == pid else { return }
        if let watch = process.watch { services.loop.removeWatch(watch) }
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
        saveRecords(logger: services.logger)
        // The app's tree ends with its main process: no orphaned helpers.
        try? suspender.kill(app, pid: pid)
        if let connection = services.connection(ofApp: app) { services.close(connection) }
        services.withEngine { engine, now in
            engine.processExited(app, pid: pid, status: status, crashed: crashed, now: now)
        }
        if processes.isEmpty, stopWaiter != nil { endStopWait(services: services) }
    }

    private func applySuspension<S: DaemonServices>(
        _ app: String, _ what: String, services: isolated S, _ action: (any Suspender, String, Int32) throws -> Void
    ) {
        guard let pid = processes[app]?.pid ?? services.engine.apps[app]?.pid else { return }
        do {
            try action(suspender, app, pid)
        } catch {
            services.logger.error("\(what) \(app) failed: \(error)", metadata: ["app": "\(app)"])
        }
    }

    /// Rewrites `processes.json` from `processes`.
    private func saveRecords(logger: Logger) {
        let list = processes.map { app, process in
            ProcessRecord(app: app, pid: process.pid, startTime: process.startTime, session: process.pid, stopped: process.stopped)
        }
        do {
            try records.save(list)
        } catch {
            logger.error("cannot write \(records.path): \(error)")
        }
    }

    // MARK: The daemon's stop

    /// Graceful stop: no app is left frozen or stopped. With `on-stop =
    /// "leave"` apps keep running and are adopted again by the next daemon;
    /// with `"terminate"` they are told `willTerminate`, given the exit grace,
    /// and killed with everything they started.
    func endForStop<S: DaemonServices>(_ policy: StopPolicy, services: isolated S) async {
        guard let engine = services.engine else { return }
        switch policy {
        case .leave:
            for (id, app) in engine.apps where app.state == .suspended {
                thaw(id, services: services)
                services.logger.info("thawed \(id) for the daemon's stop, left for the next daemon to adopt", metadata: ["app": "\(id)"])
            }
        case .terminate:
            await terminateApps(services: services)
        }
    }

    /// `on-stop = "terminate"`: every app is told `willTerminate` (the engine
    /// kills it after the exit grace); waits until all have ended.
    private func terminateApps<S: DaemonServices>(services: isolated S) async {
        services.withEngine { engine, now in engine.terminateForDaemonStop(now: now) }
        let ending = Array(processes.keys)
        if !processes.isEmpty {
            let grace = services.config.timings.exitGrace
            await withCheckedContinuation { continuation in
                stopWaiter = continuation
                // The engine kills at the exit grace; this only bounds a process that will not die.
                stopTimer = services.loop.schedule(after: .seconds(grace + 5), services.callback(AppProcesses.self) { apps, services in
                    apps.endStopWait(services: services)
                })
            }
        }
        for (app, process) in processes {
            services.logger.error("\(app) (pid \(process.pid)) did not end within the exit grace and its kill", metadata: ["app": "\(app)"])
        }
        for app in ending { suspender.ended(app) }
    }

    private func endStopWait<S: DaemonServices>(services: isolated S) {
        if let stopTimer { services.loop.cancelTimer(stopTimer) }
        stopTimer = nil
        stopWaiter?.resume()
        stopWaiter = nil
    }

    /// Stops following the processes (what still runs is left for the next
    /// daemon to adopt); after the apps were left or ended, before the state
    /// is saved.
    func stopFollowing<S: DaemonServices>(services: isolated S) {
        for process in processes.values {
            if let watch = process.watch { services.loop.removeWatch(watch) }
            Glibc.close(process.pidfd)
        }
        processes = [:]
    }
}

import FoundationEssentials
import Glibc
import Logging
import VigilBluetooth
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// The daemon's single owner of state: the lifecycle engine, the app processes
/// and the client connections.
///
/// It is an actor whose executor is the `EventLoop` thread, so socket, pidfd
/// and timer handlers (which run on that thread) enter it synchronously with
/// `assumeIsolated`, and everything the engine decides happens in one order.
actor DaemonCore {
    static let version = "vigild/\(VigilVersion.current)"

    nonisolated let loop: EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    let config: DaemonConfig
    let socketPath: String
    let configFile: String?
    let logger: Logger
    let limits = FrameLimits.default
    let started = MonotonicInstant.now()

    var engine: LifecycleEngine!
    let suspender: any Suspender
    var decisions: DecisionHistory
    var manifestProblems: [ManifestProblem] = []
    /// Manifests added in code (the built-in demo) on top of the directories.
    var builtInManifests: [String: AppManifest] = [:]
    /// Which manifest files and users are accepted (docs/security.md).
    let manifestPolicy: ManifestPolicy
    /// Each app's user and groups, resolved at its launch (cleared by a reload).
    var appIdentities: [String: AppIdentity] = [:]
    /// Session logs made readable to an app's group: session id -> gid.
    var grantedLogs: [Int: gid_t] = [:]

    var listener: UnixListener?
    var listenerWatch: WatchID?
    /// The metrics endpoint, when configured (`DaemonCore+Metrics`).
    var metricsEndpoint: MetricsEndpoint?
    var connections: [Int: ClientConnection] = [:]
    var nextConnectionID = 1
    /// The connection each app is currently talking on.
    var appConnections: [String: Int] = [:]
    /// Apps whose output went to a journal stream at their last launch (the
    /// rest write `<log-dir>/<id>.log`): what `AppInfo` reports as their log.
    var appOutputInJournal: Set<String> = []
    var processes: [String: AppProcess] = [:]
    var engineTimer: (id: TimerID, deadline: UInt64)?
    let stateStore: StateStore
    /// What the next daemon needs to adopt the app processes (see `ProcessRecord`).
    let processRecordFile: ProcessRecordFile
    /// What the stop does with the apps (shown by `status`; `shutdown` is told).
    let onStop: StopPolicy
    /// How to start a port keeper; nil: none (see `VigilDaemonService.portKeeper`).
    let portKeeperCommand: [String]?
    /// Set while `shutdown` waits for apps to end (`on-stop = "terminate"`).
    var stopWaiter: CheckedContinuation<Void, Never>?
    var stopTimer: TimerID?
    /// State changes reported by the engine, handled after its current call.
    var pendingStateChanges: [(app: String, from: AppState, to: AppState)] = []
    /// `withEngine` calls under way (they nest); while any is, frames to apps
    /// wait in their connections (`heldAppOutput`) and go out when it returns.
    var engineCallDepth = 0
    var heldAppOutput: [ClientConnection] = []
    var accessoryState = AccessoryState(rules: [], bufferLimit: 0)
    var l2capState = L2CAPState()
    /// The subsystems, in start order (`DaemonComponent`).
    let components: [any DaemonComponent]
    /// Each request type a component handles, to that component.
    let requestRoutes: [String: any DaemonComponent]
    /// A pending write of the state file; changes within it are written together.
    var saveTimer: TimerID?
    /// Set by the first stop signal (`VigilDaemonService`).
    var stopping = false
    /// The built-in demo's next step (`DemoDriver`).
    var demoTimer: TimerID?
    /// systemd's notification socket and watchdog (`DaemonCore+Systemd.swift`).
    let systemd: SystemdLink
    /// The last STATUS= line sent to systemd.
    var systemdStatus: String?
    var watchdog: SystemdWatchdog?
    /// The listening socket systemd passed (socket activation), used instead of binding one.
    var passedListener: UnixListener?

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

    init(
        config: DaemonConfig, socketPath: String, configFile: String?, onStop: StopPolicy? = nil, portKeeper: [String]? = nil,
        loop: EventLoop, logger: Logger, systemd: SystemdLink = SystemdLink(), passedListener: UnixListener? = nil
    ) {
        self.config = config
        self.systemd = systemd
        self.passedListener = passedListener
        self.onStop = onStop ?? config.onStop
        self.portKeeperCommand = portKeeper
        self.socketPath = socketPath
        self.configFile = configFile
        self.loop = loop
        self.logger = logger
        self.decisions = DecisionHistory(capacity: config.decisionLogSize, logger: logger)
        self.suspender = Self.makeSuspender(config: config, logger: logger)
        self.stateStore = StateStore(directory: config.stateDirectory, durability: config.durability)
        self.processRecordFile = ProcessRecordFile(directory: config.stateDirectory)
        self.manifestPolicy = Self.manifestPolicy(for: config)
        let components: [any DaemonComponent] = [BluetoothComponent(), L2CAPBridge(), RefreshComponent(), MQTTComponent()]
        self.components = components
        self.requestRoutes = Self.routes(for: components)
    }

    /// The central role, for the L2CAP code (nil when Bluetooth is disabled or stopped).
    var central: BluetoothCentral? { component(BluetoothComponent.self)?.central }

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

    // MARK: Start and stop

    func start(demo: Bool) throws {
        engine = LifecycleEngine(timings: config.timings, queueLimit: config.eventQueueLimit, host: self)
        for directory in [config.stateDirectory, config.logDirectory] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        attachDecisionLog()
        if demo { builtInManifests = DemoDriver.manifests(stateDirectory: config.stateDirectory) }
        logSecurityMode()
        reloadManifests()
        let saved = stateStore.load(logger: logger)
        engine.restore(saved.apps, now: now)
        stateStore.open(engine: engine, bluetooth: saved.bluetooth, logger: logger)
        // Listening before any app is woken or launched (nothing is accepted
        // before `start` returns: this runs on the loop's thread).
        let listener = try passedListener ?? UnixListener.bind(path: socketPath, permissions: 0o666)
        passedListener = nil
        self.listener = listener
        listenerWatch = try loop.watch(listener.fd, for: .readable) { [unowned self] _ in
            self.assumeIsolated { $0.acceptClients() }
        }
        startMetrics()  // before anything it counts happens
        adoptSurvivors()
        engine.relaunchForRestoredEvents(now: now)
        startAccessories()
        connectPortKeeper()
        prepareL2CAPRestore(saved.bluetooth?.l2cap)
        restoreSessions()
        try startComponents(restoring: saved)
        logger.notice("listening", metadata: [
            "socket": "\(socketPath)", "suspension": "\(suspender.mechanism.rawValue)", "detail": "\(suspender.detail)",
        ])
        rearmEngineTimer()
    }

    /// Graceful stop: no app is left frozen or stopped. With `on-stop =
    /// "leave"` apps keep running and are adopted again by the next daemon;
    /// with `"terminate"` they are told `willTerminate`, given the exit grace,
    /// and killed with everything they started.
    func shutdown() async {
        if let listenerWatch { loop.removeWatch(listenerWatch) }
        listener?.close()
        listener = nil
        stopMetrics()
        stopComponentIntake()
        if let engine {
            switch onStop {
            case .leave:
                for (id, app) in engine.apps where app.state == .suspended {
                    thaw(id)
                    logger.info("thawed \(id) for the daemon's stop, left for the next daemon to adopt", metadata: ["app": "\(id)"])
                }
            case .terminate:
                await terminateApps()
            }
        }
        stopAccessories(leavingPortsKept: onStop == .leave)
        for connection in connections.values { close(connection) }
        for process in processes.values {
            if let watch = process.watch { loop.removeWatch(watch) }
            Glibc.close(process.pidfd)
        }
        processes = [:]
        if let engineTimer { loop.cancelTimer(engineTimer.id) }
        if let saveTimer { loop.cancelTimer(saveTimer) }
        if let demoTimer { loop.cancelTimer(demoTimer) }
        demoTimer = nil
        saveState()  // before Bluetooth stops: what apps asked of it is saved too
        await stopComponents(leavingApps: onStop == .leave)
        logger.notice("stopped")
    }

    func reloadManifests() {
        let result = ManifestLoader.load(directories: config.manifestDirectories, policy: manifestPolicy)
        appIdentities = [:]
        manifestProblems = result.problems
        for problem in result.problems {
            logger.error("manifest rejected: \(problem)")
        }
        engine.updateManifests(result.manifests.merging(builtInManifests) { file, _ in file })
        logger.info("manifests loaded", metadata: ["apps": "\(engine.apps.keys.sorted())"])
        componentsReloaded()
    }

    /// Adopts the apps an earlier daemon left running (or frozen, or stopped),
    /// found through its process records and, with the freezer, the cgroup tree.
    private func adoptSurvivors() {
        var recorded: [ProcessRecord] = []
        do {
            recorded = try processRecordFile.load()
        } catch {
            logger.error("cannot read \(processRecordFile.path), adopting only what the cgroup tree shows: \(error)")
        }
        var notes: [String] = []
        for survivor in suspender.survivors(recorded: recorded, known: Set(engine.apps.keys), notes: &notes) {
            // The pidfd pins the process; checked again after it is open, in case the pid was reused meanwhile.
            guard let pidfd = try? ProcessControl.pidfdOpen(survivor.pid) else { continue }
            guard ProcessStat.read(survivor.pid)?.startTime == survivor.startTime else {
                Glibc.close(pidfd)
                continue
            }
            watchExit(of: survivor.app, pid: survivor.pid, pidfd: pidfd, isChild: false, startTime: survivor.startTime, stopped: survivor.frozen)
            engine.adopt(survivor.app, pid: survivor.pid, frozen: survivor.frozen, now: now, how: survivor.how)
        }
        for note in notes { logger.notice("adoption: \(note)") }
        saveProcessRecords()
    }

    /// `on-stop = "terminate"`: every app is told `willTerminate` (the engine
    /// kills it after the exit grace); waits until all have ended.
    private func terminateApps() async {
        withEngine { engine, now in engine.terminateForDaemonStop(now: now) }
        let ending = Array(processes.keys)
        if !processes.isEmpty {
            await withCheckedContinuation { continuation in
                stopWaiter = continuation
                // The engine kills at the exit grace; this only bounds a process that will not die.
                stopTimer = loop.schedule(after: .seconds(config.timings.exitGrace + 5)) { [unowned self] in
                    self.assumeIsolated { $0.endStopWait() }
                }
            }
        }
        for (app, process) in processes {
            logger.error("\(app) (pid \(process.pid)) did not end within the exit grace and its kill", metadata: ["app": "\(app)"])
        }
        for app in ending { suspender.ended(app) }
    }

    func endStopWait() {
        if let stopTimer { loop.cancelTimer(stopTimer) }
        stopTimer = nil
        stopWaiter?.resume()
        stopWaiter = nil
    }

    /// Rewrites `processes.json` from `processes`.
    func saveProcessRecords() {
        let records = processes.map { app, process in
            ProcessRecord(app: app, pid: process.pid, startTime: process.startTime, session: process.pid, stopped: process.stopped)
        }
        do {
            try processRecordFile.save(records)
        } catch {
            logger.error("cannot write \(processRecordFile.path): \(error)")
        }
    }

    // MARK: Engine access

    var now: UInt64 { MonotonicInstant.now().nanoseconds }

    /// Runs `body` against the engine, then re-arms the single engine timer
    /// and, when something needs saving (`saveSoonIfChanged`), schedules a
    /// save. Frames the engine sends to apps meanwhile go out when the
    /// outermost call returns, one write per app (see `hold`).
    func withEngine<T, E: Error>(_ body: (LifecycleEngine, UInt64) throws(E) -> T) throws(E) -> T {
        engineCallDepth += 1
        defer {
            commitJournal()
            rearmEngineTimer()
            dispatchStateChanges()
            // After the state changes' fan-out: a component's part may have changed there.
            saveSoonIfChanged()
            engineCallDepth -= 1
            if engineCallDepth == 0 { flushHeldAppOutput() }
        }
        return try body(engine, now)
    }

    /// Asks for the state file to be written soon: a component's part changed
    /// (every component is asked for its part at that save, not only those
    /// whose `savedPartVersion` moved). Coalesced: at most one save per half
    /// second while busy, none while idle.
    func scheduleSave() {
        stateStore.partsRequested = true
        armSaveTimer()
    }

    /// After an engine call: a save only when there is something to save
    /// (issue 34). A wake that changed only queues has them in the journal
    /// already; what may wait there (an acknowledgement) is written by the
    /// save within half a second, if no other journal write takes it first;
    /// a component's part is looked at only when its version moved.
    private func saveSoonIfChanged() {
        guard saveTimer == nil else { return }
        if stateStore.needsSave(engine) || componentPartMoved() { armSaveTimer() }
    }

    private func componentPartMoved() -> Bool {
        for component in components {
            if let version = component.savedPartVersion(services: self),
               stateStore.componentVersions[ObjectIdentifier(component)] != version {
                return true
            }
        }
        return false
    }

    private func armSaveTimer() {
        guard saveTimer == nil else { return }
        saveTimer = loop.schedule(after: .milliseconds(500)) { [unowned self] in
            self.assumeIsolated { core in
                core.saveTimer = nil
                core.saveChanges(snapshot: false)
            }
        }
    }

    /// A snapshot of the apps with a new event journal, and the components'
    /// part if it changed (see `StateStore`): at stop, on the journal's
    /// compaction, after L2CAP's restore.
    func saveState() {
        saveChanges(snapshot: true)
    }

    /// Saves what changed (`StateStore.save`): the components whose
    /// `savedPartVersion` moved make their part again, on top of what was
    /// saved last (every component, when one asked with `scheduleSave`, and
    /// for `snapshot`); the store writes only the parts that differ.
    private func saveChanges(snapshot: Bool) {
        let askAll = snapshot || stateStore.partsRequested
        var parts = DaemonSnapshot(apps: [:], bluetooth: stateStore.savedBluetooth)
        var asked = false
        for component in components {
            let version = component.savedPartVersion(services: self)
            let key = ObjectIdentifier(component)
            guard askAll || (version != nil && stateStore.componentVersions[key] != version) else { continue }
            component.save(into: &parts, services: self)
            asked = true
            if let version { stateStore.componentVersions[key] = version }
        }
        stateStore.save(engine: engine, bluetooth: asked ? .some(parts.bluetooth) : .none, snapshot: snapshot, logger: logger)
    }

    /// One timer for the engine's earliest deadline; none when nothing is due,
    /// so an idle daemon is never woken.
    func rearmEngineTimer() {
        let next = engine.nextDeadline
        if engineTimer?.deadline == next { return }
        if let engineTimer { loop.cancelTimer(engineTimer.id) }
        engineTimer = nil
        guard let next else { return }
        let id = loop.schedule(at: MonotonicInstant(nanoseconds: next)) { [unowned self] in
            self.assumeIsolated { core in
                core.engineTimer = nil
                core.withEngine { engine, now in engine.advance(to: now) }
            }
        }
        engineTimer = (id, next)
    }
}

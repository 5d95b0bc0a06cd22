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
    var decisions: DecisionHistory
    var manifestProblems: [ManifestProblem] = []
    /// Manifests added in code (the built-in demo) on top of the directories.
    var builtInManifests: [String: AppManifest] = [:]
    /// Which manifest files and users are accepted (docs/security.md).
    let manifestPolicy: ManifestPolicy

    var engineTimer: (id: TimerID, deadline: UInt64)?
    let stateStore: StateStore
    /// What the stop does with the apps (shown by `status`; `shutdown` is told).
    let onStop: StopPolicy
    /// State changes reported by the engine, handled after its current call.
    var pendingStateChanges: [(app: String, from: AppState, to: AppState)] = []
    /// `withEngine` calls under way (they nest); while any is, frames to apps
    /// wait in their connections (`heldAppOutput`) and go out when it returns.
    var engineCallDepth = 0
    /// The apps' processes: the engine's effects are carried out through it
    /// (held here, not looked up: freeze and thaw are on every wake's path).
    let apps: AppProcesses
    /// The socket and its clients.
    let clients: ClientConnections
    /// Counts decisions and acknowledgements (held here for the same reason).
    let metricsComponent: MetricsComponent
    /// The subsystems, in start order (`DaemonComponent`).
    let components: [any DaemonComponent]
    /// Each request type a component handles, to that component.
    let requestRoutes: [String: any DaemonComponent]
    /// The components told of each event sent and acknowledgement (on every wake's path).
    let deliveryObservers: [any EventDeliveryObserver]
    /// A pending write of the state file; changes within it are written together.
    var saveTimer: TimerID?
    /// Set by the first stop signal (`VigilDaemonService`).
    var stopping = false
    /// What systemd is told (held here: the core tells it of every state change).
    let systemd: SystemdComponent

    init(
        config: DaemonConfig, socketPath: String, configFile: String?, onStop: StopPolicy? = nil, portKeeper: [String]? = nil,
        loop: EventLoop, logger: Logger, systemd: SystemdLink = SystemdLink(), passedListener: UnixListener? = nil
    ) {
        self.config = config
        let systemd = SystemdComponent(link: systemd)
        self.systemd = systemd
        self.onStop = onStop ?? config.onStop
        self.socketPath = socketPath
        self.configFile = configFile
        self.loop = loop
        self.logger = logger
        self.decisions = DecisionHistory(capacity: config.decisionLogSize, logger: logger)
        clients = ClientConnections(passedListener: passedListener, limits: limits)
        let apps = AppProcesses(config: config, socketPath: socketPath, logger: logger)
        self.apps = apps
        let metrics = MetricsComponent()
        self.metricsComponent = metrics
        self.stateStore = StateStore(directory: config.stateDirectory, durability: config.durability)
        self.manifestPolicy = Self.manifestPolicy(for: config)
        // Start order (the stop's is the reverse): metrics first (it counts
        // from the start); the apps' processes (adopted and relaunched before
        // anything delivers); the stream layer before the transports whose
        // sessions it carries (they take back what it read from
        // sessions.json); Bluetooth before L2CAP and RFCOMM (which use its links). The
        // order is also that of systemd's status line.
        let components: [any DaemonComponent] = [
            metrics, apps, StreamSessions(), AccessoriesComponent(portKeeperCommand: portKeeper), BluetoothComponent(),
            L2CAPComponent(), RFCOMMComponent(), RefreshComponent(), MQTTComponent(), DemoComponent(), systemd,
        ]
        self.components = components
        self.requestRoutes = Self.routes(for: components)
        self.deliveryObservers = components.compactMap { $0 as? any EventDeliveryObserver }
    }


    // MARK: Start and stop

    func start(demo: Bool) throws {
        engine = LifecycleEngine(timings: config.timings, queueLimit: config.eventQueueLimit, host: self)
        for directory in [config.stateDirectory, config.logDirectory] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        attachDecisionLog()
        if demo { builtInManifests = DemoComponent.manifests(stateDirectory: config.stateDirectory) }
        logSecurityMode()
        if !CrashPoint.armed.isEmpty { logger.warning("crash points armed (VIGIL_CRASH_POINT, tests only): \(CrashPoint.armed.map { "\($0.name):\($0.moment.rawValue):\($0.hit)" })") }
        reloadManifests()
        let saved = stateStore.load(logger: logger)
        engine.restore(saved.apps, now: now)
        stateStore.open(engine: engine, bluetooth: saved.bluetooth, logger: logger)
        // Listening before any app is woken or launched (nothing is accepted
        // before `start` returns: this runs on the loop's thread).
        try clients.listen(path: socketPath, services: self)
        // Metrics first (before anything it counts happens), then the apps
        // (adopted, and relaunched for what they have not handled) before
        // any other component delivers.
        try startComponents(restoring: saved)
        logger.notice("listening", metadata: [
            "socket": "\(socketPath)", "suspension": "\(apps.suspension.mechanism.rawValue)", "detail": "\(apps.suspension.detail)",
        ])
        rearmEngineTimer()
    }

    /// Graceful stop: no app is left frozen or stopped. With `on-stop =
    /// "leave"` apps keep running and are adopted again by the next daemon;
    /// with `"terminate"` they are told `willTerminate`, given the exit grace,
    /// and killed with everything they started.
    func shutdown() async {
        clients.stopListening(services: self)
        stopComponentIntake()
        await apps.endForStop(onStop, services: self)
        clients.closeAll(services: self)
        apps.stopFollowing(services: self)
        if let engineTimer { loop.cancelTimer(engineTimer.id) }
        if let saveTimer { loop.cancelTimer(saveTimer) }
        saveState()  // before Bluetooth stops: what apps asked of it is saved too
        await stopComponents(leavingApps: onStop == .leave)
        logger.notice("stopped")
    }

    func reloadManifests() {
        let result = ManifestLoader.load(directories: config.manifestDirectories, policy: manifestPolicy)
        manifestProblems = result.problems
        for problem in result.problems {
            logger.error("manifest rejected: \(problem)")
        }
        engine.updateManifests(result.manifests.merging(builtInManifests) { file, _ in file })
        logger.info("manifests loaded", metadata: ["apps": "\(engine.apps.keys.sorted())"])
        componentsReloaded()
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
            if engineCallDepth == 0 { clients.flushHeld(services: self) }
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

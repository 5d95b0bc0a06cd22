import VigilProtocol

/// The background model as a state machine: one per daemon, for every app.
///
/// The engine is pure logic. Inputs are the user's actions, process and
/// connection changes, events, app requests and the passing of time (`now` is
/// CLOCK_MONOTONIC nanoseconds on every call); outputs are calls on its
/// `LifecycleHost`. It is not thread-safe: the daemon runs it on one executor.
/// Later event sources (accessories, Bluetooth) only call `deliver`; they never
/// get a lifecycle of their own.
public final class LifecycleEngine {
    /// Every app's record. Changed only through `update`, `store` or in-place
    /// queue changes, so that the deadlines below follow every change.
    public var apps: [String: AppRecord] { records }
    var records: [String: AppRecord] = [:]
    /// Each app's next deadline (see `deadline(of:)`), for apps that have one:
    /// the daemon asks for the earliest after every engine call, and copying
    /// every app's record for it made a 1000-app daemon spend most of its CPU
    /// there. Apps changed since the last look are recomputed, no others.
    var deadlines: [String: UInt64] = [:]
    var changedSinceDeadlines: Set<String> = []
    /// Apps whose queue or force-quit flag may have changed since
    /// `journalChanges` last looked: it visits these, not every app (with
    /// 1000 apps, looking at all of them after every engine call was most of
    /// the daemon's CPU per wake).
    var changedSinceJournal: Set<String> = []
    /// Each refresh-scheduled app's due instant, kept with `deadlines`: a
    /// batch sends every refresh due, not only those whose deadline passed.
    var refreshDue: [String: UInt64] = [:]
    /// Moves with every change to what `savedState` holds that the event
    /// journal does not carry: a refresh schedule set, moved or cancelled,
    /// an app added or dropped by a manifest load. The daemon takes a
    /// snapshot when it moved; a wake, which changes only queues (all
    /// journaled), takes none (issue 34).
    public internal(set) var unjournaledChanges: UInt64 = 0
    public var timings: Timings {
        didSet { changedSinceDeadlines.formUnion(records.keys) }  // deadlines depend on them
    }
    public let queueLimit: Int
    unowned let host: any LifecycleHost
    /// Set when the daemon stops for good: nothing is launched any more.
    public private(set) var isStopping = false

    public init(timings: Timings, queueLimit: Int, host: any LifecycleHost) {
        self.timings = timings
        self.queueLimit = queueLimit
        self.host = host
    }

    // MARK: Manifests

    /// Installs the current set of manifests. Apps that disappeared are kept while
    /// they run (their manifest is needed to manage them) and dropped once stopped.
    public func updateManifests(_ manifests: [String: AppManifest]) {
        for (id, manifest) in manifests {
            if records[id] == nil {
                store(id, AppRecord(manifest: manifest, queueLimit: queueLimit))
                unjournaledChanges &+= 1
            } else {
                update(id) { $0.manifest = manifest }
            }
        }
        for (id, record) in records where manifests[id] == nil && record.state == .notRunning {
            store(id, nil)
            unjournaledChanges &+= 1
        }
    }

    // MARK: The user's actions

    /// Launches the app in the foreground, or brings it there.
    public func launch(_ id: String, now: UInt64) throws(ProtocolError) {
        var app = try record(id)
        if app.forceQuit {
            app.forceQuit = false
            store(id, app)
        }
        guard app.state == .notRunning else {
            if !app.state.isForeground { try moveToForeground(id, now: now) }
            return
        }
        try start(id, launch: LaunchOptions(reason: .user), state: .inactive, now: now, action: .launch, reason: "launched by the user")
    }

    /// Leaves the foreground, as pressing Home does.
    public func moveToBackground(_ id: String, now: UInt64) throws(ProtocolError) {
        let app = try record(id)
        guard app.state.isForeground else {
            throw ProtocolError(.invalidState, "\(id) is \(app.state.words), not in the foreground")
        }
        update(id) { $0.state = .inactive }
        notify(id, .willResignActive)
        if app.manifest.exitsOnSuspend {
            update(id) {
                $0.state = .background
                $0.terminateAt = now + nanoseconds(timings.exitGrace)
                $0.pendingExit = .notice
            }
            notify(id, .willTerminate)
            decide(id, .enterBackground, "exits on suspend: told willTerminate, \(seconds(timings.exitGrace)) to exit")
            return
        }
        update(id) { $0.state = .background }
        beginBackgroundStretch(id, now: now, window: timings.suspendGrace)
        notify(id, .didEnterBackground)
        decide(id, .enterBackground, "left the foreground: \(seconds(timings.suspendGrace)) before suspension unless a task is held")
    }

    /// Brings a background, suspended or stopped app to the foreground.
    public func moveToForeground(_ id: String, now: UInt64) throws(ProtocolError) {
        let app = try record(id)
        switch app.state {
        case .notRunning:
            try launch(id, now: now)
            return
        case .active, .inactive:
            return
        case .suspended:
            host.thaw(id)
        case .background:
            break
        }
        endBackgroundStretch(id, now: now)
        update(id) {
            $0.state = .inactive
            if $0.terminateAt != nil {
                // Back before its exit grace ran out: it no longer has to exit.
                $0.terminateAt = nil
                $0.pendingExit = nil
            }
        }
        notify(id, .willEnterForeground)
        update(id) { $0.state = .active }
        notify(id, .didBecomeActive)
        send(id, .deadline(nil))
        decide(id, .enterForeground, "brought to the foreground by the user")
        flush(id)
    }

    /// Force-quit by the user: ended at once; events will not relaunch it until
    /// the user launches it again.
    public func forceQuit(_ id: String, now: UInt64) throws(ProtocolError) {
        let app = try record(id)
        update(id) { $0.forceQuit = true }
        guard app.state != .notRunning else {
            decide(id, .forceQuit, "marked force-quit by the user (it was not running)")
            return
        }
        stop(id, cause: .user, now: now, action: .forceQuit, reason: "force-quit by the user: no relaunch by events until the user launches it")
    }

    /// Termination by the system without notice (as under memory pressure): a
    /// later event may relaunch the app.
    public func terminate(_ id: String, now: UInt64, reason: String = "terminated by the system") throws(ProtocolError) {
        let app = try record(id)
        guard app.state != .notRunning else {
            throw ProtocolError(.invalidState, "\(id) is not running")
        }
        stop(id, cause: .system, now: now, action: .terminate, reason: reason)
    }

    // MARK: Processes and connections

    /// An app's process was identified and is about to be welcomed: what the
    /// welcome says. A process launched into the background starts its
    /// processing window here, at its hello, not at its spawn: a process that
    /// takes long to start (a loaded machine, an interpreter) must not be
    /// suspended before it could take the event it was launched for. The
    /// window is not announced: the welcome carries its deadline.
    public func identified(_ id: String, now: UInt64) -> (state: AppState, launch: LaunchOptions?, deadline: UInt64?)? {
        guard let app = apps[id] else { return nil }
        if app.connectBy != nil {
            update(id) { $0.connectBy = nil }
            if app.state == .background {
                beginBackgroundStretch(id, now: now, window: timings.wakeBudget, announce: false)
            }
        } else if app.awaitingAdoptedHello {
            update(id) { $0.awaitingAdoptedHello = false }
            if app.state == .background, let since = app.backgroundSince, let end = app.suspendAt, end > since {
                beginBackgroundStretch(id, now: now, window: Double(end - since) / 1e9, announce: false)
            }
        }
        let current = apps[id]!
        return (current.state, current.launch, current.state.isForeground ? nil : current.limitAt)
    }

    /// An app's process connected and was identified (after `identified`, if
    /// the caller sent the welcome first). Returns what the welcome says.
    /// `process` is the connecting process when known: events sent on this
    /// connection are recorded as sent to it, and it may acknowledge what it
    /// was sent on an earlier one (`EventQueue.acknowledge`).
    @discardableResult
    public func connected(
        _ id: String, now: UInt64, process: ProcessIdentity? = nil
    ) -> (state: AppState, launch: LaunchOptions?, deadline: UInt64?)? {
        guard let welcome = identified(id, now: now), var app = apps[id] else { return nil }
        app.connected = true
        app.queue.connect(from: process)
        store(id, app)
        if !app.launchNotified {
            update(id) { $0.launchNotified = true }
            notify(id, .didFinishLaunching)
        }
        if app.state == .inactive && app.launch?.reason == .user {
            update(id) { $0.state = .active }
            notify(id, .didBecomeActive)
        }
        flush(id)
        return welcome
    }

    /// The app's connection closed (its process may still live).
    public func disconnected(_ id: String) {
        update(id) {
            $0.connected = false
            $0.queue.rewind()
        }
    }

    /// A process of the app exited with `status` (a description such as "exit 0").
    public func processExited(_ id: String, pid: Int32, status: String, crashed: Bool, now: UInt64) {
        guard let app = apps[id], app.pid == pid else { return }
        let cause = app.pendingExit
        endBackgroundStretch(id, now: now)
        update(id) {
            $0.state = .notRunning
            $0.pid = nil
            $0.connected = false
            $0.tasks = []
            $0.terminateAt = nil
            $0.connectBy = nil
            $0.awaitingAdoptedHello = false
            $0.pendingExit = nil
            $0.launchNotified = false
            $0.queue.rewind()
        }
        switch cause {
        case .user, .system, .watchdog, .launchTimeout:
            // Decided and recorded when the engine ended it. Not relaunched: a
            // process that cannot connect would loop; the next event or the
            // user launches it again, and its events wait for that.
            return
        case .notice:
            decide(id, .exit, "exited after willTerminate (\(status))")
            return
        case nil:
            break
        }
        // Nobody asked it to stop: a crash, or an exit on its own.
        decide(id, crashed ? .crash : .exit, "process \(pid) ended on its own (\(status))")
        guard crashed || app.queue.unacknowledgedCount > 0 else { return }
        update(id) { $0.crashTimes = $0.crashTimes.filter { now - $0 < nanoseconds(timings.relaunchWindow) } + [now] }
        relaunchForPendingEvents(id, now: now, reason: .redelivery)
    }

    /// Re-adopts an app found alive after a daemon restart (in its cgroup, or
    /// by its recorded pid and start time). Its old connection is gone, so
    /// restored events reach it only once it runs and connects again: a frozen
    /// app with restored events it may be woken for is woken for them, as for
    /// any delivery (its background modes and force-quit respected); a running
    /// one gets the wake budget for them instead of the grace period. Either
    /// window starts again when the process says hello (`identified`).
    public func adopt(_ id: String, pid: Int32, frozen: Bool, now: UInt64, how: String = "in its cgroup") {
        guard apps[id] != nil else { return }
        update(id) {
            $0.pid = pid
            $0.launch = LaunchOptions(reason: .adopted)
            $0.state = frozen ? .suspended : .background
            $0.connected = false
            $0.awaitingAdoptedHello = true
            $0.queue.rewind()
        }
        let work = restoredWork(of: apps[id]!)
        if !frozen { beginBackgroundStretch(id, now: now, window: work == nil ? timings.suspendGrace : timings.wakeBudget) }
        decide(id, .adopt, "found alive \(how) after a daemon restart (\(frozen ? "frozen" : "running"))")
        if frozen, let work { wake(id, reason: "\(work) after the daemon restart", now: now) }
    }

    /// After a daemon restart, once survivors are adopted: an app that is not
    /// running but has restored events it may be woken for is launched into
    /// the background for them (reason `redelivery`), as after a crash.
    public func relaunchForRestoredEvents(now: UInt64) {
        for id in apps.keys.sorted() {
            guard let app = apps[id], app.state == .notRunning, let work = restoredWork(of: app),
                  let first = firstWakingEvent(of: app) else { continue }
            try? start(
                id, launch: LaunchOptions(reason: .redelivery, eventKind: first.kind), state: .background, now: now,
                action: .relaunch, reason: "launched into the background after a daemon restart for \(work)")
        }
    }

    /// Restored events the app may be woken or launched for (the first one's
    /// mode; not force-quit, not exits-on-suspend), described for the log.
    func restoredWork(of app: AppRecord) -> String? {
        guard !app.forceQuit, !app.manifest.exitsOnSuspend, let head = firstWakingEvent(of: app) else { return nil }
        return "\(app.queue.queuedCount) restored event(s) (seq \(head.seq) '\(head.kind)' first)"
    }

    /// The daemon stops for good and ends its apps (`on-stop = "terminate"`).
    /// A connected app is thawed, told `willTerminate` and given the exit grace,
    /// as an exits-on-suspend app is, then killed by `advance`; one that cannot
    /// hear it (not connected) is ended at once. No app is launched from now on.
    /// Unacknowledged events stay queued for the next daemon.
    public func terminateForDaemonStop(now: UInt64) {
        isStopping = true
        for id in apps.keys.sorted() {
            guard let app = apps[id], app.state != .notRunning, app.terminateAt == nil else { continue }
            let why = "the daemon is stopping (on-stop = terminate)"
            guard app.connected else {
                stop(id, cause: .system, now: now, action: .terminate, reason: why + ": not connected, ended at once")
                continue
            }
            if app.state == .suspended { host.thaw(id) }
            endBackgroundStretch(id, now: now)
            update(id) {
                if $0.state == .suspended { $0.state = .background }
                $0.tasks = []
                $0.terminateAt = now + nanoseconds(timings.exitGrace)
                $0.pendingExit = .notice
            }
            notify(id, .willTerminate)
            decide(id, .terminate, why + ": told willTerminate, \(seconds(timings.exitGrace)) to exit")
        }
    }

    // MARK: Shared steps

    func record(_ id: String) throws(ProtocolError) -> AppRecord {
        guard let app = apps[id] else { throw ProtocolError(.unknownApp, "no app with id '\(id)'") }
        return app
    }

    /// Replaces (or, with nil, removes) an app's record.
    func store(_ id: String, _ record: AppRecord?) {
        records[id] = record
        changedSinceDeadlines.insert(id)
        changedSinceJournal.insert(id)
    }

    /// Changes an app's record in place and notes the change (deadlines,
    /// journal, the host's state-change hook).
    func update(_ id: String, _ change: (inout AppRecord) -> Void) {
        guard let (old, new) = withRecord(id, { app -> (AppState, AppState) in
            let old = app.state
            change(&app)
            return (old, app.state)
        }) else { return }
        noteChanged(id)
        if new != old {
            host.stateChanged(id, from: old, to: new)
        }
    }

    /// Runs `body` on an app's record where it lies, with one lookup; nil if
    /// there is none. Reading `records[id]` (or `apps[id]`) returns a copy
    /// of the whole record, retaining and releasing every string and array
    /// in it (manifest, queue, tasks): on a wake's path those copies were
    /// about a fifth of the daemon's instructions. `body` must not call back
    /// into the engine (the record is being accessed), and a change made
    /// here is not noted: use it to read, or for fields neither the
    /// deadlines nor the journal depend on, and `update` otherwise.
    @inline(__always)
    func withRecord<T>(_ id: String, _ body: (inout AppRecord) -> T) -> T? {
        guard let index = records.index(forKey: id) else { return nil }
        return body(&records.values[index])
    }

    /// Notes a change made with `withRecord`.
    func noteChanged(_ id: String) {
        changedSinceDeadlines.insert(id)
        changedSinceJournal.insert(id)
    }

    /// Starts a process for the app in `state` (inactive for the foreground,
    /// background for an event).
    func start(
        _ id: String, launch: LaunchOptions, state: AppState, now: UInt64, action: Decision.Action, reason: String
    ) throws(ProtocolError) {
        let manifest = try record(id).manifest
        guard !isStopping else {
            decide(id, .refuse, "not started: the daemon is stopping")
            throw ProtocolError(.launchFailed, "cannot start \(id): the daemon is stopping")
        }
        let pid: Int32
        do {
            pid = try host.startProcess(of: manifest, launch: launch)
        } catch {
            decide(id, .refuse, "could not start: \(error)")
            throw ProtocolError(.launchFailed, "cannot start \(id): \(error)")
        }
        update(id) {
            $0.pid = pid
            $0.launch = launch
            $0.state = state
            $0.launches += 1
            $0.connected = false
            // A new process: why the engine ended the previous one no longer applies
            // (else a crash of this one would be taken for that requested exit).
            $0.pendingExit = nil
            $0.launchNotified = false
            $0.queue.rewind()
            // Into the background: its window starts at its hello (`identified`);
            // until then it has `launch-timeout` to connect.
            $0.connectBy = state == .background ? now + nanoseconds(timings.launchTimeout) : nil
            $0.awaitingAdoptedHello = false
        }
        decide(id, action, reason + " (pid \(pid))")
    }

    /// Ends the app's processes now, without notice.
    func stop(_ id: String, cause: ExitCause, now: UInt64, action: Decision.Action, reason: String) {
        if apps[id]?.state == .suspended {
            // A frozen task cannot act on SIGKILL until thawed; cgroup.kill handles
            // that itself, the signal fallback needs the thaw.
            host.thaw(id)
        }
        update(id) { $0.pendingExit = cause }
        host.kill(id)
        endBackgroundStretch(id, now: now)
        update(id) {
            $0.state = .notRunning
            $0.tasks = []
            $0.connected = false
            $0.terminateAt = nil
            $0.connectBy = nil
            $0.awaitingAdoptedHello = false
            $0.queue.rewind()
        }
        decide(id, action, reason)
    }

    func suspend(_ id: String, now: UInt64, reason: String) {
        endBackgroundStretch(id, now: now)
        update(id) { $0.state = .suspended }
        host.freeze(id)
        decide(id, .suspend, reason)
    }

    /// Starts a stretch of background running: the limit for tasks, and a first
    /// window after which the app is suspended if it holds no task.
    func beginBackgroundStretch(_ id: String, now: UInt64, window: Double, announce: Bool = true) {
        let limit = now + nanoseconds(timings.backgroundTimeLimit)
        update(id) {
            $0.backgroundSince = now
            $0.limitAt = limit
            $0.suspendAt = now + nanoseconds(window)
            $0.finishRequested = false
            $0.expirationWarned = false
        }
        if announce { send(id, .deadline(limit)) }
    }

    func endBackgroundStretch(_ id: String, now: UInt64) {
        update(id) {
            if let since = $0.backgroundSince, now > since {
                $0.backgroundNanosecondsUsed += now - since
            }
            $0.backgroundSince = nil
            $0.limitAt = nil
            $0.suspendAt = nil
            $0.expirationWarned = false
        }
    }

    func notify(_ id: String, _ event: LifecycleNotification) {
        guard let state = withRecord(id, { $0.state }) else { return }
        send(id, .lifecycle(LifecycleMessage(event: event, state: state)))
    }

    func send(_ id: String, _ message: OutboundMessage) {
        guard withRecord(id, { $0.connected && $0.state.isRunning }) == true else { return }
        host.send(message, to: id)
    }

    func decide(_ id: String, _ action: Decision.Action, _ reason: String) {
        // The last decision is for `vigilctl apps` only: no deadline or journal depends on it.
        guard let decision = withRecord(id, { app -> Decision in
            let decision = Decision(app: id, action: action, reason: reason, state: app.state)
            app.lastDecision = decision
            return decision
        }) else { return }
        host.record(decision)
    }
}

/// Saturating: the config bounds every duration, but a conversion must never
/// trap, and `now + nanoseconds(x)` must not overflow (at most 2^62 ns, 146 years).
func nanoseconds(_ seconds: Double) -> UInt64 {
    let value = (seconds * 1_000_000_000).rounded()
    guard value > 0 else { return 0 }  // NaN too
    return value < 0x1p62 ? UInt64(value) : 1 << 62
}

func seconds(_ value: Double) -> String {
    value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
}

import Foundation
import Glibc
import Synchronization
import Testing
import VigilKit
import VigilSystem

/// An app for one test: the demo app (scripted by `environment`) unless `exec` is given.
struct AppSpec: Sendable {
    var id: String
    var environment: [String: String] = [:]
    var exitsOnSuspend = false
    /// nil runs `vigil-demo-app`, with `VIGIL_DEMO_RECORD` pointing at the app's record file.
    var exec: [String]?

    init(_ id: String, _ environment: [String: String] = [:], exitsOnSuspend: Bool = false, exec: [String]? = nil) {
        self.id = id
        self.environment = environment
        self.exitsOnSuspend = exitsOnSuspend
        self.exec = exec
    }
}

/// What `vigild.toml` says besides the paths.
struct DaemonOptions: Sendable {
    /// `cgroup` or `signal`.
    var suspension = "cgroup"
    /// The `[timings]` table; keys left out keep the daemon's defaults.
    var timings: [String: Double]

    init(suspension: String = "cgroup", timings: [String: Double] = DaemonOptions.fast) {
        self.suspension = suspension
        self.timings = timings
    }

    /// Short enough for a quick suite, long enough to tell the phases apart on a loaded machine.
    static let fast: [String: Double] = [
        "suspend-grace": 1, "wake-budget": 2, "background-time-limit": 30, "expiration-warning": 2, "exit-grace": 1.5,
    ]

    func with(_ changes: [String: Double]) -> DaemonOptions {
        var copy = self
        copy.timings.merge(changes) { _, new in new }
        return copy
    }
}

/// Thrown after a failure was already recorded (with diagnostics), to end the test.
struct StopTest: Error {}

/// A real `vigild` for one test: its own temp dir, config, manifests, socket and
/// cgroup root; started with its output in a file (never the test runner's
/// pipes); stopped and cleaned up afterwards, whatever the test did.
final class DaemonHarness {
    let directory: String
    let socketPath: String
    let configPath: String
    let daemonLogPath: String
    let options: DaemonOptions
    /// The cgroup root the daemon manages; nil with the signal fallback.
    let cgroupRoot: String?
    let apps: [String: AppSpec]

    private(set) var daemon: SpawnedProcess?
    private(set) var daemonExit: ProcessStatus?
    private var controlClient: ControlClient?
    /// App pids seen, killed at teardown if still alive and ours (signal fallback, adopted apps).
    private var seenPids: Set<Int32> = []

    private static let counter = Mutex(0)

    /// Multiplies every timeout (set `VIGIL_TEST_TIMEOUT_SCALE` on very slow machines).
    static let timeoutScale = ProcessInfo.processInfo.environment["VIGIL_TEST_TIMEOUT_SCALE"].flatMap(Double.init) ?? 1

    // MARK: Running a test

    /// Starts a daemon with `apps`, runs `body`, and always tears everything down.
    /// Failures inside `body` are recorded with the daemon's log tail and decision log.
    static func run(
        _ options: DaemonOptions = DaemonOptions(), apps: [AppSpec], sourceLocation: SourceLocation = #_sourceLocation,
        _ body: (DaemonHarness) async throws -> Void
    ) async {
        let harness: DaemonHarness
        do {
            harness = try DaemonHarness(options: options, apps: apps)
        } catch {
            Issue.record("cannot prepare the test daemon: \(error)", sourceLocation: sourceLocation)
            return
        }
        defer { harness.tearDown() }
        do {
            try await harness.startDaemon()
            try await body(harness)
        } catch is StopTest {
            // Recorded where it happened.
        } catch {
            let diagnostics = await harness.diagnostics()
            Issue.record("\(error)\n\(diagnostics)", sourceLocation: sourceLocation)
        }
    }

    private init(options: DaemonOptions, apps: [AppSpec]) throws {
        Self.sweepStaleCgroups()
        let number = Self.counter.withLock { value in
            value += 1
            return value
        }
        let tag = "\(getpid())-\(number)"
        directory = "/tmp/vigil-it-\(tag)"
        socketPath = directory + "/vigild.sock"
        configPath = directory + "/vigild.toml"
        daemonLogPath = directory + "/vigild.log"
        self.options = options
        self.apps = Dictionary(uniqueKeysWithValues: apps.map { ($0.id, $0) })
        if options.suspension == "signal" {
            cgroupRoot = nil
        } else {
            guard let mount = Cgroup.unifiedMountPoint() else { throw StopTestReason("cgroup2 is not mounted") }
            cgroupRoot = mount + "/vigil-test-\(tag)"
        }

        let files = FileManager.default
        try? files.removeItem(atPath: directory)
        for folder in ["", "/apps", "/state", "/logs", "/records"] {
            try files.createDirectory(atPath: directory + folder, withIntermediateDirectories: true)
        }
        var config = """
            manifest-dirs = [\(toml(directory + "/apps"))]
            state-dir = \(toml(directory + "/state"))
            log-dir = \(toml(directory + "/logs"))
            suspension = \(toml(options.suspension))

            """
        if let cgroupRoot { config += "cgroup-root = \(toml(cgroupRoot))\n" }
        if !options.timings.isEmpty {
            config += "\n[timings]\n"
            for (key, value) in options.timings.sorted(by: { $0.key < $1.key }) {
                config += key == "relaunch-limit" ? "\(key) = \(Int(value))\n" : "\(key) = \(value)\n"
            }
        }
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        for app in apps { try writeManifest(app) }
    }

    private func writeManifest(_ app: AppSpec) throws {
        let exec = try app.exec ?? [Binaries.path("vigil-demo-app")]
        var environment = app.environment
        if app.exec == nil { environment["VIGIL_DEMO_RECORD"] = recordPath(app.id) }
        var text = """
            id = \(toml(app.id))
            exec = [\(exec.map(toml).joined(separator: ", "))]
            exits-on-suspend = \(app.exitsOnSuspend)

            [environment]

            """
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) { text += "\(key) = \(toml(value))\n" }
        try text.write(toFile: directory + "/apps/\(app.id).toml", atomically: true, encoding: .utf8)
    }

    // MARK: The daemon process

    var daemonPid: Int32? { daemon?.pid }

    /// Starts vigild and waits (by connecting, not sleeping) until it answers.
    func startDaemon() async throws {
        let vigild: String
        do {
            vigild = try Binaries.path("vigild")
        } catch {
            try failNow("\(error)")
        }
        let log = open(daemonLogPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard log >= 0 else { try failNow("cannot open \(daemonLogPath)") }
        defer { close(log) }
        var environment = SpawnRequest.currentEnvironment()
        environment["VIGIL_SOCKET"] = nil
        let banner = "--- test harness: starting \(vigild) --config \(configPath) --socket \(socketPath)\n"
        _ = banner.withCString { write(log, $0, strlen($0)) }
        // Own session, output to a file, stdin /dev/null: nothing of the test runner is held.
        let process = try ProcessSpawner.spawn(SpawnRequest(
            executable: vigild, arguments: ["--config", configPath, "--socket", socketPath],
            environment: environment, output: log, newSession: true, name: "vigild"))
        daemon = process
        daemonExit = nil

        let started = MonotonicClock.now
        var lastError = "nothing tried yet"
        while true {
            if let status = reapDaemon() {
                try failNow("vigild exited during startup (\(status))")
            }
            do {
                let socketPath = self.socketPath
                controlClient = try await withTimeout(5, "connect to vigild") {
                    try await ControlClient.connect(socketPath: socketPath)
                }
                return
            } catch {
                lastError = "\(error)"
            }
            if seconds(since: started) > 30 * Self.timeoutScale {
                try failNow("vigild did not answer on \(socketPath) within 30 s: \(lastError)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// SIGTERM, then waits for the exit (SIGKILL after `timeout`). Returns how it ended.
    @discardableResult
    func stopDaemon(timeout: Double = 15) -> ProcessStatus? {
        controlClient?.close()
        controlClient = nil
        guard let daemon else { return daemonExit }
        if daemonExit == nil {
            _ = kill(daemon.pid, SIGTERM)
            if waitForDaemonExit(timeout: timeout) == nil {
                _ = kill(daemon.pid, SIGKILL)
                _ = waitForDaemonExit(timeout: 5)
            }
        }
        if daemon.pidfd >= 0 { close(daemon.pidfd) }
        self.daemon = nil
        return daemonExit
    }

    /// Stops the daemon gracefully and starts a new one with the same config.
    func restartDaemon() async throws -> ProcessStatus? {
        let status = stopDaemon()
        try await startDaemon()
        return status
    }

    private func waitForDaemonExit(timeout: Double) -> ProcessStatus? {
        let deadline = MonotonicClock.now + UInt64(timeout * 1e9)
        while MonotonicClock.now < deadline {
            if let status = reapDaemon() { return status }
            guard let daemon, daemon.pidfd >= 0 else {
                usleep(10_000)
                continue
            }
            var request = pollfd(fd: daemon.pidfd, events: Int16(POLLIN), revents: 0)
            _ = poll(&request, 1, 50)
        }
        return reapDaemon()
    }

    /// The daemon's exit status once it has ended (reaping it), else nil.
    private func reapDaemon() -> ProcessStatus? {
        if let daemonExit { return daemonExit }
        guard let daemon, let status = try? ProcessControl.reap(daemon) else { return nil }
        daemonExit = status
        return status
    }

    var isDaemonRunning: Bool { daemon != nil && reapDaemon() == nil }

    // MARK: Teardown

    func tearDown() {
        if daemon != nil { stopDaemon(timeout: 10) }
        // Whatever the daemon left: kill each app cgroup (frozen ones too) and remove it.
        if let cgroupRoot { Self.removeCgroupTree(Cgroup(path: cgroupRoot)) }
        // Apps outside cgroups (signal fallback) or reparented after the daemon's stop.
        for pid in seenPids.union(allRecordedPids()) where isOurs(pid) {
            _ = kill(pid, SIGKILL)
            _ = kill(pid, SIGCONT)
        }
        if ProcessInfo.processInfo.environment["VIGIL_TEST_KEEP"] == nil {
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    static func removeCgroupTree(_ group: Cgroup) {
        guard group.exists else { return }
        for name in (try? group.children()) ?? [] { removeCgroupTree(group.child(name)) }
        try? group.kill()
        _ = try? group.waitUntil(populated: false, timeout: .seconds(5))
        try? group.remove()
    }

    /// Removes cgroups left by earlier test runs that died before their teardown.
    private static let sweptStale: Void = {
        guard let mount = Cgroup.unifiedMountPoint(), let names = try? Cgroup(path: mount).children() else { return }
        for name in names where name.hasPrefix("vigil-test-") {
            let fields = name.dropFirst("vigil-test-".count).split(separator: "-")
            guard let pid = fields.first.flatMap({ Int32($0) }), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { removeCgroupTree(Cgroup(path: mount + "/" + name)) }
        }
    }()

    private static func sweepStaleCgroups() { _ = sweptStale }

    /// Whether `pid` is a process this test's daemon started (its environment names our socket).
    private func isOurs(_ pid: Int32) -> Bool {
        guard pid > 1, let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ") else { return false }
        return environ.range(of: Data(("VIGIL_SOCKET=" + socketPath).utf8)) != nil
    }

    private func allRecordedPids() -> Set<Int32> {
        Set(apps.keys.flatMap { records($0).map(\.pid) })
    }

    // MARK: Through the API

    var control: ControlClient {
        get throws {
            guard let controlClient else { throw StopTestReason("no control connection (the daemon is stopped)") }
            return controlClient
        }
    }

    func status() async throws -> DaemonStatus {
        let control = try control
        return try await withTimeout(10, "status") { try await control.status() }
    }

    func info(_ id: String) async throws -> AppInfo {
        let control = try control
        let apps = try await withTimeout(10, "apps") { try await control.apps() }
        guard let app = apps.first(where: { $0.id == id }) else {
            throw StopTestReason("vigild does not know \(id) (it knows \(apps.map(\.id)))")
        }
        if let pid = app.pid { seenPids.insert(pid) }
        return app
    }

    func state(_ id: String) async throws -> AppState { try await info(id).state }

    @discardableResult
    func perform(_ action: UserAction, _ id: String) async throws -> AppInfo {
        let control = try control
        let app = try await withTimeout(10, "\(action.rawValue) \(id)") { try await control.perform(action, app: id) }
        if let pid = app.pid { seenPids.insert(pid) }
        return app
    }

    @discardableResult
    func wake(_ id: String, attributes: [String: JSONValue] = [:], payload: String = "") async throws -> EventAccepted {
        let control = try control
        return try await withTimeout(10, "wake \(id)") {
            try await control.wake(app: id, attributes: attributes, payload: Array(payload.utf8))
        }
    }

    func decisions(_ id: String? = nil) async throws -> [DecisionRecord] {
        let control = try control
        return try await withTimeout(10, "log") { try await control.log(app: id) }
    }

    // MARK: From outside

    func cgroup(_ id: String) -> Cgroup? { cgroupRoot.map { Cgroup(path: $0).child(id) } }

    /// cgroup.events of the app's cgroup; empty if it does not exist (yet).
    func cgroupEvents(_ id: String) -> [String: Int] {
        (try? cgroup(id)?.events()) ?? [:]
    }

    func isFrozen(_ id: String) -> Bool { cgroupEvents(id)["frozen"] == 1 }
    func isPopulated(_ id: String) -> Bool { cgroupEvents(id)["populated"] == 1 }

    /// The state letter of /proc/PID/stat (R, S, T, Z…); nil once the process is gone.
    func processState(_ pid: Int32) -> Character? { ProcessControl.processState(pid) }

    func isAlive(_ pid: Int32) -> Bool {
        guard let state = processState(pid) else { return false }
        return state != "Z" && state != "X"
    }

    func recordPath(_ id: String) -> String { directory + "/records/\(id).jsonl" }

    func records(_ id: String) -> [DemoRecord] { DemoRecord.read(recordPath(id)) }

    func appLogPath(_ id: String) -> String { directory + "/logs/\(id).log" }

    // MARK: Waiting and failing

    /// Polls `condition` until it holds; returns the seconds waited. On timeout the
    /// failure is recorded with diagnostics and the test ends.
    @discardableResult
    func waitUntil(
        _ what: @autoclosure () -> String, timeout: Double, every: Double = 0.02,
        sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
    ) async throws -> Double {
        let started = MonotonicClock.now
        let limit = timeout * Self.timeoutScale
        while true {
            if try await condition() { return seconds(since: started) }
            if seconds(since: started) >= limit {
                try await fail("timed out after \(limit) s waiting until \(what())", sourceLocation: sourceLocation)
            }
            try await Task.sleep(for: .milliseconds(Int(every * 1000)))
        }
    }

    /// Records a failure with diagnostics, unless `condition` holds.
    func expect(
        _ condition: Bool, _ message: @autoclosure () -> String, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        guard !condition else { return }
        let text = message()
        Issue.record(Comment(rawValue: text + "\n" + (await diagnostics())), sourceLocation: sourceLocation)
    }

    /// Like `expect`, but ends the test when `condition` does not hold.
    func require(
        _ condition: Bool, _ message: @autoclosure () -> String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        guard !condition else { return }
        try await fail(message(), sourceLocation: sourceLocation)
    }

    func fail(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Never {
        Issue.record(Comment(rawValue: message + "\n" + (await diagnostics())), sourceLocation: sourceLocation)
        throw StopTest()
    }

    /// For the synchronous start-up path.
    private func failNow(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> Never {
        Issue.record(Comment(rawValue: message + "\n" + syncDiagnostics()), sourceLocation: sourceLocation)
        throw StopTest()
    }

    // MARK: Diagnostics

    /// The daemon's log tail, its decision log, and each app's log, records and cgroup state.
    func diagnostics() async -> String {
        var text = syncDiagnostics()
        if let controlClient, isDaemonRunning,
           let decisions = try? await withTimeout(3, "log", { try await controlClient.log(limit: 60) }) {
            text += "\n--- decision log (last \(decisions.count)):\n"
            text += decisions.map { "  \($0.app) \($0.action) -> \($0.state.rawValue): \($0.reason)" }.joined(separator: "\n")
        } else {
            text += "\n--- decision log: unavailable (daemon stopped or not answering); see the vigild log above"
        }
        return text
    }

    private func syncDiagnostics() -> String {
        var text = "--- test directory: \(directory) (set VIGIL_TEST_KEEP=1 to keep it)"
        text += "\n--- daemon: " + (daemon.map { "pid \($0.pid)" } ?? "not running")
        if let daemonExit { text += ", exited: \(daemonExit)" }
        text += "\n--- vigild log (tail of \(daemonLogPath)):\n" + tail(daemonLogPath, lines: 40)
        for id in apps.keys.sorted() {
            text += "\n--- \(id): cgroup.events \(cgroupEvents(id))"
            text += "\n    app log tail:\n" + tail(appLogPath(id), lines: 12)
            let records = records(id)
            if !records.isEmpty {
                text += "\n    records (last 20 of \(records.count)):\n  " + Array(records.suffix(20)).summary
            }
        }
        return text
    }
}

/// An error that explains itself, for harness problems.
struct StopTestReason: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var seconds: Double
    var description: String { "no answer from vigild to '\(what)' within \(seconds) s" }
}

/// Runs `operation`, failing with `TimedOut` after `seconds` (a hung daemon must not hang the suite).
func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds * DaemonHarness.timeoutScale))
            throw TimedOut(what: what, seconds: seconds)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

func seconds(since start: UInt64) -> Double {
    Double(MonotonicClock.now &- start) / 1e9
}

func seconds(from start: UInt64, to end: UInt64) -> Double {
    end >= start ? Double(end - start) / 1e9 : -Double(start - end) / 1e9
}

func toml(_ string: String) -> String {
    "\"" + string.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
}

func tail(_ path: String, lines: Int) -> String {
    guard let data = FileManager.default.contents(atPath: path) else { return "  (no file)" }
    let all = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
    return all.suffix(lines).map { "  " + $0 }.joined(separator: "\n")
}

/// Whether this machine lets the tests manage cgroups (root and a writable cgroup2 tree).
enum Environment {
    static let canUseCgroups: Bool = {
        guard let mount = Cgroup.unifiedMountPoint() else { return false }
        return Cgroup.isUsable(at: mount)
    }()
}

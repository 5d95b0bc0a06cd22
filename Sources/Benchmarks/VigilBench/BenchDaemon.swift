import Foundation
import Glibc
import VigilKit
import VigilSystem

/// A real vigild in a scratch directory, with the sample app installed.
///
/// `bluetooth` and `bus` choose the Bluetooth set-up: Bluetooth on or off in
/// the config, and a system bus that is present (a private `dbus-daemon` this
/// object starts, with no bluetoothd on it) or absent (vigild is pointed at a
/// socket path in the scratch directory that nothing listens on), or whatever
/// the environment says (`.inherited`).
///
/// Everything it starts ends with `stop()`, which `Teardown` also runs on an
/// error or a signal: vigild runs with `--on-stop terminate` (it ends its apps
/// when it stops), the app's process group or cgroup is killed if anything of
/// it is left, and the cgroups and the scratch directory are removed.
final class BenchDaemon: @unchecked Sendable {
    let directory: String
    let socket: String
    let recordPath: String
    /// The record file of every app but `appID` (a scale run's).
    var scaleRecordPath: String { directory + "/scale-record.jsonl" }
    let cgroupRoot: String?
    private(set) var process: SpawnedProcess?
    private(set) var control: ControlClient!
    /// The private system bus, with `bus: .present`.
    private var busDaemon: SpawnedProcess?
    static let appID = "org.vigil.bench"
    /// Every app installed: `appID`, then `org.vigil.bench.1` … for a scale run.
    let appIDs: [String]

    enum Bus: String {
        case inherited, absent, present
    }

    private struct Tracked {
        var stopped = false
        var succeeded = false
        /// The app's process (pid, start time), as vigild last reported it.
        var apps: [pid_t: UInt64] = [:]
    }
    private let tracked = Locked(Tracked())
    private var teardownID = 0

    init(
        binaries: String, vigild: String? = nil, suspension: String, bluetooth: Bool = true, bus: Bus = .inherited, label: String? = nil,
        apps: Int = 1, timings: String = ""
    ) async throws {
        appIDs = [Self.appID] + (1..<max(1, apps)).map { "\(Self.appID).\($0)" }
        let name = "vigil-bench-\(getpid())-\(label ?? suspension)"
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
        socket = directory + "/vigild.sock"
        recordPath = directory + "/record.jsonl"
        cgroupRoot = suspension == "cgroup" ? Cgroup.unifiedMountPoint().map { $0 + "/" + name } : nil
        // Registered before anything exists, so a failure from here on cleans up too.
        teardownID = Teardown.add { [self] in stop(interrupted: true) }
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/apps", withIntermediateDirectories: true)
        var config = """
            manifest-dirs = ["apps"]
            state-dir = "state"
            log-dir = "logs"
            suspension = "\(suspension)"
            event-queue-limit = 100000
            decision-log-size = 100
            on-stop = "terminate"
            bluetooth = \(bluetooth)
            [timings]
            exit-grace = 1.0
            \(timings)

            """
        if let cgroupRoot { config = "cgroup-root = \"\(cgroupRoot)\"\n" + config }
        try config.write(toFile: directory + "/vigild.toml", atomically: true, encoding: .utf8)
        try """
            id = "\(Self.appID)"
            exec = ["\(binaries)/vigil-demo-app"]
            [environment]
            VIGIL_DEMO_RECORD = "\(recordPath)"
            VIGIL_DEMO_QUIET = "1"
            """.write(toFile: directory + "/apps/bench.toml", atomically: true, encoding: .utf8)
        for id in appIDs.dropFirst() {
            // Scale apps share one record file (lines are single O_APPEND writes):
            // the scale phase counts their `launch` lines to know all are connected.
            try """
                id = "\(id)"
                exec = ["\(binaries)/vigil-demo-app"]
                [environment]
                VIGIL_DEMO_RECORD = "\(scaleRecordPath)"
                VIGIL_DEMO_QUIET = "1"
                """.write(toFile: directory + "/apps/\(id).toml", atomically: true, encoding: .utf8)
        }

        let log = open(directory + "/vigild.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw BenchError("cannot create \(directory)/vigild.log") }
        defer { close(log) }
        var environment = SpawnRequest.currentEnvironment()
        if bus != .inherited {
            // The bus socket's directory exists; the socket exists only with a bus.
            try FileManager.default.createDirectory(atPath: directory + "/bus", withIntermediateDirectories: true)
            environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=" + directory + "/bus/system_bus_socket"
        }
        if bus == .present { try startBus(log: log) }
        // ProcessSpawner, not Foundation.Process: vigild must not inherit this
        // thread's blocked signals or the benchmark's ignored SIGINT/SIGTERM.
        process = try ProcessSpawner.spawn(SpawnRequest(
            executable: vigild ?? binaries + "/vigild",
            arguments: ["--socket", socket, "--config", directory + "/vigild.toml", "--log-level", "warning",
                        "--on-stop", "terminate"],
            environment: environment,
            output: log))
        control = try await Self.connect(socket, daemon: process!)
    }

    /// A private system bus (dbus-daemon, the same permissive policy as the
    /// BlueZ mock's) on `bus/system_bus_socket`; nothing owns org.bluez on it.
    private func startBus(log: Int32) throws {
        guard let executable = (["/usr/bin/dbus-daemon", "/bin/dbus-daemon"] as [String]).first(where: { access($0, X_OK) == 0 }) else {
            throw BenchError("dbus-daemon is not installed (apt-get install dbus-daemon): cannot measure with a system bus")
        }
        let socket = directory + "/bus/system_bus_socket"
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>system</type>
              <listen>unix:path=\(socket)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_type="method_call"/>
                <allow send_type="signal"/>
                <allow send_requested_reply="true" send_type="method_return"/>
                <allow send_requested_reply="true" send_type="error"/>
                <allow receive_type="method_call"/>
                <allow receive_type="method_return"/>
                <allow receive_type="error"/>
                <allow receive_type="signal"/>
              </policy>
            </busconfig>
            """.write(toFile: directory + "/bus.conf", atomically: true, encoding: .utf8)
        busDaemon = try ProcessSpawner.spawn(SpawnRequest(
            executable: executable, arguments: ["--config-file=" + directory + "/bus.conf", "--nofork", "--nopidfile"], output: log))
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while access(socket, F_OK) != 0 {
            guard MonotonicInstant.now() < deadline else { throw BenchError("dbus-daemon did not create \(socket) within 10 s") }
            usleep(10_000)
        }
    }

    /// How long a starting vigild may take to listen: 10 s, or
    /// `VIGIL_BENCH_START_SECONDS` (under valgrind on a loaded machine a
    /// start takes longer; what is counted does not change).
    static var startSeconds: Int {
        Int(getenv("VIGIL_BENCH_START_SECONDS").map { String(cString: $0) } ?? "") ?? 10
    }

    private static func connect(_ socket: String, daemon: SpawnedProcess) async throws -> ControlClient {
        let deadline = MonotonicInstant.now().advanced(by: .seconds(startSeconds))
        while true {
            do {
                return try await ControlClient.connect(socketPath: socket)
            } catch where MonotonicInstant.now() < deadline {
                if let status = try? ProcessControl.reap(daemon) {
                    throw BenchError("vigild ended before it answered (\(status))")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    var pid: Int32 { process?.pid ?? 0 }

    /// The app's pid now (0 if not running); remembered, so that `stop` can
    /// end it should vigild not.
    func appPID() async throws -> Int32 {
        let pid = try await control.apps().first { $0.id == Self.appID }?.pid ?? 0
        if pid > 0, let stat = ProcessStat.read(pid) {
            tracked.withLock { $0.apps[pid] = stat.startTime }
        }
        return pid
    }

    /// Remembers an app's process (as `appPID` does), so that `stop` can end
    /// it should vigild not. For a scale run, whose app list is too long for
    /// one `apps` reply.
    func track(pid: Int32) {
        if pid > 0, let stat = ProcessStat.read(pid) {
            tracked.withLock { $0.apps[pid] = stat.startTime }
        }
    }

    /// The measurements with this daemon are done; `stop` keeps quiet.
    func succeeded() { tracked.withLock { $0.succeeded = true } }

    /// Stops vigild (SIGTERM; it ends its apps: `on-stop = "terminate"`),
    /// SIGKILLs it after 15 s, kills whatever is left of the app, removes the
    /// cgroups and the scratch directory. Runs once, whoever calls first.
    func stop(interrupted: Bool = false) {
        let (already, succeeded, apps) = tracked.withLock { state in
            defer { state.stopped = true }
            return (state.stopped, state.succeeded, state.apps)
        }
        guard !already else { return }
        Teardown.remove(teardownID)
        if !interrupted { control?.close() }
        if let process {
            _ = try? ProcessControl.sendSignal(SIGTERM, toPidfd: process.pidfd)
            let deadline = MonotonicInstant.now().advanced(by: .seconds(15))
            var status = try? ProcessControl.reap(process)
            while status == nil && MonotonicInstant.now() < deadline {
                usleep(10_000)
                status = try? ProcessControl.reap(process)
            }
            if status == nil {
                FileHandle.standardError.write("vigil-bench: vigild did not stop within 15 s of SIGTERM; killing it\n".data(using: .utf8)!)
                _ = try? ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd)
                while (try? ProcessControl.reap(process)) == nil { usleep(10_000) }
            }
            close(process.pidfd)
        }
        if let busDaemon {
            _ = try? ProcessControl.sendSignal(SIGTERM, toPidfd: busDaemon.pidfd)
            let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
            while (try? ProcessControl.reap(busDaemon)) == nil {
                if MonotonicInstant.now() > deadline {
                    _ = try? ProcessControl.sendSignal(SIGKILL, toPidfd: busDaemon.pidfd)
                }
                usleep(10_000)
            }
            close(busDaemon.pidfd)
        }
        // The app is a session leader (signal fallback) or in its cgroup:
        // if vigild left anything of it, end all of it.
        for (pid, startTime) in apps where ProcessStat.read(pid)?.startTime == startTime {
            FileHandle.standardError.write("vigil-bench: the app (\(pid)) outlived vigild; killing its process group\n".data(using: .utf8)!)
            Glibc.kill(-pid, SIGKILL)
            Glibc.kill(pid, SIGKILL)
        }
        if let cgroupRoot {
            Cgroup(path: cgroupRoot).removeWithChildren()
        }
        if !succeeded && !interrupted, let log = try? String(contentsOfFile: directory + "/vigild.log", encoding: .utf8) {
            let tail = log.split(separator: "\n", omittingEmptySubsequences: false).suffix(20).joined(separator: "\n")
            FileHandle.standardError.write("vigil-bench: the run failed; the end of vigild's log:\n\(tail)\n".data(using: .utf8)!)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

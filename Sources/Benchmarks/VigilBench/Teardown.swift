import Dispatch
import Foundation
import Glibc
import VigilSystem

/// Ends everything the benchmark started, on every way out: a normal end, an
/// error, SIGINT, SIGTERM or SIGHUP.
///
/// - Each daemon registers its own teardown (stop vigild, end its apps, remove
///   its cgroups and scratch directory); they run in reverse order.
/// - The benchmark is a child subreaper (PR_SET_CHILD_SUBREAPER): an app that
///   outlives vigild is reparented to the benchmark instead of init, so the
///   final sweep finds every process the run left behind, whatever vigild did,
///   kills it and reaps it.
///
/// A SIGKILL of the benchmark itself cannot be caught: then the processes are
/// reparented to init, as before.
enum Teardown {
    private struct State {
        var steps: [(id: Int, run: @Sendable () -> Void)] = []
        var nextID = 0
        var interrupted: Int32?
    }

    private static let state = Locked(State())
    /// Held while the steps run, so a second way out (an error that follows
    /// an interrupt) waits for the first instead of racing it.
    private static let running = Locked(())
    nonisolated(unsafe) private static var signalSources: [any DispatchSourceSignal] = []

    /// Call once, first thing.
    static func install() {
        if !becomeSubreaper() {
            FileHandle.standardError.write("vigil-bench: cannot become a child subreaper (\(String(cString: strerror(errno)))); relying on vigild's on-stop = terminate alone\n".data(using: .utf8)!)
        }
        let queue = DispatchQueue(label: "vigil-bench.signals")
        for number in [SIGINT, SIGTERM, SIGHUP] {
            // Ignored here so the dispatch source sees it; children start with
            // default dispositions (ProcessSpawner resets them).
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { interrupt(number) }
            source.resume()
            signalSources.append(source)
        }
    }

    /// A signal arrived: tear everything down and exit 128 + signal.
    private static func interrupt(_ number: Int32) {
        let first = state.withLock { state -> Bool in
            defer { if state.interrupted == nil { state.interrupted = number } }
            return state.interrupted == nil
        }
        guard first else { return }
        FileHandle.standardError.write("\nvigil-bench: \(String(cString: strsignal(number))), cleaning up\n".data(using: .utf8)!)
        finish()
        exit(128 + number)
    }

    /// The signal that interrupted the run, if one did.
    static var interruptedBy: Int32? { state.withLock { $0.interrupted } }

    /// Registers a step; returns its id for `remove`.
    static func add(_ step: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            state.nextID += 1
            state.steps.append((state.nextID, step))
            return state.nextID
        }
    }

    /// The step ran by itself (a normal end): forget it.
    static func remove(_ id: Int) {
        state.withLock { $0.steps.removeAll { $0.id == id } }
    }

    /// Runs the steps still registered (newest first), then ends and reaps
    /// every process left behind. Returns what the sweep had to kill.
    @discardableResult
    static func finish() -> [String] {
        running.withLock { _ in
            while let step = state.withLock({ $0.steps.popLast() }) {
                step.run()
            }
            return sweepOrphans()
        }
    }

    /// Kills and reaps the benchmark's remaining children: with the subreaper,
    /// that includes every orphaned descendant (an app vigild left running).
    static func sweepOrphans() -> [String] {
        var killed: [String] = []
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while true {
            let children = childProcesses()
            reapExited()
            if children.isEmpty { return killed }
            for (pid, name) in children where Glibc.kill(pid, SIGKILL) == 0 {
                if !killed.contains("\(name) (\(pid))") { killed.append("\(name) (\(pid))") }
            }
            if MonotonicInstant.now() > deadline {
                killed.append("(still present after 10 s: \(children.map { String($0.pid) }.joined(separator: " ")))")
                return killed
            }
            usleep(20_000)
        }
    }

    /// Processes whose parent is this one (zombies excluded), by /proc.
    static func childProcesses() -> [(pid: pid_t, name: String)] {
        let me = getpid()
        var result: [(pid: pid_t, name: String)] = []
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry), pid != me,
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { continue }
            // "PID (COMM) STATE PPID ..."
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 2, fields[0] != "Z", pid_t(fields[1]) == me else { continue }
            result.append((pid, String(stat[stat.index(after: open)..<close])))
        }
        return result
    }

    /// Collects every exited child (zombies of reparented orphans included).
    static func reapExited() {
        var status: Int32 = 0
        while waitpid(-1, &status, WNOHANG) > 0 {}
    }

    /// prctl(PR_SET_CHILD_SUBREAPER, 1). prctl is variadic in C, so Swift does
    /// not import it; on x86_64 and arm64 Linux a variadic callee takes integer
    /// arguments in the same registers as a fixed prototype.
    private static func becomeSubreaper() -> Bool {
        guard let symbol = dlsym(nil, "prctl") else { return false }
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        let prctl = unsafeBitCast(symbol, to: Prctl.self)
        return prctl(36 /* PR_SET_CHILD_SUBREAPER */, 1, 0, 0, 0) == 0
    }
}

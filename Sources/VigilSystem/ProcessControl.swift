import CVigilShim
import Glibc

/// Operations on running processes: reaping, signalling and /proc queries,
/// for our own children and for processes adopted after a daemon restart.
public enum ProcessControl {
    /// A pidfd for any process we may see, e.g. one adopted after a restart:
    /// it becomes readable when the process exits, child or not.
    public static func pidfdOpen(_ pid: pid_t) throws -> Int32 {
        try check("pidfd_open") { vigil_pidfd_open(pid) }
    }

    /// Collects the exit status without blocking; nil while it still runs.
    ///
    /// For a process that is not our child the status is `.unknown`, once
    /// it has ended. Without a pidfd (`pidfd` -1) that check is by pid,
    /// which a recycled pid could fool.
    public static func reap(_ process: SpawnedProcess) throws -> ProcessStatus? {
        var exited: Int32 = 0
        var code: Int32 = 0
        switch vigil_reap(process.pidfd, process.pid, &exited, &code) {
        case 1: return exited != 0 ? .exited(code) : .signaled(code)
        case 0: return nil
        default:
            guard errno == ECHILD else { throw SystemError.current("waitid") }
            return hasEnded(process) ? .unknown : nil
        }
    }

    private static func hasEnded(_ process: SpawnedProcess) -> Bool {
        guard process.pidfd >= 0 else { return Glibc.kill(process.pid, 0) != 0 && errno == ESRCH }
        var request = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&request, 1, 0) > 0
    }

    /// Signals exactly the process the pidfd refers to, even if its pid was reused.
    public static func sendSignal(_ signal: Int32, toPidfd pidfd: Int32) throws {
        try check("pidfd_send_signal") { vigil_pidfd_send_signal(pidfd, signal) }
    }

    /// kill(-pgid): every process in the group, e.g. SIGSTOP/SIGCONT for an
    /// app started with `newSession` where no cgroup freezer is available.
    public static func sendSignal(_ signal: Int32, toProcessGroup pgid: pid_t) throws {
        try check("kill(-\(pgid))") { Glibc.kill(-pgid, signal) }
    }

    public static func sendSignal(_ signal: Int32, toProcess pid: pid_t) throws {
        try check("kill(\(pid))") { Glibc.kill(pid, signal) }
    }

    /// The state letter from /proc/PID/stat (R, S, D, T, t, Z, ...), nil if
    /// the process is gone. A cgroup-frozen process shows S, a stopped one T.
    public static func processState(_ pid: pid_t) -> Character? {
        // "PID (COMM) STATE ...": COMM may contain spaces and parentheses.
        guard let stat = try? FileSystem.read("/proc/\(pid)/stat"),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].first { $0 != " " }
    }

    /// The session a process belongs to (getsid), nil if it is gone; maps a
    /// peer's pid to the app whose session leader we started.
    public static func sessionID(of pid: pid_t) -> pid_t? {
        let session = getsid(pid)
        return session < 0 ? nil : session
    }
}

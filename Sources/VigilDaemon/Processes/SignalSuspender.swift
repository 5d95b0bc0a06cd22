import Glibc
import VigilProtocol
import VigilSystem

/// The fallback where no writable cgroup v2 tree exists: each app runs in its
/// own session (setsid), stopped with SIGSTOP and resumed with SIGCONT sent to
/// its process group. Weaker than the freezer: a process that leaves the group
/// escapes, a stopped process shows `T` and its parent may notice.
final class SignalSuspender: Suspender {
    let mechanism = SuspensionMechanism.signals
    let detail: String
    let cgroupRoot: String? = nil

    init(reason: String) {
        detail = "SIGSTOP/SIGCONT to each app's process group: \(reason)"
    }

    func prepareSpawn(for app: String) throws -> Cgroup? { nil }

    func freeze(_ app: String, pid: Int32) throws { try signal(SIGSTOP, pid) }
    func thaw(_ app: String, pid: Int32) throws { try signal(SIGCONT, pid) }

    func kill(_ app: String, pid: Int32) throws {
        try signal(SIGKILL, pid)
        try? signal(SIGCONT, pid)
    }

    private func signal(_ number: Int32, _ pid: Int32) throws {
        do {
            try ProcessControl.sendSignal(number, toProcessGroup: pid)
        } catch let error as SystemError where error.errno == .noSuchProcess {
            // Already gone: nothing to stop or end.
        }
    }

    func app(owning pid: Int32, running: [String: Int32]) -> String? {
        guard let session = ProcessControl.sessionID(of: pid) else { return nil }
        return running.first { $0.value == session }?.key
    }

    /// Only the records can tell: a session has no directory to scan.
    func survivors(recorded: [ProcessRecord], known: Set<String>, notes: inout [String]) -> [Survivor] {
        recorded.sorted { $0.app < $1.app }.compactMap { record in
            guard let stat = record.stillRunning() else {
                notes.append("\(record.app): recorded process \(record.pid) is gone (or its pid was reused): not running")
                return nil
            }
            guard known.contains(record.app) else {
                if stat.isStopped { try? signal(SIGCONT, record.pid) }
                notes.append("\(record.app): process \(record.pid) has no manifest any more: continued and left alone")
                return nil
            }
            return Survivor(
                app: record.app, pid: record.pid, startTime: record.startTime, frozen: stat.isStopped,
                how: "by its recorded pid \(record.pid) and start time")
        }
    }

    func ended(_ app: String) {}
}

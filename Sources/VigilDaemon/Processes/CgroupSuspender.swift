import VigilProtocol
import VigilSystem

/// One cgroup per app under `root`, frozen with `cgroup.freeze` and ended with
/// `cgroup.kill`. The freezer stops the whole tree at once, so a suspended app's
/// helpers cannot keep running, and a frozen process is still in memory.
final class CgroupSuspender: Suspender {
    let root: Cgroup
    /// `root` relative to the cgroup2 mount, as /proc/PID/cgroup shows it.
    private let relativeRoot: String
    let mechanism = SuspensionMechanism.cgroupFreezer
    let detail: String

    init(root: Cgroup, mountPoint: String) throws {
        self.root = try Cgroup.create(root.path)
        relativeRoot = String(root.path.dropFirst(mountPoint.count))
        detail = "cgroup v2 freezer under \(root.path)"
    }

    var cgroupRoot: String? { root.path }

    func cgroup(of app: String) -> Cgroup { root.child(app) }

    func prepareSpawn(for app: String) throws -> Cgroup? {
        let group = try Cgroup.create(cgroup(of: app).path)
        // A previous process may have left the group frozen (daemon crash).
        try setFrozen(app, false)
        return group
    }

    func freeze(_ app: String, pid: Int32) throws { try setFrozen(app, true) }
    func thaw(_ app: String, pid: Int32) throws { try setFrozen(app, false) }

    /// Ends the app's processes; its `cgroup.freeze` is closed (the app is
    /// ending: this is called at its exit and when the engine ends it).
    func kill(_ app: String, pid: Int32) throws {
        freezers.removeValue(forKey: app)?.close()
        try cgroup(of: app).kill()
    }

    /// Each app's `cgroup.freeze`, open while the app lives (opened at its
    /// spawn, or at the first freeze or thaw of an adopted app; closed when it
    /// is killed or ends): a wake is then two pwrite(2)s, not two opens,
    /// writes and closes. One fd per app, beside its socket and pidfd (vigild
    /// raises its open-file limit at start).
    private var freezers: [String: FreezerFile] = [:]

    private func setFrozen(_ app: String, _ frozen: Bool) throws {
        if let file = freezers[app] {
            do {
                return try file.set(frozen: frozen)
            } catch {
                // The group was removed and made again behind our back (ENODEV): reopen once.
                file.close()
                freezers[app] = nil
            }
        }
        let file = try FreezerFile(cgroup(of: app))
        try file.set(frozen: frozen)
        freezers[app] = file
    }

    func app(owning pid: Int32, running: [String: Int32]) -> String? {
        guard let path = try? Cgroup.ofProcess(pid), path.hasPrefix(relativeRoot + "/") else { return nil }
        let below = path.dropFirst(relativeRoot.count + 1)
        guard let name = below.split(separator: "/").first else { return nil }
        return String(name)
    }

    func survivors(recorded: [ProcessRecord], known: Set<String>, notes: inout [String]) -> [Survivor] {
        guard let names = try? root.children() else { return [] }
        let records = Dictionary(recorded.map { ($0.app, $0) }) { first, _ in first }
        return names.sorted().compactMap { name in
            let group = root.child(name)
            guard let pids = try? group.processes(), !pids.isEmpty else {
                try? group.remove()  // empty: nothing to adopt
                return nil
            }
            guard known.contains(name) else {
                try? group.thaw()
                notes.append("cgroup \(group.path) holds processes \(pids) of an app without a manifest: thawed and left alone")
                return nil
            }
            let frozen = (try? group.isFrozen()) ?? false
            guard let record = records[name] else {
                // No record (an earlier daemon version): the group is the app.
                guard let first = pids.min(), let stat = ProcessStat.read(first) else { return nil }
                return Survivor(app: name, pid: first, startTime: stat.startTime, frozen: frozen, how: "in its cgroup")
            }
            guard pids.contains(record.pid), record.stillRunning() != nil else {
                // Its main process ended while no daemon watched: the app is not running.
                try? group.kill()
                notes.append("\(name): recorded process \(record.pid) is gone; ended what was left in its cgroup (\(pids))")
                return nil
            }
            return Survivor(app: name, pid: record.pid, startTime: record.startTime, frozen: frozen, how: "in its cgroup")
        }
    }

    func ended(_ app: String) {
        freezers.removeValue(forKey: app)?.close()
        let group = cgroup(of: app)
        guard group.exists else { return }
        _ = try? group.waitUntil(populated: false, timeout: .seconds(2))
        try? group.remove()
    }
}

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
        try group.thaw()
        return group
    }

    func freeze(_ app: String, pid: Int32) throws { try cgroup(of: app).freeze() }
    func thaw(_ app: String, pid: Int32) throws { try cgroup(of: app).thaw() }
    func kill(_ app: String, pid: Int32) throws { try cgroup(of: app).kill() }

    func app(owning pid: Int32, running: [String: Int32]) -> String? {
        guard let path = try? Cgroup.ofProcess(pid), path.hasPrefix(relativeRoot + "/") else { return nil }
        let below = path.dropFirst(relativeRoot.count + 1)
        guard let name = below.split(separator: "/").first else { return nil }
        return String(name)
    }

    func survivors(known: Set<String>) -> [Survivor] {
        guard let names = try? root.children() else { return [] }
        return names.sorted().compactMap { name in
            let group = root.child(name)
            guard known.contains(name), let pids = try? group.processes(), let first = pids.min() else {
                try? group.remove()  // empty or unknown: nothing to adopt
                return nil
            }
            return Survivor(app: name, pid: first, frozen: (try? group.isFrozen()) ?? false)
        }
    }
}

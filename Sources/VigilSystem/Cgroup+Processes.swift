import Glibc

extension Cgroup {
    /// The pids in cgroup.procs (processes, not threads).
    public func processes() throws -> [pid_t] {
        try FileSystem.read(file("cgroup.procs")).split(separator: "\n").compactMap { pid_t($0) }
    }

    /// Moves a running process (and its threads) into this cgroup. Its
    /// existing children stay where they are, so prefer spawning into the
    /// cgroup (see `SpawnRequest.cgroup`) over adopting afterwards.
    public func adopt(_ pid: pid_t) throws {
        try FileSystem.write("\(pid)", to: file("cgroup.procs"))
    }

    /// Whether any process lives in this cgroup or below ("populated" in cgroup.events).
    public func isPopulated() throws -> Bool {
        try events()["populated"] == 1
    }

    /// A harness's clean-up: kills the processes of each child cgroup, waits
    /// (up to `timeout` each) for it to empty, removes it, then this cgroup.
    /// Best effort: what cannot be removed stays.
    public func removeWithChildren(timeout: Duration = .seconds(5)) {
        for name in (try? children()) ?? [] {
            let group = child(name)
            try? group.kill()
            _ = try? group.waitUntil(populated: false, timeout: timeout)
            try? group.remove()
        }
        try? remove()
    }

    /// SIGKILLs every process in this cgroup and below, frozen ones included.
    ///
    /// With cgroup.kill (Linux 5.14+) the kernel does it atomically, so
    /// processes forking meanwhile cannot escape; the call returns before
    /// they are gone: use `waitUntil(populated: false, timeout:)`. Without
    /// it, pids are killed round after round until none are left (at most 2 s).
    public func kill() throws {
        let killFile = file("cgroup.kill")
        if FileSystem.exists(killFile) {
            try FileSystem.write("1", to: killFile)
            return
        }
        let deadline = MonotonicInstant.now().advanced(by: .seconds(2))
        while MonotonicInstant.now() < deadline {
            let pids = try processes()
            if pids.isEmpty { return }
            for pid in pids { _ = Glibc.kill(pid, SIGKILL) }
            var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
            nanosleep(&pause, nil)
        }
        throw SystemError(.resourceBusy, "kill every process in", path: path)
    }
}

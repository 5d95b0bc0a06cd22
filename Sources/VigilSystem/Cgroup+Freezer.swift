extension Cgroup {
    /// Asks the kernel to freeze every process in this cgroup and below.
    /// Freezing completes asynchronously: `frozen 1` appears in cgroup.events
    /// (watch `openEvents()`, or `waitUntil(frozen:timeout:)`). A frozen
    /// process shows state S in /proc, not T, and still dies on SIGKILL.
    public func freeze() throws {
        try FileSystem.write("1", to: file("cgroup.freeze"))
    }

    public func thaw() throws {
        try FileSystem.write("0", to: file("cgroup.freeze"))
    }

    /// Whether the freeze has completed (`frozen` in cgroup.events), which
    /// can lag behind `freeze()`.
    public func isFrozen() throws -> Bool {
        try events()["frozen"] == 1
    }
}

import Glibc
import SystemPackage

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

/// A cgroup's `cgroup.freeze`, held open: each freeze or thaw is then one
/// pwrite(2), not an open (a path walk through cgroupfs), a write and a
/// close. The daemon keeps one per app while the app lives (two of the three
/// syscalls of every freeze and thaw were the open and the close).
public final class FreezerFile {
    public let path: String
    private var fd: Int32

    public init(_ cgroup: Cgroup) throws(SystemError) {
        path = cgroup.file("cgroup.freeze")
        fd = Glibc.open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SystemError.current("open", path: path) }
    }

    deinit { close() }

    /// Writes "1" (freeze) or "0" (thaw); like `Cgroup.freeze()`, a freeze
    /// completes asynchronously.
    public func set(frozen: Bool) throws(SystemError) {
        guard fd >= 0 else { throw SystemError(.badFileDescriptor, "write", path: path) }
        var byte: UInt8 = frozen ? UInt8(ascii: "1") : UInt8(ascii: "0")
        while pwrite(fd, &byte, 1, 0) != 1 {
            guard errno == EINTR else { throw SystemError.current("write", path: path) }
        }
    }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

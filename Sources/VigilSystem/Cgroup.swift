import Glibc

/// A directory in the cgroup v2 (unified) hierarchy, named by absolute path.
///
/// Holding a `Cgroup` does not keep the directory alive; every method talks
/// to cgroupfs directly, so the kernel stays the single source of truth.
public struct Cgroup: Sendable, Hashable, CustomStringConvertible {
    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    public var description: String { path }

    public func child(_ name: String) -> Cgroup {
        Cgroup(path: path + "/" + name)
    }

    func file(_ name: String) -> String {
        path + "/" + name
    }

    /// Where cgroup2 is mounted: /sys/fs/cgroup on a pure v2 system,
    /// /sys/fs/cgroup/unified on a hybrid one; nil if it is not mounted.
    public static func unifiedMountPoint() -> String? {
        guard let mountinfo = try? FileSystem.read("/proc/self/mountinfo") else { return nil }
        for line in mountinfo.split(separator: "\n") {
            // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER"
            let halves = line.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2, halves[1].split(separator: " ").first == "cgroup2" else { continue }
            let fields = halves[0].split(separator: " ")
            if fields.count >= 5 { return unescapeMountPath(fields[4]) }
        }
        return nil
    }

    /// The cgroup v2 path of a process relative to the mount point ("/" or
    /// "/vigil/app"), from the "0::" line of /proc/PID/cgroup.
    public static func ofProcess(_ pid: pid_t) throws -> String {
        let file = "/proc/\(pid)/cgroup"
        for line in try FileSystem.read(file).split(separator: "\n") where line.hasPrefix("0::") {
            return String(line.dropFirst(3))
        }
        throw SystemError(.noSuchFileOrDirectory, "find the cgroup v2 entry in", path: file)
    }

    public static func ofSelf() throws -> String {
        try ofProcess(getpid())
    }

    /// mkdir -p; an existing cgroup is fine.
    @discardableResult
    public static func create(_ path: String) throws -> Cgroup {
        try FileSystem.createDirectories(path, permissions: 0o755)
        return Cgroup(path: path)
    }

    public var exists: Bool {
        FileSystem.exists(file("cgroup.procs"))
    }

    /// Names of the child cgroups.
    public func children() throws -> [String] {
        guard let directory = opendir(path) else { throw SystemError.current("opendir", path: path) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            guard entry.pointee.d_type == DT_DIR else { continue }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// rmdir; fails with EBUSY while processes or child cgroups remain.
    public func remove() throws {
        try check("rmdir", path: path) { rmdir(path) }
    }

    /// Whether we may manage cgroups under `base`: makes a child there,
    /// freezes and thaws it, and removes it again.
    public static func isUsable(at base: String) -> Bool {
        let probe = Cgroup(path: base).child("vigil-probe-\(getpid())-\(MonotonicInstant.now().nanoseconds)")
        guard (try? create(probe.path)) != nil else { return false }
        defer { try? probe.remove() }
        return (try? probe.freeze()) != nil && (try? probe.thaw()) != nil
    }

    private static func unescapeMountPath(_ field: Substring) -> String {
        // mountinfo escapes space, tab, newline and backslash as \ooo.
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3,
               let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

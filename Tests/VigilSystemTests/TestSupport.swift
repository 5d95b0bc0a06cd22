import Glibc
import Testing
import VigilSystem

/// Values sent from loop handlers (any thread), for tests to await.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Locked<[Value]>([])

    func append(_ value: Value) {
        values.withLock { $0.append(value) }
    }

    var snapshot: [Value] { values.withLock { $0 } }

    /// Polls until at least `count` values arrived or `timeout` passed.
    func wait(forCount count: Int, timeout: Duration = .seconds(5)) async -> [Value] {
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        while snapshot.count < count && MonotonicInstant.now() < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return snapshot
    }
}

/// Polls `condition` until it holds or `timeout` passes; returns whether it held.
func eventually(timeout: Duration = .seconds(5), _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = MonotonicInstant.now().advanced(by: timeout)
    while MonotonicInstant.now() < deadline {
        if try condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try condition()
}

/// A started loop, stopped and joined when the test is done.
func withRunningLoop<Result>(_ body: (EventLoop) async throws -> Result) async throws -> Result {
    let loop = try EventLoop(name: "test-loop")
    loop.start()
    defer {
        loop.stop()
        loop.waitUntilStopped()
    }
    return try await body(loop)
}

/// A name no other test (or concurrent test run) uses.
func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(getpid())-\(MonotonicInstant.now().nanoseconds)"
}

/// A fresh directory under /tmp, removed with its contents afterwards.
func withTemporaryDirectory<Result>(_ body: (String) async throws -> Result) async throws -> Result {
    let path = "/tmp/" + uniqueName("vigil-test")
    #expect(mkdir(path, 0o700) == 0)
    defer { removeTree(path) }
    return try await body(path)
}

private func removeTree(_ path: String) {
    if let directory = opendir(path) {
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            removeTree(path + "/" + name)
        }
        closedir(directory)
        rmdir(path)
    } else {
        unlink(path)
    }
}

/// A field of /proc/PID/status (or /proc/self/task/TID/status), e.g. "SigBlk".
func procStatusField(_ file: String, _ field: String) -> String? {
    let fd = open(file, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 8192)
    let count = read(fd, &buffer, buffer.count)
    guard count > 0 else { return nil }
    for line in String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\n")
    where line.hasPrefix(field + ":") {
        return line.dropFirst(field.count + 1).trimmingPrefix(while: \.isWhitespace).description
    }
    return nil
}

/// Blocks up to `timeout` for a pidfd to become readable (the process exited).
func waitForExit(_ process: SpawnedProcess, timeout: Duration = .seconds(5)) -> Bool {
    var request = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
    return poll(&request, 1, Int32(timeout.components.seconds * 1000)) == 1
}

/// Reads a whole small file.
func contents(of path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { close(fd) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count <= 0 { return String(decoding: result, as: UTF8.self) }
        result += buffer[..<count]
    }
}

enum TestCgroups {
    /// Root, a cgroup2 mount, and permission to create and freeze cgroups there.
    static let unavailableReason: String? = {
        guard getuid() == 0 else { return "needs root" }
        guard let mount = Cgroup.unifiedMountPoint() else { return "no cgroup2 hierarchy is mounted" }
        guard Cgroup.isUsable(at: mount) else { return "cannot create and freeze cgroups under \(mount)" }
        return nil
    }()

    static var isAvailable: Bool { unavailableReason == nil }

    /// A fresh <unified>/vigil-test-PID-N cgroup; everything in and below it
    /// is killed and removed afterwards.
    static func withBase<Result>(_ body: (Cgroup) async throws -> Result) async throws -> Result {
        let mount = try #require(Cgroup.unifiedMountPoint())
        let base = try Cgroup.create(mount + "/" + uniqueName("vigil-test"))
        defer { destroy(base) }
        return try await body(base)
    }

    /// The path of `cgroup` as /proc/PID/cgroup shows it.
    static func relativePath(_ cgroup: Cgroup) -> String {
        String(cgroup.path.dropFirst(Cgroup.unifiedMountPoint()!.count))
    }

    private static func destroy(_ cgroup: Cgroup) {
        for child in (try? cgroup.children()) ?? [] { destroy(cgroup.child(child)) }
        if (try? cgroup.isPopulated()) == true {
            try? cgroup.thaw()
            try? cgroup.kill()
            _ = try? cgroup.waitUntil(populated: false, timeout: .seconds(5))
        }
        try? cgroup.remove()
    }
}

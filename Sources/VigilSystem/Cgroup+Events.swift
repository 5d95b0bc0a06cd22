import Glibc
import SystemPackage

extension Cgroup {
    /// cgroup.events as key/value pairs, e.g. ["populated": 1, "frozen": 0].
    public func events() throws -> [String: Int] {
        Self.parseEvents(try FileSystem.read(file("cgroup.events")))
    }

    /// A close-on-exec, read-only fd for cgroup.events, owned by the caller.
    ///
    /// poll and epoll report it with `.priority` and `.error` (EPOLLPRI |
    /// EPOLLERR) when the file changes after this call (e.g. `frozen` or
    /// `populated` flips). It is always "readable", so watch for `.priority`
    /// only, and call `readEvents(from:)` in the handler: reading acknowledges
    /// the change, or level-triggered epoll keeps reporting it.
    public func openEvents() throws -> Int32 {
        let fd = try FileSystem.open(file("cgroup.events"), .readOnly)
        do {
            // A fresh fd counts as changed until its first read.
            _ = try FileSystem.read(fd, path: file("cgroup.events"))
        } catch {
            try? fd.close()
            throw error
        }
        return fd.rawValue
    }

    /// Re-reads an fd from `openEvents()` from the start, acknowledging the change.
    public static func readEvents(from fd: Int32) throws -> [String: Int] {
        parseEvents(try FileSystem.read(FileDescriptor(rawValue: fd), path: "cgroup.events"))
    }

    /// Blocks until cgroup.events says `frozen` is as asked, or `timeout`
    /// passes. Returns whether it got there. For tests and synchronous
    /// callers; the daemon watches `openEvents()` on its event loop instead.
    public func waitUntil(frozen: Bool, timeout: Duration) throws -> Bool {
        try waitUntil("frozen", is: frozen ? 1 : 0, timeout: timeout)
    }

    /// Like `waitUntil(frozen:timeout:)`, for `populated` (e.g. after `kill()`).
    public func waitUntil(populated: Bool, timeout: Duration) throws -> Bool {
        try waitUntil("populated", is: populated ? 1 : 0, timeout: timeout)
    }

    private func waitUntil(_ key: String, is value: Int, timeout: Duration) throws -> Bool {
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        let fd = try openEvents()
        defer { _ = Glibc.close(fd) }
        while true {
            if try Self.readEvents(from: fd)[key] == value { return true }
            let remaining = deadline - MonotonicInstant.now()
            if remaining <= .zero { return false }
            var request = pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)
            let milliseconds = Int32(clamping: (remaining.totalNanoseconds + 999_999) / 1_000_000)
            try check("poll", path: file("cgroup.events")) { poll(&request, 1, milliseconds) }
        }
    }

    static func parseEvents(_ text: String) -> [String: Int] {
        var result: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count == 2, let value = Int(fields[1]) { result[String(fields[0])] = value }
        }
        return result
    }
}

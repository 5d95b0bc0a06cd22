import Glibc
import Synchronization

/// Where the JSON lines go: a file opened with `O_APPEND` (kept across
/// relaunches: each process appends) or standard output. Each line is one
/// `write(2)`, so it is out of the process before the next statement: a
/// reader sees it at once, and a crash, a kill or the freezer lose nothing
/// already written.
final class Output: Sendable {
    private let fd: Int32
    /// The path, or nil for standard output.
    let path: String?
    private let lock = Mutex(())

    /// Opens `path` for appending (creating it, mode 0644), or standard output when nil.
    init(path: String?) throws(OutputError) {
        self.path = path
        guard let path else {
            fd = STDOUT_FILENO
            return
        }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw OutputError(path: path, errno: errno) }
        self.fd = fd
    }

    deinit {
        if path != nil { close(fd) }
    }

    /// Writes one line (a newline is added); returns false, after saying why on
    /// standard error, when the line could not be written whole.
    @discardableResult
    func write(_ line: OutputLine) -> Bool {
        write(text: line.json())
    }

    @discardableResult
    func write(text: String) -> Bool {
        let bytes = Array((text + "\n").utf8)
        return lock.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
                if n < 0 {
                    if errno == EINTR { continue }
                    say("cannot write to \(path ?? "standard output"): \(String(cString: strerror(errno)))")
                    return false
                }
                offset += n
            }
            return true
        }
    }
}

struct OutputError: Error, CustomStringConvertible {
    var path: String
    var errno: Int32
    var description: String { "cannot open \(path) for appending: \(String(cString: strerror(errno)))" }
}

/// A line for the app's log on standard error (standard output may carry the
/// JSON lines). One unbuffered `write(2)`, like the JSON lines.
func say(_ line: String) {
    let bytes = Array("vigil-hrm-bridge[\(getpid())]: \(line)\n".utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

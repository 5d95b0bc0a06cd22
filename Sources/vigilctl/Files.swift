import Glibc

/// Whole files read and written with the system's own reasons on failure
/// ("No such file or directory"), in place of Foundation's `Data(contentsOf:)`
/// and `Data.write(to:)`, whose `localizedDescription` FoundationEssentials
/// lacks (issue 32).
enum Files {
    struct Problem: Error, CustomStringConvertible {
        let description: String
    }

    static func read(_ path: String) throws(Problem) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw reason() }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw reason() }
            if count == 0 { return bytes }
            bytes += buffer[..<count]
        }
    }

    /// Replaces the file's content (created 0666 less the umask, as Foundation did).
    static func write(_ bytes: [UInt8], to path: String) throws(Problem) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
        guard fd >= 0 else { throw reason() }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else {
                let problem = reason()
                close(fd)
                throw problem
            }
            offset += written
        }
        guard close(fd) == 0 else { throw reason() }
    }

    private static func reason() -> Problem { Problem(description: String(cString: strerror(errno))) }
}

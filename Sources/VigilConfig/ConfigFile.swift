import VigilLifecycle
import FoundationEssentials
import Glibc
import VigilProtocol
import VigilTOML

/// Reads a manifest or config file whole, as bytes (the TOML parser says
/// where UTF-8 is broken). Only a regular file is read, never more than the
/// parser accepts: a FIFO or a device named `*.toml` must not block or
/// exhaust the daemon.
enum ConfigFile {
    static func bytes(_ path: String) throws(ManifestProblem) -> [UInt8] {
        try contents(path).bytes
    }

    /// The bytes and the file's status, taken from the descriptor the bytes
    /// were read through (no race between the check and the read).
    static func contents(_ path: String) throws(ManifestProblem) -> (bytes: [UInt8], status: stat) {
        func failure(_ what: String) -> ManifestProblem {
            ManifestProblem(file: path, field: nil, message: "cannot read: \(what)")
        }
        func systemError() -> String { String(cString: strerror(errno)) }

        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { throw failure(systemError()) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure(systemError()) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw failure("not a regular file") }

        let limit = TOMLDocument.maximumSize
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while bytes.count <= limit {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw failure(systemError()) }
            if count == 0 { return (bytes, info) }
            bytes += buffer[0..<count]
        }
        throw ManifestProblem(file: path, field: nil, message: "larger than \(limit) bytes: not read")
    }
}

import CVigilShim
import Glibc

/// A `sockaddr_un`: a filesystem path, or a name in the abstract namespace.
/// Plain bytes, so it is shared freely (`SystemdNotifier` keeps one).
struct UnixSocketAddress: @unchecked Sendable {
    static let maxPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    private var storage = sockaddr_un()
    /// The address length to pass: all of it for a path (NUL-terminated), only
    /// the name's bytes for an abstract name, whose NULs would be part of it.
    private var length = socklen_t(MemoryLayout<sockaddr_un>.size)

    init(path: String) throws(UnixSocketError) {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maxPathLength else {
            throw .pathTooLong(path: path)
        }
        self.init(bytes: bytes, length: socklen_t(MemoryLayout<sockaddr_un>.size))
    }

    /// A socket named as systemd names them in `$NOTIFY_SOCKET`: a path, or
    /// `@name` for the abstract name `name` (a NUL byte first on the wire).
    init(systemdName name: String) throws(UnixSocketError) {
        guard name.hasPrefix("@") else {
            try self.init(path: name)
            return
        }
        let bytes = [0] + Array(name.utf8.dropFirst())
        guard bytes.count > 1, bytes.count <= Self.maxPathLength + 1 else { throw .pathTooLong(path: name) }
        self.init(bytes: bytes, length: socklen_t(MemoryLayout<sa_family_t>.size + bytes.count))
    }

    private init(bytes: [UInt8], length: socklen_t) {
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { $0.copyBytes(from: bytes) }
        self.length = length
    }

    func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    /// A close-on-exec stream (or `type`) socket, non-blocking if asked.
    static func makeSocket(type kind: __socket_type = SOCK_STREAM, nonBlocking: Bool) throws(SystemError) -> Int32 {
        var type = Int32(kind.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        return try check("socket") { socket(AF_UNIX, type, 0) }
    }
}

import CVigilShim
import Glibc

/// A filesystem `sockaddr_un`.
struct UnixSocketAddress {
    static let maxPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    private var storage = sockaddr_un()

    init(path: String) throws(UnixSocketError) {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maxPathLength else {
            throw .pathTooLong(path: path)
        }
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { $0.copyBytes(from: bytes) }
    }

    func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }

    /// A close-on-exec stream (or `type`) socket, non-blocking if asked.
    static func makeSocket(type kind: __socket_type = SOCK_STREAM, nonBlocking: Bool) throws(SystemError) -> Int32 {
        var type = Int32(kind.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        return try check("socket") { socket(AF_UNIX, type, 0) }
    }
}

import CVigilShim
import Glibc
import Synchronization

/// A listening Unix stream socket bound to a filesystem path, owned: `close()`
/// (or deinit) closes it and removes the socket file, if it is still ours.
public final class UnixListener: Sendable {
    /// Non-blocking: watch it for `.readable`, then `accept()` until nil.
    public let fd: Int32
    public let path: String
    private let identity: FileSystem.Identity?
    private let isClosed = Atomic(false)

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
        identity = FileSystem.identity(path)
    }

    deinit {
        close()
    }

    /// Binds and listens at `path`, creating its parent directory (0755) if needed.
    ///
    /// A socket file left behind by a crashed daemon is detected (nobody
    /// answers connect) and replaced; a live one makes this throw
    /// `UnixSocketError.addressInUse`. `permissions` decide who may connect.
    public static func bind(path: String, permissions: mode_t = 0o600, backlog: Int32 = 128) throws -> UnixListener {
        let address = try UnixSocketAddress(path: path)
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            try FileSystem.createDirectories(String(path[..<slash]), permissions: 0o755)
        }
        let fd = try UnixSocketAddress.makeSocket(nonBlocking: true)
        do {
            try bind(fd, to: address, path: path)
            // Nobody can connect before listen(), so chmod leaves no window.
            try check("chmod", path: path) { chmod(path, permissions) }
            try check("listen", path: path) { listen(fd, backlog) }
        } catch {
            _ = Glibc.close(fd)
            throw error
        }
        return UnixListener(fd: fd, path: path)
    }

    private static func bind(_ fd: Int32, to address: UnixSocketAddress, path: String) throws {
        if address.withSockaddr({ Glibc.bind(fd, $0, $1) }) == 0 { return }
        guard errno == EADDRINUSE else { throw SystemError.current("bind", path: path) }
        try removeStaleSocket(at: path, address: address)
        try check("bind", path: path) { address.withSockaddr { Glibc.bind(fd, $0, $1) } }
    }

    /// Unlinks `path` if it is a socket nobody answers on; throws if someone does.
    private static func removeStaleSocket(at path: String, address: UnixSocketAddress) throws {
        guard let existing = FileSystem.identity(path) else { return }  // gone meanwhile
        guard existing.isSocket else { throw UnixSocketError.notASocket(path: path) }
        let probe = try UnixSocketAddress.makeSocket(nonBlocking: true)
        defer { _ = Glibc.close(probe) }
        // Non-blocking: a live listener with a full backlog says EAGAIN, still alive.
        if address.withSockaddr({ Glibc.connect(probe, $0, $1) }) == 0 || errno == EAGAIN {
            throw UnixSocketError.addressInUse(path: path)
        }
        guard errno == ECONNREFUSED else { throw SystemError.current("connect", path: path) }
        if unlink(path) != 0 && errno != ENOENT { throw SystemError.current("unlink", path: path) }
    }

    /// The next pending connection as a non-blocking stream, or nil if none is waiting.
    public func accept() throws -> UnixStream? {
        while true {
            let client = vigil_accept(fd)
            if client >= 0 { return UnixStream(adopting: client) }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw SystemError.current("accept", path: path)
            }
        }
    }

    /// Idempotent; leaves the path alone if another listener has replaced our socket file.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if let identity, FileSystem.identity(path) == identity { unlink(path) }
        _ = Glibc.close(fd)
    }
}

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

    private init(fd: Int32, path: String, ownsPath: Bool = true) {
        self.fd = fd
        self.path = path
        identity = ownsPath ? FileSystem.identity(path) : nil
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

    /// Takes a listening socket someone else bound, as systemd passes one for
    /// socket activation (`SystemdEnvironment.listenFDs`): it must be a Unix
    /// stream socket that listens. It is made non-blocking and close-on-exec;
    /// `close()` closes it but leaves its path alone, since the socket file
    /// stays the binder's (systemd keeps listening there while the daemon
    /// restarts, so clients connecting meanwhile wait in its backlog).
    public static func adopt(fd: Int32) throws -> UnixListener {
        func option(_ name: Int32) throws(SystemError) -> Int32 {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            try check("getsockopt(fd \(fd))") { getsockopt(fd, SOL_SOCKET, name, &value, &length) }
            return value
        }
        guard try option(SO_DOMAIN) == AF_UNIX, try option(SO_TYPE) == Int32(SOCK_STREAM.rawValue) else {
            throw UnixSocketError.notAUnixListener(fd: fd, problem: "it is not a Unix stream socket")
        }
        guard try option(SO_ACCEPTCONN) != 0 else {
            throw UnixSocketError.notAUnixListener(fd: fd, problem: "it does not listen")
        }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        try withUnsafeMutablePointer(to: &address) { pointer throws(SystemError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(SystemError) in
                _ = try check("getsockname(fd \(fd))") { getsockname(fd, raw, &length) }
            }
        }
        let path = withUnsafeBytes(of: address.sun_path) { bytes in
            String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        guard path.hasPrefix("/") else {
            throw UnixSocketError.notAUnixListener(fd: fd, problem: "it is not bound to a file system path")
        }
        let flags = try check("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        try check("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        let descriptorFlags = try check("fcntl(F_GETFD)") { fcntl(fd, F_GETFD) }
        try check("fcntl(F_SETFD)") { fcntl(fd, F_SETFD, descriptorFlags | FD_CLOEXEC) }
        return UnixListener(fd: fd, path: path, ownsPath: false)
    }

    /// The next pending connection as a non-blocking stream, or nil if none is waiting.
    public func accept() throws -> UnixStream? {
        try UnixStream.accept(on: fd, describing: path)
    }

    /// Idempotent; leaves the path alone if another listener has replaced our
    /// socket file, or if the socket was adopted (`adopt(fd:)`).
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if let identity, FileSystem.identity(path) == identity { unlink(path) }
        _ = Glibc.close(fd)
    }
}

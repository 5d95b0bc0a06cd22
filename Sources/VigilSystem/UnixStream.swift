import CVigilShim
import Glibc
import Synchronization

/// A connected Unix stream socket, owned: closed on `close()` or deinit.
///
/// `read` and `write` return nil for "would block" on a non-blocking socket,
/// so the common EAGAIN case is a value rather than an error to catch.
/// Writes use MSG_NOSIGNAL: a vanished peer is an EPIPE error, never SIGPIPE.
public final class UnixStream: Sendable {
    /// Invalid after `close()`; the number may then be reused by another file.
    public let fd: Int32
    private let isClosed = Atomic(false)

    /// Takes ownership of a connected socket.
    public init(adopting fd: Int32) {
        self.fd = fd
    }

    deinit {
        close()
    }

    /// Connects in blocking mode; ENOENT and ECONNREFUSED become
    /// `UnixSocketError.noListener`, naming the path.
    public static func connect(path: String) throws -> UnixStream {
        let address = try UnixSocketAddress(path: path)
        let stream = UnixStream(adopting: try UnixSocketAddress.makeSocket(nonBlocking: false))
        let result = address.withSockaddr { retryingConnect(stream.fd, $0, $1) }
        guard result == 0 else {
            let error = SystemError.current("connect", path: path)
            if error.errno == .noSuchFileOrDirectory || error.errno == .connectionRefused {
                throw UnixSocketError.noListener(path: path, errno: error.errno)
            }
            throw error
        }
        return stream
    }

    /// Two connected blocking streams (socketpair), e.g. to hand one end to a child.
    public static func pair() throws -> (UnixStream, UnixStream) {
        var fds: [Int32] = [-1, -1]
        try check("socketpair") {
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
        }
        return (UnixStream(adopting: fds[0]), UnixStream(adopting: fds[1]))
    }

    public func setNonBlocking(_ nonBlocking: Bool) throws {
        let flags = try check("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        let updated = nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if updated != flags { try check("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, updated) } }
    }

    /// Bytes read (0 = the peer closed its end), or nil if none are available yet.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, 0)
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw SystemError.current("recv")
            }
        }
    }

    /// Up to `maxBytes` bytes ([] = the peer closed its end), or nil if none are available yet.
    public func read(maxBytes: Int) throws -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: maxBytes)
        guard let count = try bytes.withUnsafeMutableBytes({ try read(into: $0) }) else { return nil }
        bytes.removeSubrange(count...)
        return bytes
    }

    /// Bytes written (possibly fewer than given), or nil if the send buffer is full.
    public func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        while true {
            let count = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if count >= 0 { return count }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw SystemError.current("send")
            }
        }
    }

    /// Writes everything, waiting for buffer space (poll) if the socket is non-blocking.
    public func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        var remaining = bytes
        while !remaining.isEmpty {
            guard let count = try write(remaining) else {
                var request = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                try check("poll") { poll(&request, 1, -1) }
                continue
            }
            remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
        }
    }

    public func writeAll(_ bytes: some Sequence<UInt8>) throws {
        try Array(bytes).withUnsafeBytes { try writeAll($0) }
    }

    /// The connecting process's pid, uid and gid (SO_PEERCRED) and its groups (SO_PEERGROUPS).
    public func peerCredentials() throws -> PeerCredentials {
        var credentials = PeerCredentials(pid: 0, uid: 0, gid: 0)
        try check("getsockopt(SO_PEERCRED)") {
            vigil_peer_credentials(fd, &credentials.pid, &credentials.uid, &credentials.gid)
        }
        // Kernels before 4.13 lack SO_PEERGROUPS: then only the primary gid counts (fails closed).
        credentials.groups = (try? peerGroups()) ?? []
        return credentials
    }

    /// The peer's supplementary groups (SO_PEERGROUPS), as the kernel saw them at connect time.
    public func peerGroups() throws(SystemError) -> [gid_t] {
        var capacity = 64
        while true {
            var groups = [gid_t](repeating: 0, count: capacity)
            let count = try check("getsockopt(SO_PEERGROUPS)") { vigil_peer_groups(fd, &groups, Int32(capacity)) }
            if Int(count) <= capacity { return Array(groups.prefix(Int(count))) }
            capacity = Int(count)
        }
    }

    public enum ShutdownDirection: Sendable {
        case read, write, both
    }

    /// Half-closes the connection, e.g. `.write` to send EOF but keep reading.
    public func shutdown(_ direction: ShutdownDirection) throws {
        let how = switch direction {
        case .read: Int32(SHUT_RD)
        case .write: Int32(SHUT_WR)
        case .both: Int32(SHUT_RDWR)
        }
        try check("shutdown") { Glibc.shutdown(fd, how) }
    }

    /// Idempotent and thread-safe; remove any event-loop watch on `fd` first.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = Glibc.close(fd)
    }
}

/// connect(2), where EINTR leaves the connection in progress: wait for it instead of retrying.
private func retryingConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    if Glibc.connect(fd, address, length) == 0 { return 0 }
    guard errno == EINTR else { return -1 }
    var request = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
    while poll(&request, 1, -1) < 0 && errno == EINTR {}
    var error: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
    errno = error
    return error == 0 ? 0 : -1
}

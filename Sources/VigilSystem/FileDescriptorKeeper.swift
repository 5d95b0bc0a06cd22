import CVigilShim
import Glibc
import SystemPackage

/// The daemon's side of the fd keeper (`vigil_fd_keeper_serve`, run as
/// `vigild --fd-keeper`): a process that holds a duplicate of each
/// descriptor it is given, under a name, so that the files stay open when the
/// daemon dies, and gives them back to the next daemon. Systemd's file
/// descriptor store does the same for a service; this one works anywhere.
///
/// Requests are one SOCK_SEQPACKET message each and are never answered, except
/// `list`; a keeper that is gone makes them throw, and the daemon goes on
/// without one. Not thread-safe: used from the daemon's loop thread.
public final class FileDescriptorKeeper {
    public let path: String
    private var socket: Int32

    private init(path: String, socket: Int32) {
        self.path = path
        self.socket = socket
    }

    deinit { close() }

    /// Connects to the keeper listening at `path`; if none answers, binds a
    /// new listening socket there (0600) and calls `start` with it, to start
    /// a keeper that serves it (the socket is closed here afterwards), then
    /// connects to that. Connecting needs no running keeper: the connection
    /// waits in the backlog until the new keeper accepts it.
    public static func connect(path: String, start: (_ listener: Int32) throws -> Void) throws -> FileDescriptorKeeper {
        let address = try UnixSocketAddress(path: path)
        if let socket = try? connected(to: address, path: path) {
            return FileDescriptorKeeper(path: path, socket: socket)
        }
        let listener = try UnixSocketAddress.makeSocket(type: SOCK_SEQPACKET, nonBlocking: false)
        defer { _ = Glibc.close(listener) }
        if unlink(path) != 0 && errno != ENOENT { throw SystemError.current("unlink", path: path) }
        try check("bind", path: path) { address.withSockaddr { Glibc.bind(listener, $0, $1) } }
        try check("chmod", path: path) { chmod(path, 0o600) }
        try check("listen", path: path) { listen(listener, 4) }
        try start(listener)
        return FileDescriptorKeeper(path: path, socket: try connected(to: address, path: path))
    }

    /// The keeper listening at `path`, or nil if none answers (none is started).
    public static func connectIfRunning(path: String) -> FileDescriptorKeeper? {
        guard let address = try? UnixSocketAddress(path: path), let socket = try? connected(to: address, path: path) else {
            return nil
        }
        return FileDescriptorKeeper(path: path, socket: socket)
    }

    private static func connected(to address: UnixSocketAddress, path: String) throws -> Int32 {
        let socket = try UnixSocketAddress.makeSocket(type: SOCK_SEQPACKET, nonBlocking: false)
        do {
            try check("connect", path: path) { address.withSockaddr { Glibc.connect(socket, $0, $1) } }
            // A wedged keeper must not hang the daemon: its answers come within
            // 5 s, or `list` fails and the daemon goes on without them.
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            try check("setsockopt", path: path) {
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
            try check("setsockopt", path: path) {
                setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
        } catch {
            _ = Glibc.close(socket)
            throw error
        }
        return socket
    }

    /// The keeper holds a duplicate of `fd` under `name` (at most 255 bytes,
    /// no NUL), replacing what it held under that name.
    public func keep(_ fd: Int32, name: String) throws(SystemError) {
        try send("P " + name, fd: fd)
    }

    /// The keeper closes what it holds under `name`, if anything.
    public func drop(name: String) throws(SystemError) {
        try send("D " + name, fd: -1)
    }

    /// Duplicates of everything the keeper holds, by name; the caller owns them
    /// (close-on-exec). The keeper keeps its own.
    public func list() throws(SystemError) -> [String: Int32] {
        try send("L", fd: -1)
        var kept: [String: Int32] = [:]
        var buffer = [UInt8](repeating: 0, count: 260)
        while true {
            var fd: Int32 = -1
            let length = buffer.withUnsafeMutableBytes { vigil_receive_with_fd(socket, $0.baseAddress, $0.count, &fd) }
            guard length > 0 else {
                let failure = length == 0 ? SystemError(Errno.connectionReset, "recvmsg", path: path)
                    : SystemError.current("recvmsg", path: path)
                kept.values.forEach { _ = Glibc.close($0) }
                throw failure
            }
            if buffer[0] == UInt8(ascii: "E") { return kept }
            guard fd >= 0, length > 2, buffer[0] == UInt8(ascii: "F") else {
                if fd >= 0 { _ = Glibc.close(fd) }
                continue
            }
            let name = String(decoding: buffer[2..<length], as: UTF8.self)
            if let previous = kept.updateValue(fd, forKey: name) { _ = Glibc.close(previous) }
        }
    }

    /// How long a keeper waits for a daemon to come back before it closes
    /// what it holds and ends: long enough for a restart (systemd's, a test
    /// harness's, an upgrade's), short enough not to hold ports for good.
    public static let idleSeconds: Int32 = 120

    /// Runs a keeper in this process on the listening socket `listener` (the
    /// one `connect` passes to `start`): `vigild --fd-keeper`, with it as stdin.
    public static func serve(listener: Int32 = 0) -> Never {
        vigil_fd_keeper_ignore_signals()
        exit(run(listener: listener, idleSeconds: idleSeconds))
    }

    /// The keeper's loop, returning when it ends (tests run it on a thread).
    static func run(listener: Int32, idleSeconds: Int32) -> Int32 {
        vigil_fd_keeper_serve(listener, idleSeconds)
    }

    /// Ends the keeper, closing what it holds: for a daemon that stops for good.
    public func quit() {
        try? send("Q", fd: -1)
        close()
    }

    /// Closes this daemon's connection; the keeper keeps what it holds.
    public func close() {
        guard socket >= 0 else { return }
        _ = Glibc.close(socket)
        socket = -1
    }

    private func send(_ message: String, fd: Int32) throws(SystemError) {
        guard socket >= 0 else { throw SystemError(Errno.badFileDescriptor, "sendmsg", path: path) }
        let bytes = Array(message.utf8)
        let result = bytes.withUnsafeBytes { vigil_send_with_fd(socket, $0.baseAddress, $0.count, fd) }
        if result != 0 { throw SystemError.current("sendmsg", path: path) }
    }
}

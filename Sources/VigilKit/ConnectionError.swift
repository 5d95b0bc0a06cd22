import Glibc

/// The daemon's socket could not be reached. Kept apart from `ProtocolError`
/// because the remedy differs: nothing was said yet, so start vigild or fix the path.
public struct ConnectionError: Error, Equatable, CustomStringConvertible {
    /// The socket path that was tried.
    public let path: String
    /// The `errno` of the failed call.
    public let errno: Int32

    public init(path: String, errno: Int32) {
        self.path = path
        self.errno = errno
    }

    /// True when nothing listens at `path`: the daemon is not running there.
    public var isNoDaemon: Bool { errno == ENOENT || errno == ECONNREFUSED }

    public var description: String {
        switch errno {
        case ENOENT, ECONNREFUSED: "no daemon listening at \(path) (is vigild running?)"
        case EACCES, EPERM: "permission denied to connect to \(path)"
        case ENAMETOOLONG: "socket path is too long: \(path)"
        default: "cannot connect to \(path): \(String(cString: strerror(errno)))"
        }
    }
}

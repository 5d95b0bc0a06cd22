import SystemPackage

/// Socket failures people hit in normal use, phrased for them; anything
/// else is reported as a `SystemError`.
public enum UnixSocketError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A live listener already answers at this path.
    case addressInUse(path: String)
    /// Nothing listens at this path (ENOENT or ECONNREFUSED).
    case noListener(path: String, errno: Errno)
    /// Longer than sockaddr_un allows (107 bytes).
    case pathTooLong(path: String)
    /// The path exists and is not a socket, so it is not ours to replace.
    case notASocket(path: String)
    /// A passed descriptor (socket activation) that cannot serve as the listener.
    case notAUnixListener(fd: Int32, problem: String)

    public var description: String {
        switch self {
        case .addressInUse(let path):
            "address in use: another vigild is running at \(path)"
        case .noListener(let path, let errno):
            "no daemon listening at \(path) (\(errno))"
        case .pathTooLong(let path):
            "socket path too long (max \(UnixSocketAddress.maxPathLength) bytes): \(path)"
        case .notASocket(let path):
            "cannot listen at \(path): the file exists and is not a socket"
        case .notAUnixListener(let fd, let problem):
            "the passed descriptor \(fd) cannot be the listening socket: \(problem)"
        }
    }
}

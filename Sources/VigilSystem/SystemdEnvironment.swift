import Glibc

/// What systemd hands a service through its environment: where to send
/// notifications (`NOTIFY_SOCKET`), the watchdog interval (`WATCHDOG_USEC`,
/// `WATCHDOG_PID`) and listening sockets passed for activation (`LISTEN_PID`,
/// `LISTEN_FDS`, `LISTEN_FDNAMES`, from fd 3 on). See sd_notify(3),
/// sd_watchdog_enabled(3) and sd_listen_fds(3); this is the same protocol
/// without libsystemd.
public struct SystemdEnvironment: Sendable, Equatable {
    /// `$NOTIFY_SOCKET`: a path, or `@name` for an abstract socket.
    public var notifySocket: String?
    /// How often systemd expects WATCHDOG=1 at the latest (nil: no watchdog for us).
    public var watchdogInterval: Duration?
    /// Descriptors passed by socket activation, from fd 3 on, with their names.
    public var listenFDs: [ListenFD] = []

    public struct ListenFD: Sendable, Equatable {
        public var fd: Int32
        /// From `LISTEN_FDNAMES` (a socket unit's `FileDescriptorName=`,
        /// by default its unit name, e.g. `vigild.socket`); "unknown" without one.
        public var name: String

        public init(fd: Int32, name: String) {
            self.fd = fd
            self.name = name
        }
    }

    /// The variables this reads (and `take` removes).
    public static let variables = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]

    /// The first passed descriptor, as sd_listen_fds(3) numbers them.
    public static let firstListenFD: Int32 = 3

    public init(notifySocket: String? = nil, watchdogInterval: Duration? = nil, listenFDs: [ListenFD] = []) {
        self.notifySocket = notifySocket
        self.watchdogInterval = watchdogInterval
        self.listenFDs = listenFDs
    }

    /// Reads the variables from `environment` for the process `pid`: watchdog
    /// and passed descriptors meant for another process (`WATCHDOG_PID`,
    /// `LISTEN_PID` naming another pid: they were inherited) are ignored.
    public static func parse(_ environment: [String: String], pid: pid_t) throws(SystemdEnvironmentError) -> SystemdEnvironment {
        var result = SystemdEnvironment()
        if let socket = environment["NOTIFY_SOCKET"], !socket.isEmpty {
            guard socket.hasPrefix("/") || socket.hasPrefix("@") else {
                throw .invalid("NOTIFY_SOCKET", socket, "is neither an absolute path nor an abstract socket name (@name)")
            }
            result.notifySocket = socket
        }
        if let usec = environment["WATCHDOG_USEC"] {
            guard let micros = UInt64(usec), micros > 0 else {
                throw .invalid("WATCHDOG_USEC", usec, "is not a positive number of microseconds")
            }
            if try forUs("WATCHDOG_PID", environment["WATCHDOG_PID"], pid: pid, required: false) {
                result.watchdogInterval = .microseconds(micros)
            }
        }
        if let count = environment["LISTEN_FDS"] {
            guard let number = Int32(count), number >= 0, number < 1024 else {
                throw .invalid("LISTEN_FDS", count, "is not a number of descriptors")
            }
            if try forUs("LISTEN_PID", environment["LISTEN_PID"], pid: pid, required: true) {
                let names = environment["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) }
                if let names, names.count != number {
                    throw .invalid("LISTEN_FDNAMES", environment["LISTEN_FDNAMES"]!, "names \(names.count) descriptors, LISTEN_FDS says \(number)")
                }
                result.listenFDs = (0..<number).map { index in
                    ListenFD(fd: firstListenFD + index, name: names?[Int(index)] ?? "unknown")
                }
            }
        }
        return result
    }

    /// Whether a `*_PID` variable names `pid` (absent: only when not `required`).
    private static func forUs(_ name: String, _ value: String?, pid: pid_t, required: Bool) throws(SystemdEnvironmentError) -> Bool {
        guard let value else { return !required }
        guard let named = pid_t(value), named > 0 else { throw .invalid(name, value, "is not a process id") }
        return named == pid
    }

    /// Reads this process's variables, then removes them from its environment
    /// (so no app or helper it starts takes them for its own) and marks the
    /// passed descriptors close-on-exec. Call once, on the main thread, before
    /// any other thread exists: unsetenv is not thread-safe.
    public static func take() throws(SystemdEnvironmentError) -> SystemdEnvironment {
        var environment: [String: String] = [:]
        for name in variables {
            if let value = getenv(name) { environment[name] = String(cString: value) }
            unsetenv(name)
        }
        let result = try parse(environment, pid: getpid())
        for passed in result.listenFDs {
            let flags = fcntl(passed.fd, F_GETFD)
            guard flags >= 0 else {
                throw .invalid("LISTEN_FDS", environment["LISTEN_FDS"] ?? "", "passes fd \(passed.fd), which is not open")
            }
            _ = fcntl(passed.fd, F_SETFD, flags | FD_CLOEXEC)
        }
        return result
    }
}

/// A systemd variable with a value that cannot be right: said plainly, since
/// it comes from a unit file or a hand-made environment.
public enum SystemdEnvironmentError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalid(_ variable: String, _ value: String, _ problem: String)

    public var description: String {
        switch self {
        case let .invalid(variable, value, problem): "\(variable)='\(value)' \(problem)"
        }
    }
}

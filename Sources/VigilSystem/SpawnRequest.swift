import Glibc

/// Who a spawned process runs as: the child sets its supplementary groups,
/// then its gid, then its uid (real, effective and saved) before exec.
public struct SpawnCredentials: Sendable, Hashable {
    public var uid: uid_t
    public var gid: gid_t
    /// The supplementary groups; empty leaves the process in its primary group only.
    public var groups: [gid_t]

    public init(uid: uid_t, gid: gid_t, groups: [gid_t] = []) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }
}

/// What to start and where: the input to `ProcessSpawner.spawn`.
public struct SpawnRequest: Sendable, Hashable {
    /// A path (used as is; relative to `workingDirectory` if one is given),
    /// or a bare name searched in the PATH of `environment`, else the daemon's.
    public var executable: String
    /// The arguments after argv[0]; argv[0] is `executable` as written.
    public var arguments: [String]
    /// The child's entire environment (nothing else is inherited).
    public var environment: [String: String]
    /// nil keeps the daemon's working directory.
    public var workingDirectory: String?
    /// Joined before exec, so the process and everything it forks start inside it.
    public var cgroup: Cgroup?
    /// Becomes the child's stdout and stderr; nil means /dev/null.
    public var output: Int32?
    /// Becomes the child's stdin; nil means /dev/null.
    public var input: Int32?
    /// Makes the child a session and process group leader (setsid), so the
    /// SIGSTOP/SIGCONT fallback can signal the whole app with `kill(-pid)`.
    public var newSession: Bool
    /// What error messages call the app; defaults to the executable's file name.
    public var name: String
    /// The user and groups to run as; nil keeps the daemon's. Dropped after
    /// the cgroup is joined and the output wired (both need the daemon's
    /// rights) and before the working directory is entered.
    public var credentials: SpawnCredentials?

    public init(
        executable: String,
        arguments: [String] = [],
        environment: [String: String] = SpawnRequest.currentEnvironment(),
        workingDirectory: String? = nil,
        cgroup: Cgroup? = nil,
        output: Int32? = nil,
        input: Int32? = nil,
        newSession: Bool = false,
        name: String? = nil,
        credentials: SpawnCredentials? = nil
    ) {
        self.executable = executable
        self.arguments = arguments
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.cgroup = cgroup
        self.output = output
        self.input = input
        self.newSession = newSession
        self.name = name ?? String(executable.split(separator: "/").last ?? Substring(executable))
        self.credentials = credentials
    }

    /// The daemon's own environment, for requests that should inherit it.
    public static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let pair = String(cString: pointer)
            if let equals = pair.firstIndex(of: "=") {
                result[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
            }
            entry += 1
        }
        return result
    }

    /// The path execve gets: `executable` if it has a slash, else the first
    /// executable regular file of that name in PATH.
    func resolvedExecutable() -> String? {
        if executable.contains("/") { return executable }
        let searchPath = environment["PATH"]
            ?? getenv("PATH").map { String(cString: $0) }
            ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in searchPath.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + executable
            var info = stat()
            if stat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        return nil
    }
}

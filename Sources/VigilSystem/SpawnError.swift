import CVigilShim
import SystemPackage

/// Why a process could not be started, phrased for the person who asked:
/// "cannot start demo: /opt/demo/run: No such file or directory".
public struct SpawnError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Step: Sendable, Hashable {
        /// The executable was not found in PATH.
        case resolve
        /// Opening /dev/null or the report pipe, or fork, in the daemon.
        case prepare
        case cgroup
        case session
        case standardIO
        case fileDescriptors
        case workingDirectory
        case exec
        /// setgroups, setgid or setuid to the app's user.
        case credentials
    }

    /// The app's name, from `SpawnRequest.name`.
    public var name: String
    public var step: Step
    /// The path the failed step was about: executable, cgroup or directory.
    public var path: String?
    public var errno: Errno

    public init(name: String, step: Step, path: String?, errno: Errno) {
        self.name = name
        self.step = step
        self.path = path
        self.errno = errno
    }

    public var description: String {
        let what = switch step {
        case .resolve: "\(path ?? "?"): command not found in PATH"
        case .prepare: "\(path.map { "\($0): " } ?? "")\(errno)"
        case .cgroup: "cannot join cgroup \(path ?? "?"): \(errno)"
        case .session: "setsid: \(errno)"
        case .standardIO: "cannot set up stdin/stdout/stderr: \(errno)"
        case .fileDescriptors: "cannot close inherited file descriptors: \(errno)"
        case .workingDirectory: "cannot change directory to \(path ?? "?"): \(errno)"
        case .exec: "\(path ?? "?"): \(errno)"
        case .credentials: "cannot become \(path ?? "its user"): \(errno)"
        }
        return "cannot start \(name): \(what)"
    }

    /// The step the C child reported, and the path that step was about.
    init(name: String, failed step: vigil_spawn_step, request: SpawnRequest, executable: String, errno: Errno) {
        let (kind, path): (Step, String?) = switch step {
        case VIGIL_SPAWN_CGROUP: (.cgroup, request.cgroup?.path)
        case VIGIL_SPAWN_SESSION: (.session, nil)
        case VIGIL_SPAWN_STDIO: (.standardIO, nil)
        case VIGIL_SPAWN_FILE_DESCRIPTORS: (.fileDescriptors, nil)
        case VIGIL_SPAWN_WORKING_DIRECTORY: (.workingDirectory, request.workingDirectory)
        case VIGIL_SPAWN_EXEC: (.exec, executable)
        case VIGIL_SPAWN_CREDENTIALS:
            (.credentials, request.credentials.map { "uid \($0.uid) gid \($0.gid) groups \($0.groups.map(String.init))" })
        default: (.prepare, step == VIGIL_SPAWN_FORK ? "fork" : nil)
        }
        self.init(name: name, step: kind, path: path, errno: errno)
    }
}

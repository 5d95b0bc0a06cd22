import CVigilShim
import Glibc
import SystemPackage

/// A started process: its pid, and a pidfd that becomes readable when it exits.
public struct SpawnedProcess: Sendable, Hashable {
    public let pid: pid_t
    /// Owned by the caller (close it when done); -1 on kernels without pidfd_open.
    public let pidfd: Int32

    public init(pid: pid_t, pidfd: Int32) {
        self.pid = pid
        self.pidfd = pidfd
    }
}

/// Starts processes with fork + execve in C (see CVigilShim's vigil_spawn).
///
/// Unlike Foundation.Process, the child never inherits the spawning thread's
/// blocked signal mask or ignored signals, holds only fds 0-2, and is already
/// in its cgroup when it execs, so nothing it forks can start outside it.
public enum ProcessSpawner {
    /// Starts the process; exec failures come back as a `SpawnError` (the
    /// failed child is already reaped). The caller must reap the child
    /// (`ProcessControl.reap`) once its pidfd becomes readable.
    public static func spawn(_ request: SpawnRequest) throws -> SpawnedProcess {
        guard let executable = request.resolvedExecutable() else {
            throw SpawnError(name: request.name, step: .resolve, path: request.executable, errno: .noSuchFileOrDirectory)
        }
        let null = try open("/dev/null", O_RDWR, request, step: .prepare)
        defer { _ = close(null) }
        let cgroupProcs = try request.cgroup.map { try open($0.file("cgroup.procs"), O_WRONLY, request, step: .cgroup) }
        defer { if let cgroupProcs { _ = close(cgroupProcs) } }

        var strings = CStrings()
        var spawn = vigil_spawn_request(
            path: strings.copy(executable),
            argv: strings.copy([request.executable] + request.arguments),
            envp: strings.copy(request.environment.map { "\($0.key)=\($0.value)" }),
            working_directory: request.workingDirectory.map { strings.copy($0) } ?? nil,
            cgroup_procs_fd: cgroupProcs ?? -1,
            stdin_fd: request.input ?? null,
            output_fd: request.output ?? null,
            new_session: request.newSession ? 1 : 0,
            change_credentials: request.credentials == nil ? 0 : 1,
            uid: request.credentials?.uid ?? 0,
            gid: request.credentials?.gid ?? 0,
            groups: nil,
            group_count: Int32(request.credentials?.groups.count ?? 0))
        var pid: pid_t = 0
        var failedStep = VIGIL_SPAWN_PREPARE
        let groups = request.credentials?.groups ?? []
        let error = withExtendedLifetime(strings) {
            groups.withUnsafeBufferPointer { groups in
                spawn.groups = groups.baseAddress
                return vigil_spawn(&spawn, &pid, &failedStep)
            }
        }
        guard error == 0 else {
            throw SpawnError(name: request.name, failed: failedStep, request: request,
                             executable: executable, errno: Errno(rawValue: error))
        }
        return SpawnedProcess(pid: pid, pidfd: vigil_pidfd_open(pid))
    }

    private static func open(_ path: String, _ flags: Int32, _ request: SpawnRequest, step: SpawnError.Step) throws -> Int32 {
        let fd = Glibc.open(path, flags | O_CLOEXEC)
        guard fd >= 0 else {
            throw SpawnError(name: request.name, step: step, path: path, errno: Errno(rawValue: errno))
        }
        return fd
    }
}

/// C copies of the request's strings, freed when this goes out of scope, so
/// `vigil_spawn_request` can point at them without nested closures.
private struct CStrings: ~Copyable {
    private var strings: [UnsafeMutablePointer<CChar>] = []
    private var arrays: [UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>] = []

    mutating func copy(_ string: String) -> UnsafeMutablePointer<CChar> {
        let copy = strdup(string)!
        strings.append(copy)
        return copy
    }

    /// A NULL-terminated array, as argv and envp.
    mutating func copy(_ strings: [String]) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> {
        let array = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: strings.count + 1)
        arrays.append(array)
        for (index, string) in strings.enumerated() { array[index] = copy(string) }
        array[strings.count] = nil
        return array
    }

    deinit {
        for string in strings { free(string) }
        for array in arrays { array.deallocate() }
    }
}

import Glibc
import Testing
import VigilSystem

@Suite struct ProcessSpawnerTests {
    @Test func childHasEmptySignalMaskAndDefaultDispositions() async throws {
        // Make the spawning thread as hostile as a concurrency worker can be.
        let process = try await Task.detached {
            var all = sigset_t()
            var previous = sigset_t()
            sigfillset(&all)
            pthread_sigmask(SIG_SETMASK, &all, &previous)
            defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
            let oldHandler = signal(SIGUSR2, SIG_IGN)
            defer { signal(SIGUSR2, oldHandler) }
            return try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"]))
        }.value
        defer { close(process.pidfd) }

        let status = "/proc/\(process.pid)/status"
        #expect(procStatusField(status, "SigBlk") == "0000000000000000")
        #expect(procStatusField(status, "SigIgn") == "0000000000000000")

        try ProcessControl.sendSignal(SIGTERM, toPidfd: process.pidfd)
        #expect(waitForExit(process))
        #expect(try ProcessControl.reap(process) == .signaled(SIGTERM))
    }

    @Test func outputGoesToTheGivenFileAndOnlyStdioIsInherited() async throws {
        try await withTemporaryDirectory { directory in
            let log = directory + "/out.log"
            let fd = open(log, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            defer { close(fd) }
            let process = try ProcessSpawner.spawn(SpawnRequest(
                executable: "/bin/sh",
                arguments: ["-c", "echo out; echo err >&2; ls /proc/self/fd; read line || echo stdin-empty"],
                output: fd))
            defer { close(process.pidfd) }
            #expect(waitForExit(process))
            #expect(try ProcessControl.reap(process) == .exited(0))
            // ls's own directory fd is 3; nothing else of ours may leak in.
            #expect(contents(of: log) == "out\nerr\n0\n1\n2\n3\nstdin-empty\n")
        }
    }

    /// The child becomes the given user, groups first, before its working
    /// directory (entered as that user) and exec; it cannot get root back.
    @Test(.enabled(if: geteuid() == 0, "needs root to change user"))
    func credentialsAreDroppedBeforeExec() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory, 0o755) == 0)
            let log = directory + "/out.log"
            let fd = open(log, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            defer { close(fd) }
            let process = try ProcessSpawner.spawn(SpawnRequest(
                executable: "/bin/sh",
                arguments: ["-c", "echo $(id -u) $(id -g) $(id -G) $(pwd); grep -E '^(Uid|Gid):' /proc/self/status | tr -s '\t' ' '"],
                workingDirectory: directory, output: fd,
                credentials: SpawnCredentials(uid: 65534, gid: 65533, groups: [65532, 65531])))
            defer { close(process.pidfd) }
            #expect(waitForExit(process))
            #expect(try ProcessControl.reap(process) == .exited(0))
            #expect(contents(of: log) == "65534 65533 65533 65531 65532 \(directory)\nUid: 65534 65534 65534 65534\nGid: 65533 65533 65533 65533\n")
        }
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to change user"))
    func aWorkingDirectoryTheUserCannotEnterFailsTheSpawn() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory, 0o700) == 0)
            #expect(throws: SpawnError.self) {
                try ProcessSpawner.spawn(SpawnRequest(
                    executable: "/bin/true", workingDirectory: directory,
                    credentials: SpawnCredentials(uid: 65534, gid: 65534)))
            }
        }
    }

    @Test func environmentArgumentsAndWorkingDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let log = directory + "/out.log"
            let fd = open(log, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            defer { close(fd) }
            let process = try ProcessSpawner.spawn(SpawnRequest(
                executable: "sh",
                arguments: ["-c", "echo \"$0|$1|$VIGIL_TEST|$(pwd)\"", "zero", "one"],
                environment: ["VIGIL_TEST": "yes", "PATH": "/usr/bin:/bin"],
                workingDirectory: directory,
                output: fd))
            defer { close(process.pidfd) }
            #expect(waitForExit(process))
            #expect(try ProcessControl.reap(process) == .exited(0))
            #expect(contents(of: log) == "zero|one|yes|\(directory)\n")
        }
    }

    @Test func execFailureIsAClearError() throws {
        let request = SpawnRequest(executable: "/nonexistent/vigil-app", name: "demo")
        let error = #expect(throws: SpawnError.self) { try ProcessSpawner.spawn(request) }
        #expect(error?.step == .exec)
        #expect(error?.errno == .noSuchFileOrDirectory)
        #expect(error?.description == "cannot start demo: /nonexistent/vigil-app: No such file or directory")
    }

    @Test func otherSetupFailuresNameTheStep() throws {
        let notFound = #expect(throws: SpawnError.self) {
            try ProcessSpawner.spawn(SpawnRequest(executable: "vigil-no-such-command"))
        }
        #expect(notFound?.step == .resolve)
        #expect(notFound?.description == "cannot start vigil-no-such-command: vigil-no-such-command: command not found in PATH")

        let badDirectory = #expect(throws: SpawnError.self) {
            try ProcessSpawner.spawn(SpawnRequest(executable: "/bin/true", workingDirectory: "/nonexistent"))
        }
        #expect(badDirectory?.step == .workingDirectory)
        #expect(badDirectory?.description.contains("/nonexistent") == true)

        let badCgroup = #expect(throws: SpawnError.self) {
            try ProcessSpawner.spawn(SpawnRequest(executable: "/bin/true", cgroup: Cgroup(path: "/nonexistent/cgroup")))
        }
        #expect(badCgroup?.step == .cgroup)
    }

    @Test func newSessionAllowsTheStopContinueFallback() async throws {
        let process = try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"], newSession: true))
        defer { close(process.pidfd) }
        #expect(ProcessControl.sessionID(of: process.pid) == process.pid)

        try ProcessControl.sendSignal(SIGSTOP, toProcessGroup: process.pid)
        #expect(await eventually { ProcessControl.processState(process.pid) == "T" })
        try ProcessControl.sendSignal(SIGCONT, toProcessGroup: process.pid)
        #expect(await eventually { ProcessControl.processState(process.pid) == "S" })
        #expect(try ProcessControl.reap(process) == nil)

        try ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd)
        #expect(waitForExit(process))
        #expect(try ProcessControl.reap(process) == .signaled(SIGKILL))
        #expect(ProcessControl.processState(process.pid) == nil)
        #expect(ProcessControl.sessionID(of: process.pid) == nil)
    }

    @Test func nonChildrenAreReapedAsUnknownOnceTheyEnd() async throws {
        try await withTemporaryDirectory { directory in
            // A grandchild is not our child, like an app adopted after a restart.
            let log = directory + "/pid"
            let fd = open(log, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            defer { close(fd) }
            let shell = try ProcessSpawner.spawn(SpawnRequest(
                executable: "/bin/sh", arguments: ["-c", "sleep 300 & echo $!"], output: fd))
            defer { close(shell.pidfd) }
            #expect(waitForExit(shell))
            #expect(try ProcessControl.reap(shell) == .exited(0))
            let pid = try #require(pid_t(contents(of: log).split(separator: "\n").first ?? ""))

            let adopted = SpawnedProcess(pid: pid, pidfd: try ProcessControl.pidfdOpen(pid))
            defer { close(adopted.pidfd) }
            #expect(try ProcessControl.reap(adopted) == nil)
            try ProcessControl.sendSignal(SIGKILL, toPidfd: adopted.pidfd)
            #expect(waitForExit(adopted))
            #expect(try ProcessControl.reap(adopted) == .unknown)
        }
    }
}

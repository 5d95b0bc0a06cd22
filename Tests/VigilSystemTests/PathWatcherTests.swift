import Glibc
import Testing
import VigilSystem

@Suite struct PathWatcherTests {
    /// A socket path whose directories do not exist yet: the watcher moves down
    /// as they appear and calls when the file itself appears.
    @Test func callsWhenThePathAppearsBelowMissingDirectories() async throws {
        try await withTemporaryDirectory { root in
            try await withRunningLoop { loop in
                let path = root + "/run/dbus/system_bus_socket"
                let calls = Recorder<Bool>()
                let watcher = try PathWatcher(path: path, on: loop) { calls.append(loop.isInLoopThread) }
                defer { watcher.cancel() }
                #expect(mkdir(root + "/run", 0o755) == 0)
                #expect(mkdir(root + "/run/dbus", 0o755) == 0)
                try await Task.sleep(for: .milliseconds(100))
                #expect(calls.snapshot.isEmpty, "directories on the way are not the path")
                let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
                #expect(fd >= 0)
                close(fd)
                #expect(await calls.wait(forCount: 1) == [true])
                // A change of its attributes (a listening socket's chmod) calls again.
                #expect(chmod(path, 0o666) == 0)
                #expect(await calls.wait(forCount: 2).count == 2)
            }
        }
    }

    /// The directory is removed and made again: the watch follows it.
    @Test func followsTheDirectoryWhenItIsRemovedAndMadeAgain() async throws {
        try await withTemporaryDirectory { root in
            try await withRunningLoop { loop in
                #expect(mkdir(root + "/bus", 0o755) == 0)
                let path = root + "/bus/socket"
                let calls = Recorder<Int>()
                let watcher = try PathWatcher(path: path, on: loop) { calls.append(1) }
                defer { watcher.cancel() }
                #expect(rmdir(root + "/bus") == 0)
                try await Task.sleep(for: .milliseconds(100))
                #expect(mkdir(root + "/bus", 0o755) == 0)
                try await Task.sleep(for: .milliseconds(100))
                #expect(calls.snapshot.isEmpty)
                close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
                #expect(await calls.wait(forCount: 1).count == 1)
            }
        }
    }

    /// A path that exists when the watch begins is reported once, so an
    /// attempt that failed just before the watch existed is made again.
    @Test func reportsAnExistingPathOnceAndNothingAfterCancel() async throws {
        try await withTemporaryDirectory { root in
            try await withRunningLoop { loop in
                let path = root + "/socket"
                close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
                let calls = Recorder<Int>()
                let watcher = try PathWatcher(path: path, on: loop) { calls.append(1) }
                #expect(await calls.wait(forCount: 1).count == 1)
                watcher.cancel()
                #expect(chmod(path, 0o600) == 0)
                unlink(path)
                close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
                try await Task.sleep(for: .milliseconds(100))
                #expect(calls.snapshot.count == 1)
            }
        }
    }
}

@Suite struct SignalFDTests {
    /// A blocked signal is read from the descriptor, not delivered.
    @Test func readsABlockedSignal() throws {
        let signals = try SignalFD(signals: [SIGUSR2])
        defer {
            signals.close()
            // This test thread is the runner's: give it its mask back.
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, SIGUSR2)
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
        }
        #expect(signals.read().isEmpty)
        // To this thread: the mask is per thread, and this one blocks SIGUSR2.
        #expect(pthread_kill(pthread_self(), SIGUSR2) == 0)
        #expect(signals.read() == [SIGUSR2])
        #expect(signals.read().isEmpty)
    }
}

@Suite struct EventLoopTaskExecutorTests {
    /// Nonisolated async code of a `loop.task` runs on the loop, not on the
    /// global concurrent executor.
    @Test func nonisolatedCodeOfALoopTaskRunsOnTheLoop() async throws {
        try await withRunningLoop { loop in
            let seen = Recorder<Bool>()
            loop.task {
                seen.append(loop.isInLoopThread)
                await nonisolatedStep(loop, seen)
                seen.append(loop.isInLoopThread)
            }
            #expect(await seen.wait(forCount: 3) == [true, true, true])
        }
    }
}

private func nonisolatedStep(_ loop: EventLoop, _ seen: Recorder<Bool>) async {
    seen.append(loop.isInLoopThread)
}

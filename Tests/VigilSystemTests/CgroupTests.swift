import Glibc
import Testing
import VigilSystem

@Suite struct CgroupDiscoveryTests {
    @Test func unifiedMountPointIsACgroup2Root() throws {
        let mount = try #require(Cgroup.unifiedMountPoint(), "no cgroup2 mount in /proc/self/mountinfo")
        #expect(Cgroup(path: mount).exists)
    }

    @Test func ownCgroupIsARelativePath() throws {
        #expect(try Cgroup.ofSelf().hasPrefix("/"))
        #expect(throws: SystemError.self) { try Cgroup.ofProcess(-1) }
    }
}

@Suite(.enabled(if: TestCgroups.isAvailable, "\(TestCgroups.unavailableReason ?? "")"))
struct CgroupTests {
    @Test func createIsIdempotentAndListsChildren() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            _ = try Cgroup.create(app.path)
            #expect(try base.children() == ["app"])
            #expect(try app.processes().isEmpty)
            #expect(try !app.isPopulated())
            try app.remove()
            #expect(!app.exists)
        }
    }

    @Test func freezeThawAndKillAProcessSpawnedIntoACgroup() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            let process = try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"], cgroup: app))
            defer { close(process.pidfd) }

            #expect(try Cgroup.ofProcess(process.pid) == TestCgroups.relativePath(app))
            #expect(try app.processes() == [process.pid])
            #expect(try app.isPopulated())

            try app.freeze()
            #expect(try app.waitUntil(frozen: true, timeout: .seconds(5)))
            #expect(try app.events()["frozen"] == 1)
            #expect(try app.isFrozen())
            #expect(ProcessControl.processState(process.pid) == "S")

            try app.thaw()
            #expect(try app.waitUntil(frozen: false, timeout: .seconds(5)))

            try app.freeze()  // kill must work on a frozen group too
            try app.kill()
            #expect(try app.waitUntil(populated: false, timeout: .seconds(5)))
            #expect(try app.processes().isEmpty)
            #expect(waitForExit(process))
            #expect(try ProcessControl.reap(process) == .signaled(SIGKILL))
            try app.remove()
        }
    }

    /// The daemon keeps each app's `cgroup.freeze` open (`FreezerFile`): one
    /// fd must freeze and thaw any number of times, and fail once the group
    /// is gone (the daemon then reopens it), never write into nothing.
    @Test func aFreezerFileHeldOpenFreezesAndThawsAgainAndAgain() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            let process = try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"], cgroup: app))
            defer { close(process.pidfd) }
            let freezer = try FreezerFile(app)
            for _ in 0..<3 {
                try freezer.set(frozen: true)
                #expect(try app.waitUntil(frozen: true, timeout: .seconds(5)))
                try freezer.set(frozen: false)
                #expect(try app.waitUntil(frozen: false, timeout: .seconds(5)))
            }
            try app.kill()
            #expect(waitForExit(process))
            _ = try ProcessControl.reap(process)
            #expect(try app.waitUntil(populated: false, timeout: .seconds(5)))
            try app.remove()
            #expect(throws: SystemError.self) { try freezer.set(frozen: true) }
            freezer.close()
            #expect(throws: SystemError.self) { try freezer.set(frozen: false) }
        }
    }

    @Test func killEndsGrandchildrenToo() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            let process = try ProcessSpawner.spawn(SpawnRequest(
                executable: "/bin/sh", arguments: ["-c", "sleep 300 & wait"], cgroup: app))
            defer { close(process.pidfd) }
            #expect(try await eventually { try app.processes().count == 2 })
            let grandchild = try #require(try app.processes().first { $0 != process.pid })

            try app.kill()
            #expect(try app.waitUntil(populated: false, timeout: .seconds(5)))
            #expect(waitForExit(process))
            #expect(try ProcessControl.reap(process) == .signaled(SIGKILL))
            // Reparented to init: gone, or a zombie until init reaps it.
            #expect(await eventually { [nil, "Z"].contains(ProcessControl.processState(grandchild)) })
            try app.remove()
        }
    }

    @Test func cgroupEventsWakeEpoll() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            let process = try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"], cgroup: app))
            defer { close(process.pidfd) }
            let eventsFD = try app.openEvents()
            defer { close(eventsFD) }
            var ready = pollfd(fd: eventsFD, events: Int16(POLLPRI), revents: 0)
            #expect(poll(&ready, 1, 0) == 0, "quiet until something changes")

            try await withRunningLoop { loop in
                let frozen = Recorder<Int>()
                let watch = try loop.watch(eventsFD, for: .priority) { _ in
                    // Reading acknowledges the change; otherwise the watch would keep firing.
                    if let value = try? Cgroup.readEvents(from: eventsFD)["frozen"] { frozen.append(value) }
                }
                try app.freeze()
                #expect(await eventually { frozen.snapshot.last == 1 }, "\(frozen.snapshot)")
                try app.thaw()
                #expect(await eventually { frozen.snapshot.last == 0 }, "\(frozen.snapshot)")
                try await Task.sleep(for: .milliseconds(50))
                let settled = frozen.snapshot.count
                try await Task.sleep(for: .milliseconds(100))
                #expect(frozen.snapshot.count == settled, "no events without changes")
                loop.removeWatch(watch)
            }
            try app.kill()
            #expect(waitForExit(process))
            _ = try ProcessControl.reap(process)
        }
    }

    @Test func removeFailsWhilePopulated() async throws {
        try await TestCgroups.withBase { base in
            let app = try Cgroup.create(base.child("app").path)
            let process = try ProcessSpawner.spawn(SpawnRequest(executable: "sleep", arguments: ["300"], cgroup: app))
            defer { close(process.pidfd) }
            #expect { try app.remove() } throws: { ($0 as? SystemError)?.errno == .resourceBusy }
            try ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd)
            #expect(waitForExit(process))
            _ = try ProcessControl.reap(process)
            #expect(try app.waitUntil(populated: false, timeout: .seconds(5)))
            try app.remove()
        }
    }
}

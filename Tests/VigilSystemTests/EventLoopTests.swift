import Glibc
import Testing
import VigilSystem

@Suite struct EventLoopTests {
    @Test func watchReportsReadabilityOnTheLoopThread() async throws {
        try await withRunningLoop { loop in
            let (reader, writer) = try UnixStream.pair()
            let seen = Recorder<Bool>()
            let id = try loop.watch(reader.fd, for: .readable) { events in
                _ = try? reader.read(maxBytes: 1)
                seen.append(events.contains(.readable) && loop.isInLoopThread)
            }
            try writer.writeAll([1, 2])
            #expect(await seen.wait(forCount: 2) == [true, true])
            loop.removeWatch(id)
        }
    }

    @Test func watchReportsHangupAndCanRemoveItself() async throws {
        try await withRunningLoop { loop in
            let (reader, writer) = try UnixStream.pair()
            let seen = Recorder<IOEvents>()
            let ownID = Locked<WatchID?>(nil)
            let id = try loop.watch(reader.fd, for: .hangup) { events in
                seen.append(events)
                // Hang-up stays reported (level-triggered) until the watch goes.
                if let id = ownID.withLock({ $0 }) { loop.removeWatch(id) }
            }
            ownID.withLock { $0 = id }
            writer.close()
            #expect(await seen.wait(forCount: 1).first?.contains(.hangup) == true)
            try await Task.sleep(for: .milliseconds(50))
            #expect(seen.snapshot.count == 1)
        }
    }

    @Test func watchRemovedInTheSameBatchIsNeverCalled() async throws {
        try await withRunningLoop { loop in
            let first = try UnixStream.pair()
            let second = try UnixStream.pair()
            // Both readable before the loop looks, so one epoll_wait returns both.
            try first.1.writeAll([1])
            try second.1.writeAll([1])
            let calls = Recorder<Int>()
            let ids = Locked<[WatchID]>([])
            loop.execute {
                for (index, fd) in [first.0.fd, second.0.fd].enumerated() {
                    // Never reads: only removal stops this level-triggered watch.
                    let id = try! loop.watch(fd, for: .readable) { _ in
                        calls.append(index)
                        for id in ids.withLock({ $0 }) { loop.removeWatch(id) }
                    }
                    ids.withLock { $0.append(id) }
                }
            }
            _ = await calls.wait(forCount: 1)
            try await Task.sleep(for: .milliseconds(100))
            #expect(calls.snapshot.count == 1)
        }
    }

    @Test func updateWatchSwitchesEvents() async throws {
        try await withRunningLoop { loop in
            let (reader, writer) = try UnixStream.pair()
            let seen = Recorder<IOEvents>()
            let id = try loop.watch(reader.fd, for: []) { seen.append($0) }
            defer { withExtendedLifetime(writer) {} }
            try await Task.sleep(for: .milliseconds(50))
            #expect(seen.snapshot.isEmpty)
            try loop.updateWatch(id, for: .writable)
            #expect(await seen.wait(forCount: 1).first?.contains(.writable) == true)
            loop.removeWatch(id)
        }
    }

    @Test func timersFireInDeadlineOrder() async throws {
        try await withRunningLoop { loop in
            let fired = Recorder<String>()
            let now = MonotonicInstant.now()
            for (label, milliseconds) in [("30", 30), ("10", 10), ("15a", 15), ("15b", 15), ("20", 20)] {
                loop.schedule(at: now.advanced(by: .milliseconds(milliseconds))) {
                    #expect(MonotonicInstant.now() >= now.advanced(by: .milliseconds(milliseconds)))
                    fired.append(label)
                }
            }
            loop.schedule(at: MonotonicInstant(nanoseconds: 0)) { fired.append("past") }
            #expect(await fired.wait(forCount: 6) == ["past", "10", "15a", "15b", "20", "30"])
        }
    }

    @Test func cancelledTimersNeverFire() async throws {
        try await withRunningLoop { loop in
            let fired = Recorder<String>()
            let cancelled = loop.schedule(after: .milliseconds(20)) { fired.append("cancelled") }
            loop.cancelTimer(cancelled)
            // Two timers due in one batch: the first cancels the second.
            let deadline = MonotonicInstant.now().advanced(by: .milliseconds(30))
            let victim = Locked<TimerID?>(nil)
            loop.schedule(at: deadline) {
                fired.append("first")
                if let id = victim.withLock({ $0 }) { loop.cancelTimer(id) }
            }
            victim.withLock { $0 = loop.schedule(at: deadline) { fired.append("victim") } }
            loop.schedule(at: deadline.advanced(by: .milliseconds(30))) { fired.append("last") }
            _ = await fired.wait(forCount: 2)
            try await Task.sleep(for: .milliseconds(50))
            #expect(fired.snapshot == ["first", "last"])
        }
    }

    @Test func executeFromManyThreadsRunsEverythingInOrderOnTheLoop() async throws {
        try await withRunningLoop { loop in
            let perSender = 500
            let received = Recorder<(sender: Int, index: Int, onLoop: Bool)>()
            await withTaskGroup(of: Void.self) { group in
                for sender in 0..<4 {
                    group.addTask {
                        for index in 0..<perSender {
                            loop.execute { received.append((sender, index, loop.isInLoopThread)) }
                        }
                    }
                }
            }
            let all = await received.wait(forCount: 4 * perSender)
            #expect(all.count == 4 * perSender)
            #expect(all.allSatisfy { $0.onLoop })
            for sender in 0..<4 {
                #expect(all.filter { $0.sender == sender }.map(\.index) == Array(0..<perSender))
            }
        }
    }

    @Test func idleLoopDoesNotWakeUp() async throws {
        try await withRunningLoop { loop in
            let (reader, writer) = try UnixStream.pair()
            let watch = try loop.watch(reader.fd, for: .readable) { _ in }
            defer { withExtendedLifetime(writer) {} }
            loop.schedule(after: .seconds(3600)) {}
            let cancelled = loop.schedule(after: .milliseconds(200)) {}
            loop.cancelTimer(cancelled)
            // Let the loop settle into epoll_wait first.
            let ready = Recorder<Void>()
            loop.execute { ready.append(()) }
            _ = await ready.wait(forCount: 1)
            let tid = try #require(loop.threadID)
            let status = "/proc/self/task/\(tid)/status"
            let before = try #require(procStatusField(status, "voluntary_ctxt_switches").flatMap { Int($0) })
            try await Task.sleep(for: .seconds(1))
            let after = try #require(procStatusField(status, "voluntary_ctxt_switches").flatMap { Int($0) })
            #expect(after - before == 0, "loop thread woke \(after - before) times while idle")
            loop.removeWatch(watch)
        }
    }

    @Test func stopFromAHandlerEndsTheThread() async throws {
        let loop = try EventLoop(name: "stopper")
        loop.start()
        loop.execute { loop.stop() }
        loop.waitUntilStopped()
        loop.stop()  // idempotent
        #expect(!loop.isInLoopThread)
    }
}

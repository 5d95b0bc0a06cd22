import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Engine: waking and background tasks")
struct EngineWakeAndTaskTests {
    let id = Harness.plain

    /// A suspended app woken by a test event at the returned instant.
    func woken(_ h: Harness) throws -> UInt64 {
        try h.suspended(id)
        h.advance(100)
        h.host.clear()
        let result = try h.deliver()
        #expect(result.disposition == .woke)
        return h.now
    }

    @Test func testEventWakesSuspendedAppForTheWakeBudget() throws {
        let h = Harness()
        try h.suspended(id)
        h.advance(100)
        h.host.clear()
        let t1 = h.now
        let result = try h.deliver()
        #expect(result.seq == 1)
        #expect(result.disposition == .woke)

        #expect(h.host.calls.first == .thaw(id))
        #expect(h.state(id) == .background)
        #expect(h.app(id).wakes == 1)
        #expect(h.host.deadlines(to: id) == [t1 + 180 * second])
        #expect(h.host.events(to: id).map(\.seq) == [1])
        #expect(h.host.events(to: id).first?.redelivered == false)
        let wake = try #require(h.host.decisions(.wake, for: id).first)
        #expect(wake.state == .background)
        // The deadline goes out before the event, and both after the thaw.
        #expect(try #require(h.host.index(of: .thaw(id))) < h.host.index(of: .send(.deadline(t1 + 180 * second), to: id))!)
        #expect(h.engine.nextDeadline == t1 + 10 * second)

        h.advance(to: t1 + 10 * second - 1)
        #expect(h.state(id) == .background)
        #expect(h.host.freezes(id) == 0)
        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
        #expect(h.host.decisions(.suspend, for: id).first?.reason.contains("processing window") == true)

        // A second wake is counted too.
        h.advance(1)
        #expect(try h.deliver().disposition == .woke)
        #expect(h.app(id).wakes == 2)
    }

    @Test func wakeWithoutAnEventGivesAFreshWindowOnlyToASuspendedApp() throws {
        let h = Harness()
        #expect(h.engine.wake(id, reason: "test", now: h.now) == false)  // not running
        try h.suspended(id)
        h.advance(100)
        h.host.clear()
        let t1 = h.now
        #expect(h.engine.wake(id, reason: "data held back", now: t1))
        #expect(h.host.calls.first == .thaw(id))
        #expect(h.state(id) == .background)
        #expect(h.app(id).wakes == 1)
        #expect(h.host.decisions(.wake, for: id).first?.reason.contains("data held back") == true)
        #expect(h.engine.nextDeadline == t1 + 10 * second)
        #expect(h.engine.wake(id, reason: "again", now: t1) == false)  // already awake
        #expect(h.host.thaws(id) == 1)
        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .suspended)
    }

    @Test func eventWhileRunningInBackgroundExtendsTheWindow() throws {
        let h = Harness()
        let t1 = try woken(h)
        h.advance(8)
        #expect(try h.deliver().disposition == .delivered)
        #expect(h.host.thaws(id) == 1)
        #expect(h.engine.nextDeadline == t1 + 18 * second)
        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .background)
        h.advance(to: t1 + 18 * second)
        #expect(h.state(id) == .suspended)
    }

    @Test func finishedProcessingSuspendsAtOnce() throws {
        let h = Harness()
        _ = try woken(h)
        h.advance(1)
        h.engine.acknowledge(id, upTo: .max, now: h.now)
        h.engine.finishedProcessing(id, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
        #expect(h.host.decisions(.suspend, for: id).first?.reason.contains("finished") == true)
        #expect(h.engine.nextDeadline == nil)
        // In the foreground it means nothing.
        try h.engine.moveToForeground(id, now: h.now)
        h.engine.finishedProcessing(id, now: h.now)
        #expect(h.state(id) == .active)
    }

    @Test func finishedProcessingWithATaskWaitsForTheTask() throws {
        let h = Harness()
        _ = try woken(h)
        let task = h.engine.beginBackgroundTask(id, name: "flush", now: h.now)
        h.engine.acknowledge(id, upTo: .max, now: h.now)
        h.engine.finishedProcessing(id, now: h.now)
        #expect(h.state(id) == .background)
        h.advance(1)
        try h.engine.endBackgroundTask(id, task: task, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
    }

    @Test func heldTaskOutlivesBudgetThenExpiresAndIsKilledAtTheLimit() throws {
        let h = Harness()
        let t1 = try woken(h)
        let task = h.engine.beginBackgroundTask(id, name: "upload", now: h.now)
        #expect(task > 0)
        #expect(h.app(id).tasks == [BackgroundTaskInfo(id: task, name: "upload")])
        #expect(h.host.decisions(.extend, for: id).count == 1)

        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .background)
        #expect(h.host.freezes(id) == 0)
        #expect(h.engine.nextDeadline == t1 + 175 * second)

        h.advance(to: t1 + 175 * second - 1)
        #expect(h.host.expiring(to: id).isEmpty)
        h.advance(to: t1 + 175 * second)
        #expect(h.host.expiring(to: id) == [TaskExpiring(task: task, name: "upload")])
        #expect(h.host.decisions(.expire, for: id).first?.reason.contains("upload") == true)
        #expect(h.engine.nextDeadline == t1 + 180 * second)
        h.advance(1)
        #expect(h.host.expiring(to: id).count == 1)  // once only

        h.advance(to: t1 + 180 * second - 1)
        #expect(h.host.kills(id) == 0)
        h.advance(to: t1 + 180 * second)
        #expect(h.host.kills(id) == 1)
        #expect(h.host.freezes(id) == 0)
        #expect(h.state(id) == .notRunning)
        let kill = try #require(h.host.decisions(.terminate, for: id).last)
        #expect(kill.reason.contains("watchdog"))
        #expect(kill.reason.contains("'upload'"))
        #expect(h.engine.nextDeadline == nil)

        // The exit it caused is not a crash and relaunches nothing.
        let decisionsBefore = h.host.decisions.count
        h.engine.processExited(id, pid: 100, status: "signal 9", crashed: true, now: h.now)
        #expect(h.host.decisions.count == decisionsBefore)
        #expect(h.host.starts.isEmpty)
        // The system ended it, not the user: a later event relaunches it.
        #expect(!h.app(id).forceQuit)
        h.advance(30)
        #expect(try h.deliver().disposition == .launched)
        #expect(h.host.starts.first?.launch == LaunchOptions(reason: .event, eventKind: "test"))
    }

    @Test func expirationIsSentForEveryHeldTask() throws {
        let h = Harness()
        let t1 = try woken(h)
        let a = h.engine.beginBackgroundTask(id, name: "a", now: h.now)
        let b = h.engine.beginBackgroundTask(id, name: "b", now: h.now)
        #expect(a != b && a > 0 && b > 0)
        h.advance(to: t1 + 175 * second)
        #expect(h.host.expiring(to: id) == [TaskExpiring(task: a, name: "a"), TaskExpiring(task: b, name: "b")])
        try h.engine.endBackgroundTask(id, task: a, now: h.now)
        h.advance(to: t1 + 180 * second)
        let kill = try #require(h.host.decisions(.terminate, for: id).last)
        #expect(kill.reason.contains("'b'"))
        #expect(!kill.reason.contains("'a'"))
    }

    @Test func endingTheLastTaskAfterTheWindowSuspendsAtOnce() throws {
        let h = Harness()
        _ = try woken(h)
        let a = h.engine.beginBackgroundTask(id, name: "a", now: h.now)
        let b = h.engine.beginBackgroundTask(id, name: "b", now: h.now)
        h.advance(30)
        try h.engine.endBackgroundTask(id, task: a, now: h.now)
        #expect(h.state(id) == .background)
        #expect(errorCode { try h.engine.endBackgroundTask(id, task: a, now: h.now) } == .invalidArgument)
        try h.engine.endBackgroundTask(id, task: b, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
        #expect(h.host.decisions(.suspend, for: id).first?.reason.contains("task") == true)
    }

    @Test func endingTheLastTaskWithinTheWindowWaitsForTheWindow() throws {
        let h = Harness()
        let t1 = try woken(h)
        let task = h.engine.beginBackgroundTask(id, name: "short", now: h.now)
        h.advance(2)
        try h.engine.endBackgroundTask(id, task: task, now: h.now)
        #expect(h.state(id) == .background)
        #expect(h.engine.nextDeadline == t1 + 10 * second)
        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .suspended)
    }

    @Test func endingTheLastTaskExactlyAtTheWindowEndSuspends() throws {
        let h = Harness()
        let t1 = try woken(h)
        let task = h.engine.beginBackgroundTask(id, name: "edge", now: h.now)
        h.tick(nanos: t1 + 10 * second - h.now)  // the timer has not fired yet
        try h.engine.endBackgroundTask(id, task: task, now: h.now)
        #expect(h.state(id) == .suspended)
    }

    @Test func taskBegunInTheForegroundHoldsTheAppAfterTheGrace() throws {
        let h = Harness()
        try h.active(id)
        let task = h.engine.beginBackgroundTask(id, name: "save", now: h.now)
        #expect(task > 0)
        #expect(h.host.decisions(.extend, for: id).isEmpty)  // nothing to extend in the foreground
        let t0 = h.now
        try h.engine.moveToBackground(id, now: t0)
        h.advance(6)
        #expect(h.state(id) == .background)
        #expect(h.engine.nextDeadline == t0 + 175 * second)
        try h.engine.endBackgroundTask(id, task: task, now: h.now)
        #expect(h.state(id) == .suspended)
    }

    @Test func beginTooCloseToTheLimitReturnsInvalid() throws {
        let h = Harness()
        let t1 = try woken(h)
        #expect(h.engine.beginBackgroundTask(id, name: "held", now: h.now) > 0)
        // Just more than the warning left: granted.
        h.tick(nanos: t1 + 175 * second - 1 - h.now)
        #expect(h.engine.beginBackgroundTask(id, name: "late", now: h.now) > 0)
        // Exactly the warning left: refused.
        h.tick(nanos: 1)
        #expect(h.engine.beginBackgroundTask(id, name: "too-late", now: h.now) == 0)
        #expect(h.host.decisions(.refuse, for: id).first?.reason.contains("too-late") == true)
        #expect(h.app(id).tasks.map(\.name) == ["held", "late"])
    }

    @Test func noTasksForSuspendedStoppedOrTerminatingApps() throws {
        let h = Harness()
        #expect(h.engine.beginBackgroundTask(id, name: "x", now: h.now) == 0)
        try h.suspended(id)
        #expect(h.engine.beginBackgroundTask(id, name: "x", now: h.now) == 0)
        try h.active(Harness.exits)
        try h.engine.moveToBackground(Harness.exits, now: h.now)
        #expect(h.engine.beginBackgroundTask(Harness.exits, name: "x", now: h.now) == 0)
    }

    @Test func finishingWithUnacknowledgedEventsWaitsForTheirAcknowledgement() throws {
        let h = Harness()
        _ = try woken(h)
        #expect(try h.deliver().disposition == .delivered)
        h.engine.finishedProcessing(id, now: h.now)
        #expect(h.state(id) == .background)
        h.engine.acknowledge(id, upTo: 1, now: h.now)
        #expect(h.state(id) == .background)
        h.engine.acknowledge(id, upTo: 2, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.host.decisions(.suspend, for: id).last?.reason.contains("acknowledged") == true)
    }

    @Test func everyWakeIsAFreshStretch() throws {
        let h = Harness()
        _ = try woken(h)
        h.engine.acknowledge(id, upTo: .max, now: h.now)
        h.engine.finishedProcessing(id, now: h.now)
        h.advance(500)
        let t2 = h.now
        #expect(try h.deliver().disposition == .woke)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == 180)
        #expect(h.host.deadlines(to: id).last == t2 + 180 * second)
    }

    /// An app slower than its window is suspended holding events it was sent
    /// and has not acknowledged. It is not woken again for those (as iOS would
    /// not): they are in its hands, frozen with it, and it goes on with them the
    /// next time it runs. Only new work wakes it, once per arrival, so an app
    /// that hangs is never woken in a loop.
    @Test func slowAppIsNotWokenAgainForEventsItWasSent() throws {
        let h = Harness()
        let t1 = try woken(h)  // connected all along
        for _ in 2...300 { try h.deliver() }
        #expect(h.host.eventSeqs(to: id).count == 300)
        h.engine.acknowledge(id, upTo: 10, now: h.now)
        h.advance(to: t1 + 10 * second)  // the window is over
        #expect(h.state(id) == .suspended)
        #expect(h.app(id).queue.unacknowledgedCount == 290)
        #expect(h.host.decisions(.suspend, for: id).last?.reason.contains("processing window over") == true)

        // However long it waits: no deadline, no wake, nothing sent.
        h.host.clear()
        #expect(h.engine.nextDeadline == nil)
        h.advance(3600)
        #expect(h.state(id) == .suspended)
        #expect(h.host.calls.isEmpty)

        // New work wakes it once; only the new event goes out (the others are
        // still with the process), and one cumulative ack covers everything.
        #expect(try h.deliver().disposition == .woke)
        #expect(h.host.eventSeqs(to: id) == [301])
        #expect(h.app(id).wakes == 2)
        h.engine.acknowledge(id, upTo: 301, now: h.now)
        #expect(h.app(id).queue.events.isEmpty)
    }

    /// A hung app (it never acknowledges) is woken per new event, never by itself.
    @Test func hungAppIsWokenOnlyByNewWork() throws {
        let h = Harness()
        let t1 = try woken(h)  // connected all along
        h.advance(to: t1 + 10 * second)
        #expect(h.state(id) == .suspended)
        for _ in 0..<10 { h.advance(60) }
        #expect(h.host.thaws(id) == 1)  // the first wake only
        #expect(try h.deliver().disposition == .woke)
        h.advance(10)
        #expect(h.state(id) == .suspended)
        h.advance(600)
        #expect(h.host.thaws(id) == 2)
        #expect(h.app(id).queue.unacknowledgedCount == 2)
    }
}

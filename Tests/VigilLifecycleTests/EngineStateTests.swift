import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Engine: foreground, background, suspension")
struct EngineStateTests {
    let id = Harness.plain

    @Test func launchIsInactiveThenActiveOnConnect() throws {
        let h = Harness()
        try h.engine.launch(id, now: h.now)
        #expect(h.state(id) == .inactive)
        #expect(h.host.starts.count == 1)
        #expect(h.host.starts.first?.launch == LaunchOptions(reason: .user))
        #expect(h.pid(id) == 100)
        #expect(h.app(id).launches == 1)
        #expect(h.host.decisions(.launch, for: id).count == 1)
        #expect(h.host.messages(to: id).isEmpty)  // not connected yet

        let welcome = try #require(h.engine.connected(id, now: h.now))
        #expect(welcome.state == .inactive)
        #expect(welcome.launch == LaunchOptions(reason: .user))
        #expect(welcome.deadline == nil)
        #expect(h.state(id) == .active)
        #expect(h.host.lifecycle(to: id) == [
            LifecycleMessage(event: .didFinishLaunching, state: .inactive),
            LifecycleMessage(event: .didBecomeActive, state: .active),
        ])
        #expect(h.engine.nextDeadline == nil)

        // Launching again while in the foreground does nothing.
        try h.engine.launch(id, now: h.now)
        #expect(h.host.starts.count == 1)
        #expect(h.host.lifecycle(to: id).count == 2)
    }

    @Test func failedStartIsRefusedAndReported() throws {
        let h = Harness()
        h.host.startError = FakeHost.StartFailure()
        #expect(errorCode { try h.engine.launch(id, now: h.now) } == .launchFailed)
        #expect(h.state(id) == .notRunning)
        #expect(h.pid(id) == nil)
        let refusal = try #require(h.host.decisions(.refuse, for: id).first)
        #expect(refusal.reason.contains("exec failed"))
    }

    @Test func unknownAppsAndWrongStatesAreErrors() throws {
        let h = Harness()
        #expect(errorCode { try h.engine.launch("org.example.nope", now: h.now) } == .unknownApp)
        #expect(errorCode { try h.engine.moveToBackground(id, now: h.now) } == .invalidState)
        #expect(errorCode { try h.engine.terminate(id, now: h.now) } == .invalidState)
        #expect(errorCode { try h.deliver(to: "org.example.nope") } == .unknownApp)
    }

    @Test func backgroundIsSuspendedExactlyAtTheGraceDeadline() throws {
        let h = Harness()
        try h.active(id)
        h.host.clear()
        let t0 = h.now
        try h.engine.moveToBackground(id, now: t0)

        #expect(h.state(id) == .background)
        #expect(h.host.lifecycle(to: id) == [
            LifecycleMessage(event: .willResignActive, state: .inactive),
            LifecycleMessage(event: .didEnterBackground, state: .background),
        ])
        #expect(h.host.deadlines(to: id) == [t0 + 180 * second])
        #expect(h.host.decisions(.enterBackground, for: id).count == 1)
        #expect(h.engine.nextDeadline == t0 + 5 * second)

        h.advance(to: t0 + 5 * second - 1)
        #expect(h.state(id) == .background)
        #expect(h.host.freezes(id) == 0)

        let sentBefore = h.host.messages(to: id).count
        h.advance(to: t0 + 5 * second)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
        #expect(h.host.messages(to: id).count == sentBefore)  // suspended without notice
        let suspension = try #require(h.host.decisions(.suspend, for: id).first)
        #expect(suspension.state == .suspended)
        #expect(suspension.reason.contains("grace"))
        #expect(h.engine.nextDeadline == nil)
        #expect(h.app(id).backgroundNanosecondsUsed == 5 * second)

        h.advance(1000)
        #expect(h.host.freezes(id) == 1)
    }

    @Test func gracePeriodFollowsTheConfiguredTiming() throws {
        var timings = Timings()
        timings.suspendGrace = 0.25
        let h = Harness(timings: timings)
        try h.active(id)
        try h.engine.moveToBackground(id, now: h.now)
        #expect(h.engine.nextDeadline == h.now + second / 4)
    }

    @Test func foregroundFromSuspendedThawsAndNotifies() throws {
        let h = Harness()
        try h.suspended(id)
        h.host.clear()
        try h.engine.moveToForeground(id, now: h.now)

        #expect(h.state(id) == .active)
        #expect(h.host.calls.first == .thaw(id))
        #expect(h.host.lifecycle(to: id) == [
            LifecycleMessage(event: .willEnterForeground, state: .inactive),
            LifecycleMessage(event: .didBecomeActive, state: .active),
        ])
        #expect(h.host.deadlines(to: id) == [nil])
        #expect(h.host.decisions(.enterForeground, for: id).count == 1)
        #expect(h.engine.nextDeadline == nil)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == nil)
        h.advance(1000)
        #expect(h.state(id) == .active)
        #expect(h.host.freezes(id) == 0)
    }

    @Test func foregroundFromBackgroundCancelsSuspension() throws {
        let h = Harness()
        try h.active(id)
        try h.engine.moveToBackground(id, now: h.now)
        h.advance(2)
        h.host.clear()
        try h.engine.moveToForeground(id, now: h.now)
        #expect(h.host.thaws(id) == 0)
        #expect(h.host.notifications(to: id) == [.willEnterForeground, .didBecomeActive])
        h.advance(10)
        #expect(h.state(id) == .active)
        #expect(h.host.freezes(id) == 0)
        // Launch (the user tapping the icon) also brings it back from the background.
        try h.engine.moveToBackground(id, now: h.now)
        try h.engine.launch(id, now: h.now)
        #expect(h.state(id) == .active)
        #expect(h.host.starts.isEmpty)
    }

    @Test func backgroundTimeRemainingIsNilInForegroundAndCountsDown() throws {
        let h = Harness()
        try h.active(id)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == nil)
        _ = h.engine.beginBackgroundTask(id, name: "sync", now: h.now)
        try h.engine.moveToBackground(id, now: h.now)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == 180)
        h.advance(3)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == 177)
        h.advance(97.5)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == 79.5)
        try h.engine.moveToForeground(id, now: h.now)
        #expect(h.engine.backgroundTimeRemaining(id, now: h.now) == nil)
    }

    @Test func adoptFrozenAppIsSuspendedUntilAnEvent() throws {
        let h = Harness()
        h.engine.adopt(id, pid: 4242, frozen: true, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.pid(id) == 4242)
        #expect(h.app(id).launch == LaunchOptions(reason: .adopted))
        #expect(h.host.starts.isEmpty)
        #expect(h.host.decisions(.adopt, for: id).count == 1)
        #expect(h.engine.nextDeadline == nil)

        #expect(try h.deliver().disposition == .woke)
        #expect(h.host.thaws(id) == 1)
        #expect(h.state(id) == .background)
        #expect(h.host.events(to: id).isEmpty)  // its old connection is gone
        let welcome = try #require(h.engine.connected(id, now: h.now))
        #expect(welcome.state == .background)
        #expect(welcome.launch?.reason == .adopted)
        #expect(welcome.deadline == h.now + 180 * second)
        #expect(h.host.eventSeqs(to: id) == [1])
    }

    @Test func adoptRunningAppGetsAGracePeriod() throws {
        let h = Harness()
        h.engine.adopt(id, pid: 4243, frozen: false, now: h.now)
        #expect(h.state(id) == .background)
        #expect(h.engine.nextDeadline == h.now + 5 * second)
        h.advance(5)
        #expect(h.state(id) == .suspended)
        #expect(h.host.freezes(id) == 1)
        // Its process exiting is then seen (the pid was adopted).
        h.engine.processExited(id, pid: 4243, status: "exit 0", crashed: false, now: h.now)
        #expect(h.state(id) == .notRunning)
    }

    @Test func manifestUpdatesKeepRunningApps() throws {
        let h = Harness()
        try h.active(id)
        h.engine.updateManifests([:])
        #expect(h.engine.apps[id] != nil)  // still running
        #expect(h.engine.apps[Harness.accessory] == nil)
    }
}

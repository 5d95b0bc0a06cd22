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

/// A daemon restart: apps adopted or relaunched for what the old daemon queued,
/// and the daemon's own stop with `on-stop = "terminate"`.
@Suite("Engine: daemon restart and stop")
struct EngineRestartTests {
    let id = Harness.plain

    /// What a daemon that sent events 1 and 2 to the active app (unacknowledged) saved.
    func savedWithTwoSentEvents(forceQuit: Bool = false) throws -> [String: SavedApp] {
        let old = Harness()
        try old.active(id)
        try old.deliver()
        try old.deliver()
        #expect(old.host.eventSeqs(to: id) == [1, 2])
        if forceQuit { try old.engine.forceQuit(id, now: old.now) }
        return old.engine.savedState()
    }

    @Test func adoptedFrozenAppIsWokenForRestoredEvents() throws {
        let saved = try savedWithTwoSentEvents()
        let h = Harness()
        h.engine.restore(saved, now: 0)
        h.engine.adopt(id, pid: 4242, frozen: true, now: h.now)
        #expect(h.host.decisions(.adopt, for: id).count == 1)
        let wake = try #require(h.host.decisions(.wake, for: id).first)
        #expect(wake.reason.contains("2 restored event(s)"))
        #expect(h.host.thaws(id) == 1)
        #expect(h.state(id) == .background)
        #expect(h.app(id).launch?.reason == .adopted)
        #expect(h.engine.nextDeadline == h.now + 10 * second)  // the wake budget
        // Sent once the process connects again, each once, as redelivered.
        #expect(h.host.events(to: id).isEmpty)
        _ = try #require(h.engine.connected(id, now: h.now))
        #expect(h.host.events(to: id).map(\.seq) == [1, 2])
        #expect(h.host.events(to: id).map(\.redelivered) == [true, true])
        h.engine.acknowledge(id, upTo: 2, now: h.now)
        h.advance(10)
        #expect(h.state(id) == .suspended)
    }

    @Test func anAdoptedAppsWindowStartsAgainAtItsHello() throws {
        let saved = try savedWithTwoSentEvents()
        let h = Harness()
        h.engine.restore(saved, now: 0)
        h.engine.adopt(id, pid: 4242, frozen: true, now: h.now)  // woken for the restored events
        h.advance(8)  // its client library takes 8 s to reconnect
        #expect(h.state(id) == .background)
        _ = try #require(h.engine.connected(id, now: h.now))
        #expect(h.engine.nextDeadline == h.now + 10 * second)  // the whole wake budget, from the hello
        h.advance(9)
        #expect(h.state(id) == .background)
        h.advance(1)
        #expect(h.state(id) == .suspended)
        // Only the first hello after adoption restarts it: a reconnect later in a window does not.
        h.engine.disconnected(id)
        try h.deliver()
        h.advance(4)
        _ = try #require(h.engine.connected(id, now: h.now))
        #expect(h.engine.nextDeadline == h.now + 6 * second)
    }

    @Test func adoptedRunningAppWithRestoredEventsGetsTheWakeBudget() throws {
        let saved = try savedWithTwoSentEvents()
        let h = Harness()
        h.engine.restore(saved, now: 0)
        h.engine.adopt(id, pid: 4242, frozen: false, now: h.now)
        #expect(h.state(id) == .background)
        #expect(h.host.decisions(.wake, for: id).isEmpty)
        #expect(h.engine.nextDeadline == h.now + 10 * second)
    }

    @Test func adoptedForceQuitAppStaysSuspended() throws {
        let saved = try savedWithTwoSentEvents(forceQuit: true)
        let h = Harness()
        h.engine.restore(saved, now: 0)
        h.engine.adopt(id, pid: 4242, frozen: true, now: h.now)
        #expect(h.state(id) == .suspended)
        #expect(h.host.thaws(id) == 0)
        #expect(h.host.decisions(.wake, for: id).isEmpty)
    }

    @Test func adoptedAppIsNotWokenForEventsOfAModeItLacks() throws {
        let acc = Harness.accessory
        let old = Harness()
        try old.suspended(acc)
        try old.deliver("ble.notification", to: acc, mode: .bluetoothCentral)
        let h = Harness()
        h.engine.restore(old.engine.savedState(), now: 0)
        h.engine.adopt(acc, pid: 4242, frozen: true, now: h.now)
        #expect(h.state(acc) == .suspended)
        #expect(h.host.thaws(acc) == 0)
        h.engine.relaunchForRestoredEvents(now: h.now)
        #expect(h.host.starts.isEmpty)
    }

    @Test func notRunningAppWithRestoredEventsIsRelaunched() throws {
        let saved = try savedWithTwoSentEvents()
        let h = Harness()
        h.engine.restore(saved, now: 0)
        h.engine.relaunchForRestoredEvents(now: h.now)
        let start = try #require(h.host.starts.first)
        #expect(start.app == id)
        #expect(start.launch == LaunchOptions(reason: .redelivery, eventKind: "test"))
        #expect(h.state(id) == .background)
        #expect(h.host.decisions(.relaunch, for: id).first?.reason.contains("daemon restart") == true)
        _ = h.engine.connected(id, now: h.now)
        #expect(h.host.events(to: id).map(\.seq) == [1, 2])
        #expect(h.host.events(to: id).map(\.redelivered) == [true, true])
        // Once: running now, a second call does nothing.
        h.engine.relaunchForRestoredEvents(now: h.now)
        #expect(h.host.starts.count == 1)
    }

    @Test func forceQuitAppIsNotRelaunchedForRestoredEvents() throws {
        let h = Harness()
        h.engine.restore(try savedWithTwoSentEvents(forceQuit: true), now: 0)
        h.engine.relaunchForRestoredEvents(now: h.now)
        #expect(h.host.starts.isEmpty)
        #expect(h.app(id).queue.events.count == 2)
    }

    @Test func daemonStopTerminatesAppsWithNoticeAndLaunchesNothing() throws {
        let h = Harness()  // exit grace 5 s
        try h.suspended(id)  // connected, frozen
        try h.engine.launch(Harness.accessory, now: h.now)  // started, not connected yet
        let accPid = try #require(h.pid(Harness.accessory))
        h.host.clear()
        h.engine.terminateForDaemonStop(now: h.now)

        // The connected app: thawed, told willTerminate, killed after the exit grace.
        #expect(h.host.thaws(id) == 1)
        #expect(h.host.notifications(to: id) == [.willTerminate])
        #expect(h.host.kills(id) == 0)
        #expect(h.engine.nextDeadline == h.now + 5 * second)
        // The one that cannot hear it: ended at once.
        #expect(h.host.kills(Harness.accessory) == 1)
        #expect(h.state(Harness.accessory) == .notRunning)
        h.engine.processExited(Harness.accessory, pid: accPid, status: "signal 9", crashed: true, now: h.now)

        // Nothing is started any more, by events or by the user.
        #expect(try h.deliver().disposition != .launched)
        #expect(errorCode { try h.engine.launch(Harness.accessory, now: h.now) } == .launchFailed)
        h.advance(5)
        #expect(h.host.kills(id) == 1)
        #expect(h.state(id) == .notRunning)
        #expect(h.host.decisions(.terminate, for: id).map(\.reason).contains { $0.contains("did not exit") })
        #expect(h.host.starts.isEmpty)
    }
}

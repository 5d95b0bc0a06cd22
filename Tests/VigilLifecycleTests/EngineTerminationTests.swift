import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Engine: termination, force-quit, relaunch")
struct EngineTerminationTests {
    let id = Harness.plain

    @Test func systemTerminatedAppIsRelaunchedIntoTheBackgroundByAnEvent() throws {
        let h = Harness()
        try h.suspended(id)
        h.host.clear()
        try h.engine.terminate(id, now: h.now)
        // A frozen app is thawed so that the kill can act; no willTerminate.
        #expect(h.host.calls.prefix(2) == [.thaw(id), .kill(id)])
        #expect(h.host.lifecycle(to: id).isEmpty)
        #expect(h.state(id) == .notRunning)
        #expect(h.host.decisions(.terminate, for: id).count == 1)
        h.engine.processExited(id, pid: 100, status: "signal 9", crashed: true, now: h.now)
        #expect(h.host.decisions(.crash, for: id).isEmpty)
        #expect(h.host.starts.isEmpty)

        h.advance(50)
        let t = h.now
        let result = try h.deliver("test")
        #expect(result.disposition == .launched)
        #expect(h.host.starts.map(\.launch) == [LaunchOptions(reason: .event, eventKind: "test")])
        #expect(h.state(id) == .background)
        #expect(h.app(id).wakes == 1)
        #expect(h.app(id).launches == 2)
        #expect(h.host.decisions(.relaunch, for: id).count == 1)
        // Until its hello only the launch timeout runs; the wake budget starts then.
        #expect(h.engine.nextDeadline == t + 20 * second)

        let welcome = try #require(h.engine.connected(id, now: h.now))
        #expect(h.engine.nextDeadline == t + 10 * second)
        #expect(welcome.state == .background)
        #expect(welcome.launch == LaunchOptions(reason: .event, eventKind: "test"))
        #expect(welcome.deadline == t + 180 * second)
        #expect(h.host.notifications(to: id) == [.didFinishLaunching])  // no didBecomeActive in the background
        #expect(h.host.eventSeqs(to: id) == [1])

        h.advance(10)
        #expect(h.state(id) == .suspended)
    }

    @Test func forceQuitAppIsNotRelaunchedUntilTheUserLaunchesIt() throws {
        let h = Harness()
        try h.active(id)
        try h.engine.moveToBackground(id, now: h.now)
        h.host.clear()
        try h.engine.forceQuit(id, now: h.now)
        #expect(h.host.kills(id) == 1)
        #expect(h.state(id) == .notRunning)
        #expect(h.app(id).forceQuit)
        #expect(h.host.decisions(.forceQuit, for: id).count == 1)
        h.engine.processExited(id, pid: 100, status: "signal 9", crashed: true, now: h.now)
        #expect(h.host.starts.isEmpty)

        #expect(try h.deliver("a").disposition == .queued)
        #expect(try h.deliver("b").disposition == .queued)
        #expect(h.host.starts.isEmpty)
        #expect(h.host.decisions(.queue, for: id).first?.reason.contains("force-quit") == true)

        try h.engine.launch(id, now: h.now)
        #expect(!h.app(id).forceQuit)
        #expect(h.host.starts.map(\.launch) == [LaunchOptions(reason: .user)])
        _ = h.engine.connected(id, now: h.now)
        #expect(h.state(id) == .active)
        #expect(h.host.eventSeqs(to: id) == [1, 2])

        // And events relaunch it again once it has been launched by the user.
        try h.engine.terminate(id, now: h.now)
        #expect(try h.deliver("c").disposition == .launched)
    }

    @Test func forceQuitOfAStoppedAppStillBlocksRelaunch() throws {
        let h = Harness()
        try h.engine.forceQuit(id, now: h.now)
        #expect(h.host.kills(id) == 0)
        #expect(h.app(id).forceQuit)
        #expect(try h.deliver().disposition == .queued)
        // Bringing it to the foreground counts as the user launching it.
        try h.engine.moveToForeground(id, now: h.now)
        #expect(!h.app(id).forceQuit)
        #expect(h.state(id) == .inactive)
    }

    @Test func crashOfAProcessStartedRightAfterAForceQuitIsStillACrash() throws {
        let h = Harness()
        try h.active(id)
        try h.engine.forceQuit(id, now: h.now)
        // The user relaunches before the old process's exit is reported.
        try h.engine.launch(id, now: h.now)
        _ = h.engine.connected(id, now: h.now)
        try h.deliver()
        h.engine.processExited(id, pid: 100, status: "signal 9", crashed: true, now: h.now)  // the old one
        #expect(h.state(id) == .active)
        h.advance(1)
        h.engine.processExited(id, pid: 101, status: "signal 11", crashed: true, now: h.now)
        #expect(h.host.decisions(.crash, for: id).count == 1)
        #expect(h.host.starts.last?.launch.reason == .redelivery)
    }

    @Test func exitsOnSuspendGetsWillTerminateThenKillAfterTheExitGrace() throws {
        let h = Harness()
        let app = Harness.exits
        try h.active(app)
        h.host.clear()
        let t0 = h.now
        try h.engine.moveToBackground(app, now: t0)
        #expect(h.host.lifecycle(to: app) == [
            LifecycleMessage(event: .willResignActive, state: .inactive),
            LifecycleMessage(event: .willTerminate, state: .background),
        ])
        #expect(h.engine.nextDeadline == t0 + 5 * second)

        h.advance(to: t0 + 5 * second - 1)
        #expect(h.host.kills(app) == 0)
        h.advance(to: t0 + 5 * second)
        #expect(h.host.kills(app) == 1)
        #expect(h.host.freezes(app) == 0)
        #expect(h.state(app) == .notRunning)
        #expect(h.host.decisions(.terminate, for: app).first?.reason.contains("willTerminate") == true)
        #expect(h.engine.nextDeadline == nil)

        // It does not run in the background: events do not launch it.
        #expect(try h.deliver(to: app).disposition == .queued)
        #expect(h.host.starts.isEmpty)
    }

    @Test func exitsOnSuspendExitingInTimeIsRecordedAsAnExit() throws {
        let h = Harness()
        let app = Harness.exits
        try h.active(app)
        try h.engine.moveToBackground(app, now: h.now)
        h.advance(2)
        h.engine.processExited(app, pid: h.pid(app)!, status: "exit 0", crashed: false, now: h.now)
        #expect(h.state(app) == .notRunning)
        let exit = try #require(h.host.decisions(.exit, for: app).first)
        #expect(exit.reason.contains("willTerminate"))
        #expect(h.engine.nextDeadline == nil)
        h.advance(10)
        #expect(h.host.kills(app) == 0)
        #expect(h.host.starts.count == 1)
    }

    @Test func timersOfSeveralAppsAreIndependent() throws {
        let h = Harness()
        try h.active(Harness.plain)
        try h.active(Harness.accessory)
        let t0 = h.now
        try h.engine.moveToBackground(Harness.plain, now: t0)
        h.advance(3)
        try h.engine.moveToBackground(Harness.accessory, now: h.now)
        #expect(h.engine.nextDeadline == t0 + 5 * second)
        h.advance(to: t0 + 5 * second)
        #expect(h.state(Harness.plain) == .suspended)
        #expect(h.state(Harness.accessory) == .background)
        #expect(h.engine.nextDeadline == t0 + 8 * second)
        h.advance(to: t0 + 8 * second)
        #expect(h.state(Harness.accessory) == .suspended)
    }
}

import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Engine: events, acknowledgement, queue bound")
struct EngineEventTests {
    let id = Harness.plain

    @Test func eventsAreDeliveredInSeqOrderAndAckRemovesThem() throws {
        let h = Harness()
        try h.active(id)
        for kind in ["a", "b", "c"] {
            #expect(try h.deliver(kind).disposition == .delivered)
        }
        #expect(h.host.events(to: id).map(\.kind) == ["a", "b", "c"])
        #expect(h.host.eventSeqs(to: id) == [1, 2, 3])
        #expect(h.app(id).queue.unacknowledgedCount == 3)

        h.engine.acknowledge(id, upTo: 2, now: h.now)
        #expect(h.app(id).queue.events.map(\.seq) == [3])
        h.engine.acknowledge(id, upTo: 3, now: h.now)
        #expect(h.app(id).queue.events.isEmpty)
        #expect(try h.deliver("d").seq == 4)
    }

    @Test func ackNeverRemovesWhatWasNotSent() throws {
        let h = Harness()
        try h.active(id)
        try h.engine.moveToBackground(id, now: h.now)
        try h.deliver("a")
        try h.deliver("accessory.data", mode: .externalAccessory)  // held for the foreground
        try h.deliver("accessory.more")  // behind it, in its source's order
        try h.deliver("b")  // another source: not held back (issue 26)
        #expect(h.host.events(to: id).map(\.kind) == ["a", "b"])
        h.engine.acknowledge(id, upTo: 99, now: h.now)
        #expect(h.app(id).queue.events.map(\.kind) == ["accessory.data", "accessory.more"])

        // Nor what went to an earlier connection and has not been sent again.
        try h.deliver("c")
        h.engine.disconnected(id)
        try h.engine.moveToForeground(id, now: h.now)
        h.engine.acknowledge(id, upTo: 99, now: h.now)
        #expect(h.app(id).queue.events.count == 3)
        _ = h.engine.connected(id, now: h.now)
        #expect(h.host.events(to: id).map(\.kind) == ["a", "b", "c", "accessory.data", "accessory.more", "c"])
        h.engine.acknowledge(id, upTo: 99, now: h.now)
        #expect(h.app(id).queue.events.isEmpty)
    }

    @Test func eventsWaitForAConnection() throws {
        let h = Harness()
        try h.engine.launch(id, now: h.now)
        try h.deliver("early")
        #expect(h.host.events(to: id).isEmpty)
        _ = h.engine.connected(id, now: h.now)
        #expect(h.host.events(to: id).map(\.kind) == ["early"])
        #expect(h.host.events(to: id).first?.redelivered == false)
    }

    @Test func reconnectRedeliversUnacknowledgedEvents() throws {
        let h = Harness()
        try h.active(id)
        try h.deliver("a")
        try h.deliver("b")
        h.engine.acknowledge(id, upTo: 1, now: h.now)
        h.engine.disconnected(id)
        try h.deliver("c")
        h.host.clear()
        _ = h.engine.connected(id, now: h.now)
        let events = h.host.events(to: id)
        #expect(events.map(\.seq) == [2, 3])
        #expect(events.map(\.redelivered) == [true, false])
    }

    @Test func aNewConnectionRedeliversEvenBeforeTheOldOneIsSeenClosing() throws {
        let h = Harness()
        try h.active(id)
        try h.deliver("a")
        h.host.clear()
        _ = h.engine.connected(id, now: h.now)
        #expect(h.host.events(to: id).map(\.seq) == [1])
        #expect(h.host.events(to: id).map(\.redelivered) == [true])
    }

    @Test func crashRelaunchesIntoTheBackgroundAndRedelivers() throws {
        let h = Harness()
        try h.suspended(id)
        try h.deliver("a")
        try h.deliver("b")
        let oldPID = try #require(h.pid(id))
        h.host.clear()

        h.engine.processExited(id, pid: oldPID, status: "signal 11", crashed: true, now: h.now)
        #expect(h.host.decisions(.crash, for: id).first?.reason.contains("signal 11") == true)
        #expect(h.host.starts.count == 1)
        #expect(h.host.starts.first?.launch == LaunchOptions(reason: .redelivery, eventKind: "a"))
        #expect(h.host.decisions(.relaunch, for: id).count == 1)
        #expect(h.state(id) == .background)
        let newPID = try #require(h.pid(id))
        #expect(newPID != oldPID)

        let welcome = try #require(h.engine.connected(id, now: h.now))
        #expect(welcome.state == .background)
        #expect(welcome.launch?.reason == .redelivery)
        let events = h.host.events(to: id)
        #expect(events.map(\.seq) == [1, 2])
        #expect(events.map(\.redelivered) == [true, true])
    }

    @Test func staleExitOfAnOldPidIsIgnored() throws {
        let h = Harness()
        try h.active(id)
        h.engine.processExited(id, pid: 9999, status: "exit 0", crashed: false, now: h.now)
        #expect(h.state(id) == .active)
        #expect(h.host.decisions(.exit, for: id).isEmpty)
    }

    @Test func cleanExitWithNothingPendingIsNotRelaunched() throws {
        let h = Harness()
        try h.active(id)
        h.engine.processExited(id, pid: h.pid(id)!, status: "exit 0", crashed: false, now: h.now)
        #expect(h.state(id) == .notRunning)
        #expect(h.host.decisions(.exit, for: id).count == 1)
        #expect(h.host.starts.count == 1)
    }

    @Test func crashLoopGuardStopsRelaunching() throws {
        var timings = Timings()
        timings.relaunchLimit = 3
        timings.relaunchWindow = 60
        let h = Harness(timings: timings)
        try h.active(id)
        try h.deliver()  // unacknowledged: a reason to relaunch
        for n in 1...3 {
            h.advance(1)
            h.engine.processExited(id, pid: h.pid(id)!, status: "signal 6", crashed: true, now: h.now)
            #expect(h.host.starts.count == 1 + n, "crash \(n) is relaunched")
            #expect(h.state(id) == .background)
        }
        h.advance(1)
        h.engine.processExited(id, pid: h.pid(id)!, status: "signal 6", crashed: true, now: h.now)
        #expect(h.host.starts.count == 4)
        #expect(h.state(id) == .notRunning)
        let refusal = try #require(h.host.decisions(.refuse, for: id).last)
        #expect(refusal.reason.contains("4 times"))

        // Outside the window, a crash is relaunched again.
        h.advance(120)
        #expect(try h.deliver().disposition == .launched)
        h.advance(1)
        h.engine.processExited(id, pid: h.pid(id)!, status: "signal 6", crashed: true, now: h.now)
        #expect(h.host.starts.count == 6)
        #expect(h.state(id) == .background)
    }

    @Test func eventsWithoutTheModeWaitForTheForeground() throws {
        let h = Harness()
        try h.suspended(id)
        h.host.clear()
        #expect(try h.deliver("accessory.data", mode: .externalAccessory).disposition == .queued)
        #expect(try h.deliver("accessory.data", mode: .externalAccessory).disposition == .queued)
        #expect(h.host.thaws(id) == 0)
        #expect(h.state(id) == .suspended)
        #expect(h.host.decisions(.queue, for: id).count == 2)
        #expect(h.host.messages(to: id).isEmpty)

        try h.engine.moveToForeground(id, now: h.now)
        #expect(h.host.notifications(to: id) == [.willEnterForeground, .didBecomeActive])
        #expect(h.host.eventSeqs(to: id) == [1, 2])
        // Lifecycle first, then the events.
        let sent = h.host.messages(to: id)
        #expect(sent.firstIndex { if case .event = $0 { true } else { false } }! > 1)
    }

    @Test func eventsWithoutTheModeAreHeldInTheBackgroundToo() throws {
        let h = Harness()
        try h.active(id)
        try h.engine.moveToBackground(id, now: h.now)
        #expect(try h.deliver("accessory.data", mode: .externalAccessory).disposition == .queued)
        #expect(h.host.events(to: id).isEmpty)
        try h.engine.moveToForeground(id, now: h.now)
        #expect(h.host.eventSeqs(to: id) == [1])
    }

    @Test func eventWithTheModeWakesTheApp() throws {
        let h = Harness()
        let acc = Harness.accessory
        try h.suspended(acc)
        #expect(try h.deliver("accessory.data", to: acc, mode: .externalAccessory).disposition == .woke)
        #expect(h.host.eventSeqs(to: acc) == [1])
        #expect(try h.deliver("ble", to: acc, mode: .bluetoothCentral).disposition == .queued)
        #expect(h.host.eventSeqs(to: acc) == [1])
    }

    @Test func stoppedAppWithoutTheModeIsNotLaunched() throws {
        let h = Harness()
        #expect(try h.deliver("accessory.data", mode: .externalAccessory).disposition == .queued)
        #expect(h.host.starts.isEmpty)
        // A later event of its source would have to wait behind it, so it does
        // not launch the app either, even one that could (issue 26: per source).
        #expect(try h.deliver("accessory.other").disposition == .queued)
        #expect(h.host.starts.isEmpty)
        #expect(h.host.decisions(.queue, for: id).last?.reason.contains("behind seq 1") == true)
        // Another source's event does: it is not behind anything.
        #expect(try h.deliver("test").disposition == .launched)
        #expect(h.host.starts.first?.launch.eventKind == "test")
    }

    @Test func heldBackEventAtTheBoundIsRefusedWithoutADrop() throws {
        let h = Harness(queueLimit: 2)
        try h.active(id)
        try h.deliver("a")
        try h.deliver("b")
        #expect(errorCode { try h.deliver("c", canBeHeldBack: true) } == .queueFull)
        #expect(h.app(id).queue.totalDropped == 0)
        #expect(h.app(id).queue.unreportedDrops == 0)
        #expect(h.host.decisions(.drop, for: id).isEmpty)
        h.engine.acknowledge(id, upTo: 1, now: h.now)
        #expect(h.host.events(to: id).map(\.kind) == ["a", "b"])  // no overflow report
        #expect(try h.deliver("c", canBeHeldBack: true).seq == 3)
    }

    @Test func droppedEventsAreCountedLoggedAndReported() throws {
        let h = Harness(queueLimit: 2)
        try h.active(id)
        try h.deliver("a")
        try h.deliver("b")
        #expect(errorCode { try h.deliver("sensor.sample") } == .queueFull)
        #expect(errorCode { try h.deliver("other") } == .queueFull)
        #expect(h.app(id).queue.totalDropped == 2)
        let drops = h.host.decisions(.drop, for: id)
        #expect(drops.count == 2)
        #expect(drops.first?.reason.contains("sensor.sample") == true)
        #expect(h.host.events(to: id).count == 2)

        h.engine.acknowledge(id, upTo: 1, now: h.now)
        let sent = h.host.messages(to: id).compactMap { if case let .event(event, _) = $0 { event } else { nil } }
        let overflow = try #require(sent.last)
        #expect(overflow.kind == "overflow")
        #expect(overflow.seq == 3)
        #expect(overflow.attributes["dropped"] == .number(2))
        #expect(overflow.attributes["firstDroppedKind"] == .string("sensor.sample"))
        #expect(h.app(id).queue.unreportedDrops == 0)
        #expect(h.app(id).queue.totalDropped == 2)
        // Reported once.
        h.engine.acknowledge(id, upTo: 3, now: h.now)
        #expect(h.host.events(to: id).filter { $0.kind == "overflow" }.count == 1)
    }

    @Test func overflowWaitsUntilThereIsRoom() throws {
        let h = Harness(queueLimit: 1)
        try h.active(id)
        try h.deliver("a")
        _ = errorCode { try h.deliver("lost") }
        h.engine.acknowledge(id, upTo: 0, now: h.now)  // nothing acknowledged: still full
        #expect(h.host.events(to: id).map(\.kind) == ["a"])
        h.engine.acknowledge(id, upTo: 1, now: h.now)
        #expect(h.host.events(to: id).map(\.kind) == ["a", "overflow"])
    }
}

/// A process launched into the background for an event: its processing window
/// starts at its hello, and it has `launch-timeout` to say it.
@Suite struct LaunchWindowTests {
    let id = Harness.plain

    @Test func aLaunchedAppIsNotSuspendedBeforeItConnects() throws {
        let h = Harness()
        #expect(try h.deliver("a").disposition == .launched)
        let launchedAt = h.now
        #expect(h.engine.nextDeadline == launchedAt + nanoseconds(h.engine.timings.launchTimeout))
        // Slower to start than the wake budget, within the launch timeout.
        h.advance(h.engine.timings.wakeBudget * 1.5)
        #expect(h.state(id) == .background)
        #expect(h.host.freezes(id) == 0)

        let welcome = try #require(h.engine.connected(id, now: h.now))
        #expect(welcome.state == .background)
        #expect(welcome.deadline == h.now + nanoseconds(h.engine.timings.backgroundTimeLimit))
        #expect(h.host.eventSeqs(to: id) == [1])
        // The whole budget from the hello on, then suspended as after any wake.
        h.advance(h.engine.timings.wakeBudget - 0.1)
        #expect(h.state(id) == .background)
        h.advance(0.2)
        #expect(h.state(id) == .suspended)
    }

    @Test func anAppThatNeverConnectsIsEndedAtTheLaunchTimeoutAndWaitsForTheNextEvent() throws {
        let h = Harness()
        try h.deliver("a")
        let pid = try #require(h.pid(id))
        h.advance(h.engine.timings.launchTimeout - 0.1)
        #expect(h.state(id) == .background, "still starting")
        h.advance(0.2)
        #expect(h.state(id) == .notRunning)
        #expect(h.host.kills(id) == 1)
        let ended = try #require(h.host.decisions(.terminate, for: id).last)
        #expect(ended.reason.contains("launch-timeout") && ended.reason.contains("1 event(s) wait"))
        h.engine.processExited(id, pid: pid, status: "signal 9", crashed: false, now: h.now)
        // Not relaunched by itself (a process that cannot connect would loop)...
        h.advance(h.engine.timings.relaunchWindow * 2)
        #expect(h.host.starts.count == 1)
        #expect(h.app(id).queue.events.count == 1, "its event still waits")
        // ...but by the next event, which finds both events waiting.
        #expect(try h.deliver("b").disposition == .launched)
        _ = h.engine.connected(id, now: h.now)
        #expect(h.host.events(to: id).map(\.kind) == ["a", "b"])
    }

    @Test func aForegroundLaunchHasNoLaunchTimeout() throws {
        let h = Harness()
        try h.engine.launch(id, now: h.now)
        h.advance(h.engine.timings.launchTimeout * 3)
        #expect(h.state(id) == .inactive)
        #expect(h.host.kills(id) == 0)
    }
}

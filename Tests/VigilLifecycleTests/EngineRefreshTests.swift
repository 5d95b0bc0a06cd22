import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Engine: background refresh (the fetch mode)")
struct EngineRefreshTests {
    static let fetcherA = "org.example.fetch.a"
    static let fetcherB = "org.example.fetch.b"

    /// Two fetch apps, a plain one; a minimum interval of 60 s and a 30 s batching window.
    static func harness() -> Harness {
        var timings = Timings()
        timings.refreshMinimumInterval = 60
        timings.refreshCoalescing = 30
        return Harness(timings: timings, manifests: [
            AppManifest(id: Harness.plain, exec: ["/usr/bin/plain"]),
            AppManifest(id: fetcherA, exec: ["/usr/bin/a"], backgroundModes: [.fetch]),
            AppManifest(id: fetcherB, exec: ["/usr/bin/b"], backgroundModes: [.fetch]),
        ])
    }

    static func refreshes(_ h: Harness, to id: String) -> Int {
        h.host.events(to: id).filter { $0.kind == RefreshEventKind.refresh }.count
    }

    @Test func onlyAFetchAppMaySchedule() throws {
        let h = Self.harness()
        try h.active(Harness.plain)
        #expect(errorCode { try h.engine.scheduleRefresh(Harness.plain, interval: 100, earliestBegin: nil, now: h.now) } == .invalidState)
        try h.active(Self.fetcherA)
        for bad in [0, -1, .nan, .infinity, 1e12] {
            #expect(errorCode { try h.engine.scheduleRefresh(Self.fetcherA, interval: bad, earliestBegin: nil, now: h.now) } == .invalidArgument, "\(bad)")
        }
        #expect(errorCode { try h.engine.scheduleRefresh(Self.fetcherA, interval: 100, earliestBegin: -5, now: h.now) } == .invalidArgument)
        #expect(errorCode { try h.engine.completeRefresh(Self.fetcherA, result: .newData, now: h.now) } == .invalidState)
    }

    @Test func aSuspendedAppIsWokenNotEarlyAndAtMostTheWindowLate() throws {
        let h = Self.harness()
        try h.suspended(Self.fetcherA)
        let schedule = try h.engine.scheduleRefresh(Self.fetcherA, interval: 10, earliestBegin: 100, now: h.now)
        #expect(schedule.interval == nanoseconds(60), "raised to refresh-minimum-interval")
        #expect(h.engine.nextDeadline == h.now + nanoseconds(130), "due plus the batching window")
        h.advance(99)
        #expect(Self.refreshes(h, to: Self.fetcherA) == 0)
        h.advance(to: h.engine.nextDeadline!)
        #expect(Self.refreshes(h, to: Self.fetcherA) == 1)
        #expect(h.state(Self.fetcherA) == .background, "woken with the usual budget")
        #expect(h.host.decisions(.wake, for: Self.fetcherA).count == 1)
    }

    @Test func duesWithinTheWindowShareOneDaemonWakeUp() throws {
        let h = Self.harness()
        try h.suspended(Self.fetcherA)
        try h.suspended(Self.fetcherB)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 100, now: h.now)
        try h.engine.scheduleRefresh(Self.fetcherB, interval: 60, earliestBegin: 120, now: h.now)
        // One deadline: A's due plus the window (130 s), by which B (120 s) is due too.
        let batch = try #require(h.engine.nextDeadline)
        h.advance(to: batch)
        #expect(Self.refreshes(h, to: Self.fetcherA) == 1)
        #expect(Self.refreshes(h, to: Self.fetcherB) == 1)
    }

    @Test func anAppThatNeverFindsDataIsStretchedAndNewDataResetsIt() throws {
        let h = Self.harness()
        try h.active(Self.fetcherA)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 0, now: h.now)
        var stretches: [UInt64] = []
        for _ in 0..<5 {
            let schedule = try h.engine.completeRefresh(Self.fetcherA, result: .noData, now: h.now)
            stretches.append(schedule.stretch)
            #expect(schedule.due == h.now + nanoseconds(60) * schedule.stretch)
        }
        #expect(stretches == [2, 4, 8, 8, 8])
        #expect(try h.engine.completeRefresh(Self.fetcherA, result: .failed, now: h.now).stretch == 8, "a failure says nothing")
        #expect(try h.engine.completeRefresh(Self.fetcherA, result: .newData, now: h.now).stretch == 1)
    }

    @Test func completingEndsTheWindowAsFinishedProcessingDoes() throws {
        let h = Self.harness()
        try h.suspended(Self.fetcherA)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 0, now: h.now)
        h.advance(to: h.engine.nextDeadline!)
        let (seq, _, _) = try #require(h.host.events(to: Self.fetcherA).last)
        h.engine.acknowledge(Self.fetcherA, upTo: seq, now: h.now)
        try h.engine.completeRefresh(Self.fetcherA, result: .newData, now: h.now)
        #expect(h.state(Self.fetcherA) == .suspended)
    }

    @Test func anUnacknowledgedRefreshIsNotPiledUpAndAForceQuitAppGetsNone() throws {
        let h = Self.harness()
        try h.suspended(Self.fetcherA)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 0, now: h.now)
        h.advance(to: h.engine.nextDeadline!)
        #expect(Self.refreshes(h, to: Self.fetcherA) == 1)
        // Never acknowledged: the next due adds nothing.
        h.advance(to: h.engine.nextDeadline!)
        #expect(h.app(Self.fetcherA).queue.events.filter { $0.kind == RefreshEventKind.refresh }.count == 1)

        try h.active(Self.fetcherB)
        try h.engine.scheduleRefresh(Self.fetcherB, interval: 60, earliestBegin: 0, now: h.now)
        try h.engine.forceQuit(Self.fetcherB, now: h.now)
        h.host.clear()
        h.advance(to: h.engine.nextDeadline!)
        #expect(h.host.starts.isEmpty, "a force-quit app is not launched for a refresh")
        #expect(h.app(Self.fetcherB).queue.events.isEmpty)
    }

    @Test func aNotRunningAppIsLaunchedIntoTheBackground() throws {
        let h = Self.harness()
        try h.active(Self.fetcherA)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 0, now: h.now)
        try h.engine.terminate(Self.fetcherA, now: h.now)
        h.engine.processExited(Self.fetcherA, pid: h.pid(Self.fetcherA) ?? 100, status: "killed", crashed: false, now: h.now)
        h.host.clear()
        h.advance(to: h.engine.nextDeadline!)
        let start = try #require(h.host.starts.last)
        #expect(start.launch.reason == .event && start.launch.eventKind == RefreshEventKind.refresh)
    }

    @Test func theScheduleSurvivesARestartAndAtMostOneIntervalLater() throws {
        let h = Self.harness()
        try h.active(Self.fetcherA)
        try h.engine.scheduleRefresh(Self.fetcherA, interval: 60, earliestBegin: 5000, now: h.now)
        let saved = h.engine.savedState()
        // A new daemon after a reboot: CLOCK_MONOTONIC is small again.
        let restarted = Self.harness()
        restarted.engine.restore(saved, now: 0)
        let refresh = try #require(restarted.app(Self.fetcherA).refresh)
        #expect(refresh.due == nanoseconds(60))
        #expect(refresh.interval == nanoseconds(60))
    }
}

import Testing
import VigilProtocol
@testable import VigilLifecycle

/// Events of one stream go one at a time, paced by the app's acknowledgements.
@Suite("Engine: streams paced by acknowledgements")
struct EngineStreamTests {
    let id = Harness.accessory

    func data(_ bytes: [UInt8], stream: String = "s1") -> QueuedEvent {
        QueuedEvent(kind: "session.data", payload: bytes, wakeMode: .externalAccessory, stream: stream)
    }

    func merge(_ h: Harness, _ bytes: [UInt8], stream: String = "s1") -> UInt64? {
        h.engine.merge(bytes, into: id, if: { $0.stream == stream }, now: h.now)
    }

    @Test func theNextEventOfAStreamWaitsForTheAcknowledgementAndGrowsMeanwhile() throws {
        let h = Harness()
        try h.active(id)
        let first = try h.engine.deliver(data([1]), to: id, now: h.now)
        #expect(first.disposition == .delivered)
        // In flight: the next event of the stream is held and merges what follows.
        let second = try h.engine.deliver(data([2]), to: id, now: h.now)
        #expect(second.disposition == .queued)
        #expect(merge(h, [3, 4]) == second.seq)
        // Another stream is not held back by it, but order is kept: it waits behind.
        let other = try h.engine.deliver(data([9], stream: "s2"), to: id, now: h.now)
        #expect(other.disposition == .queued)
        #expect(h.host.eventSeqs(to: id) == [first.seq])

        h.engine.acknowledge(id, upTo: first.seq, now: h.now)
        #expect(h.host.eventSeqs(to: id) == [first.seq, second.seq, other.seq])
        #expect(h.engine.queuedEvents(of: id).first?.payload == [2, 3, 4])
        // Only the unsent last event takes merges: the sent one is never changed.
        #expect(merge(h, [5], stream: "s2") == nil)
    }

    @Test func mergedBytesWakeASuspendedAppWhoseEventWaitedBehindOneInFlight() throws {
        let h = Harness()
        try h.suspended(id)
        let first = try h.engine.deliver(data([1]), to: id, now: h.now)
        #expect(first.disposition == .woke)
        _ = try h.engine.deliver(data([2]), to: id, now: h.now)
        // The window ends with the first event unacknowledged: suspended.
        h.advance(h.engine.timings.wakeBudget)
        #expect(h.state(id) == .suspended)
        // More bytes merge into the waiting event; they are new work: a wake.
        #expect(merge(h, [3]) != nil)
        #expect(h.state(id) == .background)
        #expect(h.app(id).wakes == 2)
        h.engine.acknowledge(id, upTo: first.seq, now: h.now)
        #expect(h.host.eventSeqs(to: id) == [first.seq, first.seq + 1])
    }

    @Test func mergesIntoTheEventOfAnAppThatMayNotBeWokenLogNothing() throws {
        let h = Harness()
        try h.suspended(Harness.plain)
        _ = try h.engine.deliver(data([1]), to: Harness.plain, now: h.now)
        let decisions = h.host.decisions(.queue, for: Harness.plain).count
        for byte in 2...50 {
            #expect(h.engine.merge([UInt8(byte)], into: Harness.plain, if: { $0.stream == "s1" }, now: h.now) != nil)
        }
        #expect(h.state(Harness.plain) == .suspended)
        #expect(h.host.decisions(.queue, for: Harness.plain).count == decisions)
    }
}

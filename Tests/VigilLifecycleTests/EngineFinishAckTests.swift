import Testing
import VigilProtocol
@testable import VigilLifecycle

/// `finishedProcessing` carrying an `ack` (issue 31): the engine call the
/// daemon makes for it does what the two frames `ack` and
/// `finishedProcessing` did, in one call: the same queue, decisions, freeze
/// and journal records, the same refusals.
@Suite("Engine: finishedProcessing with an acknowledgement")
struct EngineFinishAckTests {
    let plain = Harness.plain

    /// Suspended, then woken for a test event (sent, not acknowledged).
    func woken() throws -> (Harness, UInt64) {
        let h = Harness()
        try h.suspended(plain)
        let seq = try h.deliver("test").seq
        #expect(h.state(plain) == .background)
        #expect(h.host.eventSeqs(to: plain) == [seq])
        return (h, seq)
    }

    @Test func oneCallDoesWhatTheTwoFramesDid() throws {
        let (twoFrames, seq) = try woken()
        let (combined, sameSeq) = try woken()
        #expect(seq == sameSeq)
        for h in [twoFrames, combined] {
            var encoder = JournalEncoder()
            h.engine.journalChanges(into: &encoder)  // the wake's records, written before the event went out
            h.host.clear()
        }

        twoFrames.engine.acknowledge(plain, upTo: seq, now: twoFrames.now)
        var twoFramesJournal = JournalEncoder()
        twoFrames.engine.journalChanges(into: &twoFramesJournal)  // the daemon commits after each engine call
        twoFrames.engine.finishedProcessing(plain, now: twoFrames.now)
        twoFrames.engine.journalChanges(into: &twoFramesJournal)

        var between = 0
        combined.engine.finishedProcessing(plain, acknowledgingUpTo: seq, now: combined.now) {
            between += 1
            #expect(combined.app(plain).queue.events.isEmpty, "acknowledged before `between`")
            #expect(combined.state(plain) == .background, "not finished yet")
        }
        var combinedJournal = JournalEncoder()
        combined.engine.journalChanges(into: &combinedJournal)

        #expect(between == 1)
        for h in [twoFrames, combined] {
            #expect(h.state(plain) == .suspended)
            #expect(h.app(plain).queue.events.isEmpty)
            #expect(h.host.freezes(plain) == 1)
        }
        #expect(combined.host.calls == twoFrames.host.calls, "the same decisions, messages and freeze, in the same order")
        #expect(combined.host.decisions(.suspend, for: plain).last?.reason.contains("finished processing early, nothing left to handle") == true)
        // The same records, durable the same way: an ack may wait for the next write that must be.
        let records = { (encoder: JournalEncoder) in JournalFormat.read(JournalFormat.header(generation: 1) + encoder.bytes)?.records }
        #expect(records(combinedJournal) != nil)
        #expect(records(combinedJournal) == records(twoFramesJournal))
        #expect(combinedJournal.mustWrite == twoFramesJournal.mustWrite)
    }

    @Test func anAckBeyondWhatWasSentLeavesAHeldEventAndStillFinishes() throws {
        let h = Harness()
        try h.suspended(plain)
        // Held for the foreground (the app lacks the mode), then a test event that wakes it.
        let held = try h.deliver("accessory.connected", mode: .externalAccessory).seq
        let sent = try h.deliver("test").seq
        #expect(h.host.eventSeqs(to: plain) == [sent])
        h.engine.finishedProcessing(plain, acknowledgingUpTo: sent + 10, now: h.now)
        // Only what this connection was sent is acknowledged; the held event stays, and does not keep the app awake.
        #expect(h.app(plain).queue.events.map(\.seq) == [held])
        #expect(h.state(plain) == .suspended)
        #expect(h.host.decisions(.refuse, for: plain).isEmpty)
    }

    @Test func anAckOfAnEventNotSentOnThisConnectionIsRefusedAndLoggedAsAnAck() throws {
        let h = Harness()
        try h.active(plain)
        let seq = try h.deliver("test").seq
        try h.engine.moveToBackground(plain, now: h.now)
        h.advance(h.engine.timings.suspendGrace)
        // The connection went (a daemon restart, say) while it held the event:
        // what this connection was sent does not include it.
        h.engine.disconnected(plain)
        h.engine.finishedProcessing(plain, acknowledgingUpTo: seq, now: h.now)
        #expect(h.app(plain).queue.events.map(\.seq) == [seq], "not acknowledged")
        #expect(h.host.decisions(.refuse, for: plain).last?.reason.contains("ack up to seq \(seq) refused") == true)
    }

    @Test func withATaskHeldTheAppIsSuspendedOnlyWhenTheTaskEnds() throws {
        let (h, seq) = try woken()
        let task = h.engine.beginBackgroundTask(plain, name: "upload", now: h.now)
        h.engine.finishedProcessing(plain, acknowledgingUpTo: seq, now: h.now)
        #expect(h.app(plain).queue.events.isEmpty)
        #expect(h.state(plain) == .background)
        try h.engine.endBackgroundTask(plain, task: task, now: h.now)
        #expect(h.state(plain) == .suspended)
    }
}

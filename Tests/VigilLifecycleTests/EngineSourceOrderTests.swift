import Testing
import VigilProtocol
@testable import VigilLifecycle

/// Issue 26, part 1: order is kept per source, not across sources
/// (docs/lifecycle.md, "Order"; docs/protocol.md, "Events, sequence numbers
/// and acknowledgement"). One test per rule.
@Suite("Engine: order per source")
struct EngineSourceOrderTests {
    let plain = Harness.plain

    func event(_ kind: String, _ attributes: [String: JSONValue] = [:], mode: BackgroundMode? = nil) -> QueuedEvent {
        QueuedEvent(kind: kind, attributes: attributes, wakeMode: mode)
    }

    @Test func eachEventBelongsToTheSourceItsKindAndAttributesName() {
        #expect(event("test").source == "wake")
        #expect(event("my.own.kind").source == "wake")
        #expect(event("demo.tick").source == "wake")
        #expect(event("accessory.connected").source == "accessory")
        #expect(event("accessory.disconnected").source == "accessory")
        #expect(event("session.data", ["session": 3]).source == "session/3")
        #expect(event("session.closed", ["session": 3]).source == "session/3")
        #expect(event("session.loss", ["session": 4]).source == "session/4")
        #expect(event("ble.l2cap.incoming", ["session": 3]).source == "session/3")
        #expect(event("ble.l2cap.reopened", ["session": 3]).source == "session/3")
        #expect(event("ble.l2cap.unpublished", ["psm": 129]).source == "ble.peripheral")
        #expect(event("ble.peripheral.write").source == "ble.peripheral")
        #expect(event("ble.notification", ["peripheral": "AA"]).source == "ble.central")
        #expect(event("ble.connected", ["peripheral": "BB"]).source == "ble.central")
        #expect(event("ble.state", mode: .bluetoothCentral).source == "ble.central")
        #expect(event("ble.state", mode: .bluetoothPeripheral).source == "ble.peripheral")
        #expect(event("mqtt.message").source == "mqtt")
        #expect(event("app.refresh").source == "refresh")
        #expect(event("overflow").source == "overflow")
    }

    /// The reproduction: a suspended app without `external-accessory`.
    @Test func anEventHeldForTheForegroundHoldsBackOnlyItsOwnSource() throws {
        let h = Harness()
        try h.suspended(plain)
        #expect(try h.deliver("accessory.connected", mode: .externalAccessory).disposition == .queued)
        #expect(h.host.thaws(plain) == 0)
        #expect(try h.deliver("test").disposition == .woke)
        #expect(h.state(plain) == .background)
        #expect(h.host.events(to: plain).map(\.kind) == ["test"])
        // A later event of the held source waits behind it, and wakes nothing.
        h.host.clear()
        h.engine.finishedProcessing(plain, now: h.now)
        h.engine.acknowledge(plain, upTo: 2, now: h.now)
        #expect(h.state(plain) == .suspended)
        #expect(try h.deliver("accessory.disconnected", mode: .externalAccessory).disposition == .queued)
        #expect(h.host.thaws(plain) == 0)
        // Even one the app could be woken for (a kind without a mode, as a
        // control client's `wake` may send) waits behind its source's held event.
        #expect(try h.deliver("accessory.other").disposition == .queued)
        #expect(h.host.thaws(plain) == 0)
        #expect(h.host.decisions(.queue, for: plain).last?.reason.contains("behind seq 1 ('accessory.connected') of its source") == true)
    }

    @Test func withinASourceOrderIsKept() throws {
        let h = Harness()
        try h.suspended(plain)
        try h.deliver("accessory.connected", mode: .externalAccessory)
        try h.deliver("test")
        try h.deliver("accessory.disconnected", mode: .externalAccessory)
        try h.deliver("test")
        #expect(h.host.events(to: plain).map(\.kind) == ["test", "test"])
        try h.engine.moveToForeground(plain, now: h.now)
        #expect(h.host.events(to: plain).map(\.kind) == ["test", "test", "accessory.connected", "accessory.disconnected"])
    }

    @Test func seqsOnAConnectionAlwaysIncrease_aHeldEventIsRenumbered() throws {
        let h = Harness()
        try h.suspended(plain)
        let held = try h.deliver("accessory.connected", mode: .externalAccessory).seq
        let later = try h.deliver("test").seq
        #expect(held == 1 && later == 2)
        try h.deliver("accessory.disconnected", mode: .externalAccessory)  // seq 3, behind the held one
        try h.engine.moveToForeground(plain, now: h.now)
        let seqs = h.host.eventSeqs(to: plain)
        #expect(seqs == [2, 4, 5])  // 1 and 3 overtaken by 2: given 4 and 5, in their order
        #expect(seqs == seqs.sorted())
        #expect(h.host.events(to: plain).map(\.kind) == ["test", "accessory.connected", "accessory.disconnected"])
        // Their old seqs are retired, never given out again.
        #expect(try h.deliver("test").seq == 6)
    }

    @Test func anAckUpToSeqNeverCoversAHeldEventBelowIt() throws {
        let h = Harness()
        try h.suspended(plain)
        try h.deliver("accessory.connected", mode: .externalAccessory)
        try h.deliver("test")
        h.engine.acknowledge(plain, upTo: 2, now: h.now)
        #expect(h.app(plain).queue.events.map(\.kind) == ["accessory.connected"])
        h.engine.acknowledge(plain, upTo: 99, now: h.now)  // a client acking beyond what it got
        #expect(h.app(plain).queue.events.map(\.kind) == ["accessory.connected"])
        try h.engine.moveToForeground(plain, now: h.now)
        #expect(h.host.events(to: plain).last?.kind == "accessory.connected")
        h.engine.acknowledge(plain, upTo: 3, now: h.now)
        #expect(h.app(plain).queue.events.isEmpty)
    }

    @Test func aStreamEventInFlightHoldsBackOnlyItsSource() throws {
        let h = Harness()
        try h.active(plain)
        let data = QueuedEvent(kind: "session.data", attributes: ["session": 1], payload: [1], stream: "s1")
        try h.engine.deliver(data, to: plain, now: h.now)  // sent, in flight
        var more = data
        more.payload = [2]
        try h.engine.deliver(more, to: plain, now: h.now)  // waits for the ack of the first
        try h.engine.deliver(event("session.closed", ["session": 1]), to: plain, now: h.now)  // behind it
        try h.deliver("test")  // another source: goes at once
        #expect(h.host.events(to: plain).map(\.kind) == ["session.data", "test"])
        h.engine.acknowledge(plain, upTo: 1, now: h.now)
        #expect(h.host.events(to: plain).map(\.kind) == ["session.data", "test", "session.data", "session.closed"])
        #expect(h.host.eventSeqs(to: plain) == [1, 4, 5, 6])
    }

    @Test func aNewConnectionGetsEverythingAgainInSeqOrder() throws {
        let h = Harness()
        try h.suspended(plain)
        try h.deliver("accessory.connected", mode: .externalAccessory)
        try h.deliver("test")
        try h.engine.moveToForeground(plain, now: h.now)  // test 2, then accessory.connected as 3
        h.host.clear()
        h.engine.disconnected(plain)
        _ = h.engine.connected(plain, now: h.now)
        #expect(h.host.events(to: plain).map(\.seq) == [2, 3])
        #expect(h.host.events(to: plain).map(\.kind) == ["test", "accessory.connected"])
        #expect(h.host.events(to: plain).map(\.redelivered) == [true, true])
    }

    @Test func aCrashedAppIsRelaunchedForAnotherSourceBehindAHeldEvent() throws {
        let h = Harness()
        try h.suspended(plain)
        try h.deliver("accessory.connected", mode: .externalAccessory)
        try h.deliver("test")  // woke, sent
        let pid = try #require(h.pid(plain))
        h.host.clear()
        h.engine.processExited(plain, pid: pid, status: "signal 9", crashed: true, now: h.now)
        #expect(h.host.starts.count == 1)
        #expect(h.host.starts.first?.launch.eventKind == "test")
        // And a daemon restart launches it for the same.
        let restored = Harness()
        restored.engine.restore(h.engine.savedState(), now: 0)
        restored.engine.relaunchForRestoredEvents(now: restored.now)
        #expect(restored.host.starts.first?.launch.eventKind == "test")
    }

    @Test func theJournalReplaysHeldAcknowledgedAndRenumberedEventsExactly() throws {
        let h = Harness()
        var encoder = JournalEncoder()
        try h.suspended(plain)
        try h.deliver("accessory.connected", mode: .externalAccessory)  // 1, held
        try h.deliver("test")  // 2, sent past it
        h.engine.journalChanges(into: &encoder)
        h.engine.acknowledge(plain, upTo: 2, now: h.now)
        h.engine.journalChanges(into: &encoder)
        let ackOnly = JournalFormat.read(JournalFormat.header(generation: 1) + encoder.bytes)!.records
        #expect(ackOnly.contains(.acknowledgedEach(app: plain, seqs: [2])))
        #expect(!ackOnly.contains { if case .acknowledged = $0 { true } else { false } })
        let cut = encoder.bytes
        try h.engine.moveToForeground(plain, now: h.now)  // 1 renumbered to 3, sent
        h.engine.journalChanges(into: &encoder)
        #expect(JournalFormat.read(JournalFormat.header(generation: 1) + encoder.bytes)!.records
            .contains(.renumbered(app: plain, seq: 1, to: 3)))

        // Killed after the ack: the held event survives, not acknowledged, unsent.
        let afterAck = JournalReplay.recover(snapshot: [:], snapshotGeneration: 1, journal: JournalFormat.header(generation: 1) + cut)
        #expect(afterAck.problems.isEmpty)
        #expect(afterAck.apps[plain]?.queue.events.map(\.seq) == [1])
        #expect(afterAck.apps[plain]?.queue.events.first?.everSent == false)
        // Killed after the renumbering: the engine's state exactly, no seq reused.
        let all = JournalReplay.recover(snapshot: [:], snapshotGeneration: 1, journal: JournalFormat.header(generation: 1) + encoder.bytes)
        #expect(all.problems.isEmpty)
        #expect(all.apps[plain]?.queue == h.engine.savedState()[plain]?.queue)
        let restored = Harness()
        restored.engine.restore(all.apps, now: 0)
        #expect(try restored.deliver("test").seq == 4)
    }
}

@Suite("Engine: acknowledgements a connection was not sent")
struct EngineIgnoredAckTests {
    @Test func anAckOfAnEventFromAnEarlierConnectionIsIgnoredAndLogged() throws {
        let h = Harness()
        let plain = Harness.plain
        try h.active(plain)
        try h.deliver("test")
        try h.engine.moveToBackground(plain, now: h.now)
        h.advance(h.engine.timings.suspendGrace)
        h.engine.disconnected(plain)  // the connection went (a daemon restart, say) while it held seq 1
        h.engine.acknowledge(plain, upTo: 1, now: h.now)
        #expect(h.app(plain).queue.events.map(\.seq) == [1])
        #expect(h.host.decisions(.refuse, for: plain).last?.reason.contains("ack up to seq 1 refused") == true)
        // A duplicate ack of what is gone is not worth a line.
        _ = h.engine.connected(plain, now: h.now)
        try h.engine.moveToForeground(plain, now: h.now)
        h.engine.acknowledge(plain, upTo: 1, now: h.now)
        let lines = h.host.decisions(.refuse, for: plain).count
        h.engine.acknowledge(plain, upTo: 1, now: h.now)
        #expect(h.host.decisions(.refuse, for: plain).count == lines)
        #expect(h.app(plain).queue.events.isEmpty)
    }

    /// docs/lifecycle.md, "Acknowledgement across connections": the process
    /// that was sent seq 1 may acknowledge it on its next connection (to a
    /// restarted daemon, here: restored from the journal) before it is sent
    /// again; another process (the same pid, another start time) may not.
    @Test func theProcessThatWasSentAnEventMayAcknowledgeItOnALaterConnection() throws {
        let process = ProcessIdentity(pid: 321, startTime: 77)
        let h = Harness()
        let plain = Harness.plain
        try h.engine.launch(plain, now: h.now)
        _ = h.engine.connected(plain, now: h.now, process: process)
        // Held for the foreground after a restart: the app has no accessory mode.
        try h.deliver("accessory.connected", mode: .externalAccessory)
        #expect(h.app(plain).queue.events.first?.sentTo == process)
        var encoder = JournalEncoder()
        for change in h.app(plain).queue.changes { encoder.append(change.record(app: plain)) }
        let journal = JournalFormat.header(generation: 1) + encoder.bytes

        for (acknowledger, accepted) in [(process, true), (ProcessIdentity(pid: 321, startTime: 78), false)] {
            let recovered = JournalReplay.recover(snapshot: [:], snapshotGeneration: 1, journal: journal)
            let restarted = Harness()
            restarted.engine.restore(recovered.apps, now: 0)
            restarted.engine.adopt(plain, pid: 321, frozen: false, now: restarted.now)
            _ = restarted.engine.connected(plain, now: restarted.now, process: acknowledger)
            #expect(restarted.host.events(to: plain).isEmpty)  // it waits for the foreground
            restarted.engine.acknowledge(plain, upTo: 1, now: restarted.now)
            #expect(restarted.app(plain).queue.events.isEmpty == accepted)
            #expect(restarted.host.decisions(.refuse, for: plain).isEmpty == accepted)
            try restarted.engine.moveToForeground(plain, now: restarted.now)
            #expect(restarted.host.events(to: plain).count == (accepted ? 0 : 1))
        }
    }
}

import Foundation
import Testing
import VigilProtocol
import VigilConfig
@testable import VigilLifecycle

/// The write-ahead event journal: its record format, and recovery from a
/// crash at any point (a torn write, or between the steps of a compaction).
@Suite("event journal: records, replay, crash points")
struct JournalTests {
    let plain = Harness.plain
    let accessory = Harness.accessory

    @Test func durabilityIsAConfigKey() throws {
        let defaults = DaemonConfig(system: true)
        #expect(defaults.durability == .process)
        #expect(try DaemonConfig.parse("durability = \"power\"\n", file: "/etc/vigil/vigild.toml", defaults: defaults).durability == .power)
        do {
            _ = try DaemonConfig.parse("durability = \"disk\"\n", file: "/etc/vigil/vigild.toml", defaults: defaults)
            Issue.record("durability = \"disk\" was accepted")
        } catch {
            #expect(error.field == "durability" && error.file == "/etc/vigil/vigild.toml")
            #expect(error.message.contains("process") && error.message.contains("power"))
        }
    }

    @Test func crc32MatchesTheStandardCheckValue() {
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
        // The 8-byte loop and the byte tail agree with each other at every split.
        let bytes = (0..<100).map { UInt8(truncatingIfNeeded: $0 * 37) }
        var bitwise: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            bitwise ^= UInt32(byte)
            for _ in 0..<8 { bitwise = bitwise & 1 != 0 ? 0xEDB8_8320 ^ (bitwise >> 1) : bitwise >> 1 }
        }
        #expect(CRC32.checksum(bytes) == bitwise ^ 0xFFFF_FFFF)
    }

    @Test func everyRecordKindRoundTrips() throws {
        var event = QueuedEvent(
            kind: "ble.notification",
            attributes: [
                "n": .number(-1.5e300), "s": "héllo\u{202E}", "null": .null, "t": true, "f": false,
                "a": .array([1, "x", .object(["deep": .array([])])]), "o": .object([:]),
            ],
            payload: Array(0...255), wakeMode: .bluetoothCentral, stream: "s/1")
        event.seq = 42
        event.everSent = true
        var plainEvent = QueuedEvent(kind: "test")
        plainEvent.seq = 43
        let records: [JournalRecord] = [
            .enqueued(app: "a", event: event),
            .enqueued(app: "b", event: plainEvent),
            .merged(app: "a", seq: 42, offset: 256, bytes: [1, 2, 3]),
            .merged(app: "a", seq: 42, offset: 259, bytes: []),
            .sent(app: "a", upTo: 42),
            .acknowledged(app: "a", upTo: 42),
            .withdrawn(app: "b", seqs: [43, 7]),
            .withdrawn(app: "b", seqs: []),
            .sentEach(app: "a", seqs: [44, 46]),
            .acknowledgedEach(app: "a", seqs: [44]),
            .renumbered(app: "a", seq: 45, to: 47),
            .drops(app: "b", unreported: 3, firstKind: "x", total: 9),
            .drops(app: "b", unreported: 0, firstKind: nil, total: 9),
            .forceQuit(app: "b", true),
            .forceQuit(app: "a", false),
            .sent(app: "a", upTo: 48, to: ProcessIdentity(pid: 4242, startTime: 1 << 40)),
            .sentEach(app: "a", seqs: [49], to: ProcessIdentity(pid: -1, startTime: 0)),
        ]
        var encoder = JournalEncoder()
        for record in records { encoder.append(record) }
        let contents = try #require(JournalFormat.read(JournalFormat.header(generation: 7) + encoder.bytes))
        #expect(contents.generation == 7)
        #expect(contents.records == records)
        #expect(contents.stoppedEarly == nil)
    }

    /// `sent` records of daemons before the receiving process was recorded
    /// (no bytes after the seqs) still read, as sent to no known process;
    /// replayed, they leave an event no process may acknowledge later.
    @Test func sentRecordsWithoutAProcessStillRead() throws {
        func body(_ tag: UInt8, _ rest: [UInt8]) -> [UInt8] {
            var bytes: [UInt8] = [tag]
            bytes.appendLE(UInt32(1))
            bytes += Array("a".utf8) + rest
            var record: [UInt8] = []
            record.appendLE(UInt32(bytes.count))
            record.appendLE(CRC32.checksum(bytes))
            return record + bytes
        }
        var seq: [UInt8] = []
        seq.appendLE(UInt64(5))
        var each: [UInt8] = []
        each.appendLE(UInt32(1))
        each.appendLE(UInt64(6))
        let old = JournalFormat.header(generation: 1) + body(3, seq) + body(8, each)
        let contents = try #require(JournalFormat.read(old))
        #expect(contents.records == [.sent(app: "a", upTo: 5, to: nil), .sentEach(app: "a", seqs: [6], to: nil)])
        #expect(contents.stoppedEarly == nil)

        // Replayed: the last record says who has it; a renumbering forgets it.
        var event = QueuedEvent(kind: "test")
        event.seq = 5
        var apps: [String: SavedApp] = [:]
        let process = ProcessIdentity(pid: 7, startTime: 99)
        JournalReplay.apply([.enqueued(app: "a", event: event), .sent(app: "a", upTo: 5, to: process)], to: &apps)
        #expect(apps["a"]?.queue.events.first?.sentTo == process)
        JournalReplay.apply([.sent(app: "a", upTo: 5)], to: &apps)
        #expect(apps["a"]?.queue.events.first?.sentTo == nil)
        #expect(apps["a"]?.queue.events.first?.everSent == true)
        JournalReplay.apply([.sentEach(app: "a", seqs: [5], to: process), .renumbered(app: "a", seq: 5, to: 9)], to: &apps)
        #expect(apps["a"]?.queue.events.first?.sentTo == nil)
    }

    @Test func aDamagedRecordEndsTheJournalThere() throws {
        var encoder = JournalEncoder()
        encoder.append(.sent(app: "a", upTo: 1))
        let first = encoder.bytes.count
        encoder.append(.sent(app: "a", upTo: 2))
        encoder.append(.sent(app: "a", upTo: 3))
        var bytes = JournalFormat.header(generation: 1) + encoder.bytes
        bytes[JournalFormat.headerSize + first + 9] ^= 0x40  // in the second record's body
        let contents = try #require(JournalFormat.read(bytes))
        #expect(contents.records == [.sent(app: "a", upTo: 1)])
        #expect(contents.stoppedEarly?.contains("CRC") == true)
        // A broken header: no journal at all.
        var header = JournalFormat.header(generation: 1)
        header[5] ^= 1
        #expect(JournalFormat.read(header) == nil)
        #expect(JournalFormat.read(Array("VGJ".utf8)) == nil)
    }

    // MARK: The engine's changes, journaled and replayed

    /// Drives the engine through every kind of queue change, committing the
    /// journal after each step as the daemon does (one write per loop turn),
    /// and remembers the state after each commit.
    struct Run {
        var steps: [(name: String, end: Int, state: [String: SavedApp])] = []
        var bytes: [UInt8]
        let snapshot: [String: SavedApp]
        let generation: UInt64
    }

    func scenario(snapshotAfter skip: Int = 0) throws -> Run {
        let h = Harness(queueLimit: 4)
        var encoder = JournalEncoder()
        var snapshot: [String: SavedApp] = [:]
        var run: Run?
        let steps: [(String, () throws -> Void)] = [
            ("active", { try h.active(self.plain) }),
            ("deliver", { try h.deliver("a") }),
            ("deliver", { try h.deliver("b") }),
            ("ack", { h.engine.acknowledge(self.plain, upTo: 1, now: h.now) }),
            ("background", {
                try h.engine.moveToBackground(self.plain, now: h.now)
                h.advance(h.engine.timings.suspendGrace)
            }),
            ("queue while suspended", { try h.deliver("held", mode: .externalAccessory) }),
            ("stream", {
                try h.engine.deliver(
                    QueuedEvent(kind: "session.data", attributes: ["session": 1], payload: [1, 2], wakeMode: .externalAccessory, stream: "s"),
                    to: self.accessory, now: h.now)
            }),
            ("merge", { _ = h.engine.merge([3, 4, 5], into: self.accessory, if: { $0.stream == "s" }, now: h.now) }),
            ("merge", { _ = h.engine.merge([6], into: self.accessory, if: { $0.stream == "s" }, now: h.now) }),
            ("connect", { try h.active(self.accessory) }),
            ("stream in flight", {
                try h.engine.deliver(
                    QueuedEvent(kind: "session.data", attributes: ["session": 1], payload: [7], wakeMode: .externalAccessory, stream: "s"),
                    to: self.accessory, now: h.now)
                _ = h.engine.merge([8, 9], into: self.accessory, if: { $0.stream == "s" }, now: h.now)
            }),
            ("withdraw", {
                try h.deliver("connected", to: self.accessory)
                h.engine.disconnected(self.accessory)
                try h.deliver("connected", to: self.accessory)
                h.engine.withdraw(from: self.accessory, reason: "came and went") { $0.kind == "connected" }
            }),
            ("fill", { for _ in 0..<2 { _ = try? h.deliver("fill", to: self.plain) } }),
            ("drop", { _ = try? h.deliver("dropped", to: self.plain) }),
            ("force-quit", { try h.engine.forceQuit(self.plain, now: h.now) }),
            ("reconnect", { _ = h.engine.connected(self.accessory, now: h.now) }),
            ("ack all", { h.engine.acknowledge(self.accessory, upTo: 99, now: h.now) }),
            ("launch", { try h.engine.launch(self.plain, now: h.now) }),
            ("connect", { _ = h.engine.connected(self.plain, now: h.now) }),
            ("ack, overflow report", { h.engine.acknowledge(self.plain, upTo: 99, now: h.now) }),
            // Per-source order (issue 26): a held event is overtaken, then renumbered.
            ("background", {
                try h.engine.moveToBackground(self.accessory, now: h.now)
                h.advance(h.engine.timings.suspendGrace)
            }),
            ("held for the foreground", { try h.deliver("ble.connected", to: self.accessory, mode: .bluetoothCentral) }),
            ("another source goes ahead", { try h.deliver("test", to: self.accessory) }),
            ("ack past the held event", { h.engine.acknowledge(self.accessory, upTo: 99, now: h.now) }),
            ("foreground: renumbered", { try h.engine.moveToForeground(self.accessory, now: h.now) }),
            ("ack the renumbered event", { h.engine.acknowledge(self.accessory, upTo: 99, now: h.now) }),
        ]
        for (index, (name, step)) in steps.enumerated() {
            try step()
            h.engine.journalChanges(into: &encoder)
            if index == skip {
                // A compaction here: the snapshot holds all so far, the journal starts over.
                snapshot = h.engine.savedState()
                encoder.reset(after: snapshot)
                run = Run(bytes: [], snapshot: snapshot, generation: 5)
            }
            if index > skip {
                run!.steps.append((name, encoder.bytes.count, h.engine.savedState()))
            }
        }
        run!.bytes = JournalFormat.header(generation: 5) + encoder.bytes
        return run!
    }

    @Test func replayingTheJournalOnTheSnapshotGivesTheEnginesState() throws {
        // With the compaction after each step in turn.
        for skip in 0..<25 {
            let run = try scenario(snapshotAfter: skip)
            let recovery = JournalReplay.recover(snapshot: run.snapshot, snapshotGeneration: 5, journal: run.bytes)
            #expect(recovery.problems.isEmpty)
            #expect(recovery.apps == run.steps.last!.state, "snapshot after step \(skip)")
            // Idempotent: replaying once more changes nothing.
            var twice = recovery.apps
            let problems = JournalReplay.apply(JournalFormat.read(run.bytes)!.records, to: &twice)
            #expect(problems.isEmpty)
            #expect(twice == recovery.apps)
        }
    }

    /// A SIGKILL can end a write anywhere: every prefix of the journal must
    /// replay to a consistent state, the state after the last whole commit
    /// once the prefix reaches it, and never reuse a seq it may have sent.
    @Test func aJournalCutAtEveryByteRecoversAPrefixOfTheChanges() throws {
        let run = try scenario()
        let header = JournalFormat.headerSize
        let whole = JournalFormat.read(run.bytes)!.records
        for length in 0...run.bytes.count {
            let prefix = Array(run.bytes[..<length])
            let recovery = JournalReplay.recover(snapshot: run.snapshot, snapshotGeneration: 5, journal: prefix)
            if length < header {
                #expect(recovery.journalUnreadable)
                #expect(recovery.apps == run.snapshot)
                continue
            }
            #expect(recovery.problems.isEmpty, "cut at \(length)")
            // Exactly the records that fit, applied in order.
            var expected = run.snapshot
            JournalReplay.apply(Array(whole.prefix(recovery.replayedRecords)), to: &expected)
            #expect(recovery.apps == expected, "cut at \(length)")
            // At a commit boundary: the engine's state at that moment.
            if let step = run.steps.last(where: { $0.end + header == length }) {
                #expect(recovery.apps == step.state, "cut after '\(step.name)'")
            }
            // Every seq the journal shows as issued stays used.
            let issued = whole.prefix(recovery.replayedRecords).compactMap { record -> UInt64? in
                if case let .enqueued(app, event) = record, app == plain { return event.seq }
                return nil
            }
            if let highest = issued.max() {
                let queue = EventQueue(limit: 4, restoring: recovery.apps[plain]!.queue)
                #expect(queue.nextSeq > highest, "cut at \(length)")
            }
        }
    }

    /// A compaction is three steps: new journal file (header only), snapshot
    /// renamed into place, new journal renamed over the old. A crash between
    /// any two leaves one of these pairs on disk; each recovers the same state.
    @Test func aCrashBetweenTheStepsOfACompactionLosesAndRepeatsNothing() throws {
        let run = try scenario(snapshotAfter: 6)
        let engineState = run.steps.last!.state
        let oldSnapshot = run.snapshot
        let newSnapshot = engineState
        let oldJournal = run.bytes
        let newJournal = JournalFormat.header(generation: 6)
        let cases: [(String, [String: SavedApp], UInt64, [UInt8]?)] = [
            ("before the snapshot's rename", oldSnapshot, 5, oldJournal),
            ("after the snapshot's rename, before the journal's", newSnapshot, 6, oldJournal),
            ("after both renames", newSnapshot, 6, newJournal),
        ]
        for (point, snapshot, generation, journal) in cases {
            let recovery = JournalReplay.recover(snapshot: snapshot, snapshotGeneration: generation, journal: journal)
            #expect(recovery.problems.isEmpty, "\(point)")
            #expect(recovery.apps == engineState, "\(point)")
            #expect(recovery.generation >= generation, "\(point)")
        }
    }

    @Test func seqsStayAboveEveryIssuedOneAfterAckAndCompaction() throws {
        let h = Harness()
        try h.active(plain)
        var encoder = JournalEncoder()
        for _ in 0..<3 { try h.deliver("x") }
        h.engine.acknowledge(plain, upTo: 3, now: h.now)
        h.engine.journalChanges(into: &encoder)
        // Compacted: the snapshot's queue is empty, its high-water mark is not.
        let snapshot = h.engine.savedState()
        #expect(snapshot[plain]?.queue.events.isEmpty == true)
        let restored = Harness()
        restored.engine.restore(snapshot, now: 0)
        #expect(try restored.deliver("y").seq == 4)
        // Not compacted: the journal alone carries it.
        let empty = Harness().engine.savedState()
        let recovery = JournalReplay.recover(
            snapshot: empty, snapshotGeneration: 1, journal: JournalFormat.header(generation: 1) + encoder.bytes)
        let fromJournal = Harness()
        fromJournal.engine.restore(recovery.apps, now: 0)
        #expect(try fromJournal.deliver("y").seq == 4)
    }

    @Test func onlyAcknowledgementsMayWaitForTheNextWrite() throws {
        // The daemon writes the encoder's bytes only when `mustWrite`: an ack
        // alone waits (a crash then redelivers, flagged, what was acked).
        var encoder = JournalEncoder()
        encoder.append(.acknowledged(app: "a", upTo: 3))
        #expect(!encoder.mustWrite && !encoder.bytes.isEmpty)
        var event = QueuedEvent(kind: "test")
        event.seq = 4
        let mustWrite: [JournalRecord] = [
            .enqueued(app: "a", event: event), .merged(app: "a", seq: 4, offset: 0, bytes: [1]), .sent(app: "a", upTo: 4),
            .withdrawn(app: "a", seqs: [4]), .drops(app: "a", unreported: 1, firstKind: "x", total: 1), .forceQuit(app: "a", true),
        ]
        for record in mustWrite {
            var encoder = encoder
            encoder.append(record)
            #expect(encoder.mustWrite, "\(record) waited")
            // Written together, in order, after the ack that waited.
            #expect(JournalFormat.read(JournalFormat.header(generation: 1) + encoder.bytes)?.records == [.acknowledged(app: "a", upTo: 3), record])
            encoder.clear()
            #expect(!encoder.mustWrite && encoder.bytes.isEmpty)
        }
        encoder.append(.sent(app: "a", upTo: 4))
        encoder.reset(after: [:])
        #expect(!encoder.mustWrite)
    }

    @Test func anAcknowledgementLostWithItsWriteOnlyRedeliversFlagged() throws {
        // What a crash between an ack and the next write leaves: the journal
        // up to the event's send. The event comes back as redelivered, same seq.
        let h = Harness()
        try h.active(plain)
        var encoder = JournalEncoder()
        try h.deliver("seen")
        h.engine.journalChanges(into: &encoder)
        #expect(encoder.mustWrite)
        let written = encoder.bytes
        encoder.clear()
        h.engine.acknowledge(plain, upTo: 1, now: h.now)
        h.engine.journalChanges(into: &encoder)
        #expect(!encoder.mustWrite)  // the ack waits: the crash comes now
        let recovery = JournalReplay.recover(snapshot: [:], snapshotGeneration: 1, journal: JournalFormat.header(generation: 1) + written)
        let restored = Harness()
        restored.engine.restore(recovery.apps, now: 0)
        try restored.active(plain)
        #expect(restored.host.events(to: plain).map(\.seq) == [1])
        #expect(restored.host.events(to: plain).map(\.redelivered) == [true])
        #expect(try restored.deliver("next").seq == 2)
    }

    @Test func sentEventsAreRedeliveredAsSuchAfterRecovery() throws {
        let h = Harness()
        try h.active(plain)
        var encoder = JournalEncoder()
        try h.deliver("seen")
        try h.engine.moveToBackground(plain, now: h.now)
        h.advance(h.engine.timings.suspendGrace)
        try h.deliver("unseen", mode: .externalAccessory)  // waits for the foreground
        h.engine.journalChanges(into: &encoder)
        let recovery = JournalReplay.recover(
            snapshot: [:], snapshotGeneration: 1, journal: JournalFormat.header(generation: 1) + encoder.bytes)
        let restored = Harness()
        restored.engine.restore(recovery.apps, now: 0)
        try restored.active(plain)
        #expect(restored.host.events(to: plain).map(\.redelivered) == [true, false])
        #expect(restored.host.events(to: plain).map(\.seq) == [1, 2])
    }

    @Test func allSendableEventsAreMarkedSentBeforeTheFirstSend() throws {
        // The daemon writes the journal once, at the first send of a batch:
        // every event of the batch must already be journaled as sent then.
        final class JournalingHost: LifecycleHost {
            var engine: LifecycleEngine?
            var encoder = JournalEncoder()
            var journaledAtSend: [[JournalRecord]] = []
            func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32 { 7 }
            func freeze(_ app: String) {}
            func thaw(_ app: String) {}
            func kill(_ app: String) {}
            func record(_ decision: Decision) {}
            func stateChanged(_ app: String, from old: AppState, to new: AppState) {}
            func send(_ message: OutboundMessage, to app: String) {
                guard case .event = message else { return }
                engine!.journalChanges(into: &encoder)
                journaledAtSend.append(JournalFormat.read(JournalFormat.header(generation: 1) + encoder.bytes)!.records)
            }
        }
        let host = JournalingHost()
        let engine = LifecycleEngine(timings: Timings(), queueLimit: 10, host: host)
        host.engine = engine
        engine.updateManifests([plain: AppManifest(id: plain, exec: ["/bin/true"])])
        try engine.launch(plain, now: 1)
        for kind in ["a", "b", "c"] { _ = try engine.deliver(QueuedEvent(kind: kind), to: plain, now: 1) }
        _ = engine.connected(plain, now: 1)
        #expect(host.journaledAtSend.count == 3)
        #expect(host.journaledAtSend.first?.contains(.sent(app: plain, upTo: 3)) == true)
    }
}

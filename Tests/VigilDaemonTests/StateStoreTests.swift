import Foundation
import Glibc
import Logging
import Testing
import VigilBluetooth
import VigilLifecycle
import VigilProtocol
@testable import VigilDaemon

/// Saving costs what changed (issue 34): the state file is written only for
/// a part that changed, a wake leaves it alone (its queue changes are in the
/// journal), and what is written still comes back whole.
@Suite("state store: saves what changed")
struct StateStoreTests {
    static let app = "org.vigil.test.saver"

    /// A store in a fresh folder, and an engine with one app, launched,
    /// connected and in the background (no process: the host says pid 4242).
    final class Rig {
        let directory: String
        let store: StateStore
        let engine: LifecycleEngine
        let host = RecordingHost()
        let logger = Logger(label: "state-store-tests")
        var now: UInt64 = 1_000_000_000

        init(bluetooth: SavedBluetooth?) throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("vigil-store-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            store = StateStore(directory: directory)
            engine = LifecycleEngine(timings: Timings(), queueLimit: 64, host: host)
            engine.updateManifests([StateStoreTests.app: AppManifest(
                id: StateStoreTests.app, exec: ["/bin/true"], backgroundModes: [.bluetoothCentral, .fetch])])
            try engine.launch(StateStoreTests.app, now: now)
            _ = engine.identified(StateStoreTests.app, now: now)
            _ = engine.connected(StateStoreTests.app, now: now)
            try engine.moveToBackground(StateStoreTests.app, now: now)
            store.open(engine: engine, bluetooth: bluetooth, logger: logger)
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }

        /// The state file's inode: a write replaces the file (rename), so it changes.
        var stateFile: ino_t {
            var info = stat()
            return stat(store.path, &info) == 0 ? info.st_ino : 0
        }

        /// One wake as the daemon handles it: the event queued and sent
        /// (journaled at once), acknowledged (waiting in the journal's
        /// encoder), the app suspended.
        func wake(_ payload: String) throws {
            now += 250_000_000
            let seq = try engine.deliver(QueuedEvent(kind: "test", payload: Array(payload.utf8)), to: StateStoreTests.app, now: now).seq
            store.commit(engine, logger: logger)
            engine.acknowledge(StateStoreTests.app, upTo: seq, now: now)
            store.commit(engine, logger: logger)
            engine.finishedProcessing(StateStoreTests.app, now: now)
            store.commit(engine, logger: logger)
        }

        /// What a restarted daemon reads.
        func reloaded() -> DaemonSnapshot {
            StateStore(directory: directory).load(logger: logger)
        }
    }

    /// The app's central use with `count` straps, each connected and subscribed.
    static func straps(_ count: Int) throws -> SavedBluetooth {
        let addresses = (0..<count).map { String(format: "AA:BB:CC:00:00:%02X", $0) }
        let subscriptions = addresses.map {
            #"{"path":{"peripheral":"\#($0)","service":"180d","characteristic":"2a37"}}"#
        }
        let json = #"{"central":{"\#(app)":{"restoreIdentifier":"hrm","connects":["\#(addresses.joined(separator: "\",\""))"],"#
            + #""subscriptions":[\#(subscriptions.joined(separator: ","))],"scanAll":false,"allowDuplicates":false}},"peripheral":{}}"#
        return try JSONDecoder().decode(SavedBluetooth.self, from: Data(json.utf8))
    }

    @Test func wakesAcknowledgementsAndSuspensionsWriteNoStateFile() throws {
        let straps = try Self.straps(30)
        let rig = try Rig(bluetooth: straps)
        let file = rig.stateFile, generation = rig.store.generation
        for number in 1...5 {
            try rig.wake("wake-\(number)")
            // The coalesced save after a wake: nothing for the components (none asked, no version moved).
            #expect(rig.store.needsSave(rig.engine), "an acknowledgement waits in the journal's encoder for the save")
            rig.store.save(engine: rig.engine, bluetooth: .none, snapshot: false, logger: rig.logger)
            #expect(!rig.store.needsSave(rig.engine))
        }
        #expect(rig.stateFile == file, "a wake rewrote the state file")
        #expect(rig.store.generation == generation, "a wake started a new journal")
        // The same Bluetooth part, made again (a component asked): no write either.
        rig.store.save(engine: rig.engine, bluetooth: .some(straps), snapshot: false, logger: rig.logger)
        #expect(rig.stateFile == file, "an unchanged Bluetooth part was written again")

        // Everything comes back from the snapshot and the journal: no event
        // (all acknowledged), the numbering after the five, the straps.
        let restored = rig.reloaded()
        let queue = try #require(restored.apps[Self.app]?.queue)
        #expect(queue.events.isEmpty)
        #expect(queue.nextSeq == 6)
        #expect(restored.bluetooth == straps)
    }

    @Test func aChangedPartIsWrittenWithTheSameJournalAndAnUnjournaledChangeTakesASnapshot() throws {
        let two = try Self.straps(2)
        let rig = try Rig(bluetooth: try Self.straps(1))
        let generation = rig.store.generation
        try rig.wake("before the new strap")
        let before = rig.stateFile

        // A new subscription: the file is written, the journal goes on (same generation).
        rig.store.save(engine: rig.engine, bluetooth: .some(two), snapshot: false, logger: rig.logger)
        #expect(rig.stateFile != before)
        #expect(rig.store.generation == generation)
        try rig.wake("after the new strap")
        var restored = rig.reloaded()
        #expect(restored.bluetooth == two)
        #expect(restored.apps[Self.app]?.queue.nextSeq == 3, "the journal after the Bluetooth-only write was not replayed")

        // A refresh schedule is not journaled: the next save takes a snapshot (a new journal).
        try rig.engine.scheduleRefresh(Self.app, interval: 900, earliestBegin: nil, now: rig.now)
        #expect(rig.store.needsSave(rig.engine))
        rig.store.save(engine: rig.engine, bluetooth: .none, snapshot: false, logger: rig.logger)
        #expect(rig.store.generation == generation + 1)
        restored = rig.reloaded()
        #expect(restored.apps[Self.app]?.refresh != nil)
        #expect(restored.bluetooth == two, "the snapshot lost the Bluetooth part it did not remake")
        #expect(restored.apps[Self.app]?.queue.nextSeq == 3)
    }

    @Test func subscriptionsSortByPathWithoutReflection() {
        let paths = [("BB", "180d", "2a37"), ("AA", "180f", "2a19"), ("AA", "180d", "2a38"), ("AA", "180d", "2a37")]
            .map { CharacteristicPath(peripheral: $0.0, service: $0.1, characteristic: $0.2) }
        #expect(paths.sorted().map(\.description) == ["AA/180d/2a37", "AA/180d/2a38", "AA/180f/2a19", "BB/180d/2a37"])
    }
}

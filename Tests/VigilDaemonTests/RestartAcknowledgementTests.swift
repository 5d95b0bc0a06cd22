import Foundation
import Logging
import Testing
import VigilLifecycle
import VigilProtocol
@testable import VigilDaemon

/// Issue 26 part 2: acknowledgements of restored events, read by a daemon
/// that adopted the app after a SIGKILL, are durable by the next save. The
/// daemon's start steps in their order (load, restore, open's checkpoint,
/// adoption with its wake, the app's reconnection), then the case the
/// fault suite hit under CPU load: the adopted app's window ends before it
/// acknowledges anything, a new event wakes it, and only then it
/// acknowledges the restored events. No process is spawned: the engine and
/// the store are driven as the daemon drives them (`withEngine` commits
/// after every call; the half-second save commits everything).
@Suite("restart: acknowledgements of restored events are saved")
struct RestartAcknowledgementTests {
    static let app = "org.vigil.test.restarted"
    static let manifest = AppManifest(id: app, exec: ["/bin/true"], backgroundModes: [.bluetoothCentral])
    static let process = ProcessIdentity(pid: 4242, startTime: 77)

    /// One daemon's engine and store on `directory`.
    final class Daemon {
        let store: StateStore
        let engine: LifecycleEngine
        let host = RecordingHost()
        let logger = Logger(label: "restart-ack-tests")

        init(directory: String) {
            store = StateStore(directory: directory)
            engine = LifecycleEngine(timings: Timings(), queueLimit: 64, host: host)
        }

        /// `DaemonCore.start`'s order: manifests, load, restore, open.
        func start(now: UInt64) {
            engine.updateManifests([RestartAcknowledgementTests.app: RestartAcknowledgementTests.manifest])
            let saved = store.load(logger: logger)
            engine.restore(saved.apps, now: now)
            store.open(engine: engine, bluetooth: saved.bluetooth, logger: logger)
        }

        /// An engine call as `withEngine` makes it: the journal committed after.
        func call(_ body: (LifecycleEngine) throws -> Void) rethrows {
            try body(engine)
            store.commit(engine, logger: logger)
        }

        func save() {
            store.save(engine: engine, bluetooth: .none, snapshot: false, logger: logger)
        }

        var queued: [UInt64] { engine.apps[RestartAcknowledgementTests.app]!.queue.events.map(\.seq) }
    }

    static func folder() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("vigil-restart-ack-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// The next daemon after a SIGKILL: started on `directory`, the frozen
    /// app adopted and woken for its restored events, and reconnected.
    static func adoptedAndReconnected(directory: String, receiver: ProcessIdentity?, now: UInt64) -> Daemon {
        let daemon = Daemon(directory: directory)
        daemon.start(now: now)
        daemon.call { $0.adopt(app, pid: process.pid, frozen: true, now: now) }
        daemon.call { _ = $0.identified(app, now: now) }
        daemon.call { _ = $0.connected(app, now: now, process: receiver) }
        return daemon
    }

    /// The first daemon: three events sent to the app's process, none
    /// acknowledged; then it is SIGKILLed (nothing saved beyond the journal).
    static func firstDaemon(directory: String, receiver: ProcessIdentity?) throws -> [UInt64] {
        let daemon = Daemon(directory: directory)
        var now: UInt64 = 1_000_000_000
        daemon.start(now: now)
        try daemon.call { try $0.launch(app, now: now) }
        daemon.call { _ = $0.identified(app, now: now) }
        daemon.call { _ = $0.connected(app, now: now, process: receiver) }
        try daemon.call { try $0.moveToBackground(app, now: now) }
        var seqs: [UInt64] = []
        for n in 0..<3 {
            now += 10_000_000
            try daemon.call { seqs.append(try $0.deliver(QueuedEvent(kind: "test", payload: [UInt8(n)]), to: app, now: now).seq) }
        }
        #expect(daemon.queued == seqs)
        return seqs
    }

    @Test(arguments: [Optional(process), nil])
    func acknowledgementsReadAfterTheAdoptedAppsWindowAreSaved(receiver: ProcessIdentity?) throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let restored = try Self.firstDaemon(directory: directory, receiver: receiver)

        // The second daemon adopts the frozen app and wakes it for its restored events.
        let daemon = Daemon(directory: directory)
        var now: UInt64 = 50_000_000_000
        daemon.start(now: now)
        #expect(daemon.queued == restored)
        daemon.call { $0.adopt(Self.app, pid: Self.process.pid, frozen: true, now: now) }
        #expect(daemon.engine.apps[Self.app]?.state == .background)
        // Its window ends before it reconnects (a loaded machine).
        now += 600_000_000_000  // past any wake budget
        daemon.call { $0.advance(to: now) }
        #expect(daemon.engine.apps[Self.app]?.state == .suspended)
        // A new event wakes it; it reconnects and gets everything, the restored events redelivered.
        let fresh = try { () throws -> UInt64 in
            var seq: UInt64 = 0
            try daemon.call { seq = try $0.deliver(QueuedEvent(kind: "test"), to: Self.app, now: now).seq }
            return seq
        }()
        daemon.call { _ = $0.identified(Self.app, now: now) }
        daemon.call { _ = $0.connected(Self.app, now: now, process: receiver) }
        #expect(daemon.engine.apps[Self.app]?.queue.unacknowledgedCount == restored.count + 1)
        // It acknowledges the restored events one by one, then the daemon's save comes.
        for seq in restored { daemon.call { $0.acknowledge(Self.app, upTo: seq, now: now) } }
        #expect(daemon.queued == [fresh])
        daemon.save()

        // SIGKILL: the next daemon has only the new event.
        let next = Daemon(directory: directory)
        next.start(now: now + 1)
        #expect(next.queued == [fresh])
    }

    @Test(arguments: [Optional(process), nil])
    func acknowledgementsOfRestoredEventsAreSavedWithoutANewEvent(receiver: ProcessIdentity?) throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let restored = try Self.firstDaemon(directory: directory, receiver: receiver)

        let now: UInt64 = 50_000_000_000
        let daemon = Self.adoptedAndReconnected(directory: directory, receiver: receiver, now: now)
        for seq in restored { daemon.call { $0.acknowledge(Self.app, upTo: seq, now: now) } }
        #expect(daemon.queued.isEmpty)
        daemon.save()

        let next = Daemon(directory: directory)
        next.start(now: now + 1)
        #expect(next.queued.isEmpty)
    }

    /// As the evidence run had it: the adopted app reconnects and is sent its
    /// restored events, its window ends before its first acknowledgement
    /// (frozen mid-event), two new events wake it (sent at once, behind the
    /// restored ones), and it acknowledges the restored events, then the first new one.
    @Test(arguments: [Optional(process), nil])
    func acknowledgementsAfterAWakeBehindRestoredEventsAreSaved(receiver: ProcessIdentity?) throws {
        let directory = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let restored = try Self.firstDaemon(directory: directory, receiver: receiver)

        var now: UInt64 = 50_000_000_000
        let daemon = Self.adoptedAndReconnected(directory: directory, receiver: receiver, now: now)
        #expect(daemon.engine.apps[Self.app]?.queue.unacknowledgedCount == restored.count)
        now += 600_000_000_000
        daemon.call { $0.advance(to: now) }
        #expect(daemon.engine.apps[Self.app]?.state == .suspended)
        var fresh: [UInt64] = []
        for _ in 0..<2 {
            try daemon.call { fresh.append(try $0.deliver(QueuedEvent(kind: "test"), to: Self.app, now: now).seq) }
        }
        #expect(daemon.engine.apps[Self.app]?.queue.unacknowledgedCount == restored.count + 2)
        for seq in restored + [fresh[0]] { daemon.call { $0.acknowledge(Self.app, upTo: seq, now: now) } }
        #expect(daemon.queued == [fresh[1]])
        daemon.save()

        let next = Daemon(directory: directory)
        next.start(now: now + 1)
        #expect(next.queued == [fresh[1]])
    }
}

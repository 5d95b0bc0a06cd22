import FoundationEssentials
import Glibc
import Logging
import VigilBluetooth
import VigilLifecycle
import VigilSystem

/// What must outlive the daemon (unacknowledged events, sequence numbers,
/// force-quit flags, what apps asked of Bluetooth): a snapshot, `state.json`,
/// and a write-ahead journal of the event queues' changes since it,
/// `events.journal` (format: `JournalFormat`).
///
/// Every queue change is in the journal before the daemon relies on it: before
/// an event goes to an app and before a port is read again (`commit`, one
/// write per loop turn). A snapshot is taken on the debounced save, or when
/// the journal passes `journalLimit`, and then the journal starts over
/// (`checkpoint`). Each journal has a generation; the snapshot names the
/// generation that continues it, so on start the journal is replayed on top of
/// the snapshot exactly once, however a crash fell between the steps.
///
/// With `durability = "process"` (the default) written means in the page
/// cache: it survives any crash of vigild, SIGKILL included. `"power"` adds
/// fdatasync (and a directory fsync around renames) before relying on it.
/// What the state file holds; each component saves its part (`DaemonComponent.save`).
typealias DaemonSnapshot = StateStore.Contents

final class StateStore {
    let path: String
    let journalPath: String
    let directory: String
    let durability: Durability
    /// The journal is compacted into a snapshot once it is this long.
    static let journalLimit = 16 << 20

    private var journalFD: Int32 = -1
    /// The generation of the open journal (and of the snapshot it continues).
    private(set) var generation: UInt64 = 0
    private(set) var journalSize = 0
    private var encoder = JournalEncoder()
    /// Set while journal writes fail, so the failure is logged once.
    private var writeFailure: String?

    init(directory: String, durability: Durability = .process) {
        self.directory = directory
        self.durability = durability
        path = directory + "/state.json"
        journalPath = directory + "/events.journal"
    }

    deinit {
        if journalFD >= 0 { Glibc.close(journalFD) }
    }

    struct Contents: Codable {
        var version = 1
        var apps: [String: SavedApp]
        /// Absent in files of daemons before Bluetooth.
        var bluetooth: SavedBluetooth?
        /// The generation of the journal that continues this snapshot; absent
        /// in files of daemons before the journal.
        var journal: UInt64?
    }

    // MARK: Start

    /// The snapshot with the journal replayed on top. A file that cannot be
    /// read is logged and moved aside (never overwritten), and the daemon starts
    /// with what is left.
    func load(logger: Logger) -> Contents {
        var contents = Contents(apps: [:])
        if FileManager.default.fileExists(atPath: path) {
            do {
                contents = try JSONDecoder().decode(Contents.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
            } catch {
                let aside = moveAside(path)
                logger.error("cannot read \(path) (\(error)); moved to \(aside), starting from the journal alone")
            }
        }
        let journal = FileManager.default.contents(atPath: journalPath).map([UInt8].init)
        let recovery = JournalReplay.recover(snapshot: contents.apps, snapshotGeneration: contents.journal ?? 0, journal: journal)
        if recovery.journalUnreadable {
            // Only ever created whole (written, then renamed into place): not a crash's doing.
            logger.error("\(journalPath) is unreadable; moved to \(moveAside(journalPath))")
        }
        for note in recovery.notes { logger.notice("\(journalPath): \(note)") }
        for problem in recovery.problems { logger.error("\(journalPath): \(problem)") }
        contents.apps = recovery.apps
        generation = recovery.generation
        return contents
    }

    /// Starts the journal: a snapshot of what `load` returned (as restored
    /// into the engine) and a new, empty journal. Never appends to the old
    /// journal, whose tail may be torn.
    func open(engine: LifecycleEngine, bluetooth: SavedBluetooth?, logger: Logger) {
        removeTemporaryFiles()
        do {
            try checkpoint(apps: engine.savedState(), bluetooth: bluetooth)
        } catch {
            logger.error("cannot start the event journal in \(directory): \(error); what vigild reads or queues is not durable until it can")
        }
    }

    // MARK: Running

    /// Writes the engine's queue changes since the last call to the journal,
    /// with one write (and an fdatasync with `durability = "power"`). Returns
    /// whether the journal is due for compaction.
    ///
    /// Records that may wait (`JournalRecord.mayWait`: acknowledgements) are
    /// written only with one that may not, or with `all` (the snapshot's
    /// commit, at most half a second later while anything changes): an ack
    /// then costs no write of its own, and a crash before it is written only
    /// redelivers, flagged, what the app had acknowledged.
    @discardableResult
    func commit(_ engine: LifecycleEngine, logger: Logger, all: Bool = false) -> Bool {
        engine.journalChanges(into: &encoder)
        guard !encoder.bytes.isEmpty, all || encoder.mustWrite else { return false }
        guard journalFD >= 0 else {
            encoder.clear()  // no journal (logged when it failed): only the snapshots remain
            return false
        }
        do {
            CrashPoint.reach(encoder.crashPointNames, .before)
            try append(encoder.bytes)
            CrashPoint.reach(encoder.crashPointNames, .after)
            encoder.clear()
            if let failure = writeFailure {
                logger.notice("event journal writes work again (after: \(failure))")
                writeFailure = nil
            }
        } catch {
            // Kept for the next try; a part written is cut off again, so no
            // record is ever followed by garbage.
            _ = ftruncate(journalFD, off_t(journalSize))
            if writeFailure == nil {
                logger.error("cannot write \(journalPath): \(error); retrying on every change, nothing is durable meanwhile")
            }
            writeFailure = "\(error)"
            return false
        }
        return journalSize >= Self.journalLimit
    }

    /// Takes a snapshot and starts a new journal: the engine's changes so far
    /// first go to the current journal (so a failed snapshot loses nothing).
    func save(engine: LifecycleEngine, bluetooth: SavedBluetooth?, logger: Logger) {
        commit(engine, logger: logger, all: true)
        do {
            try checkpoint(apps: engine.savedState(), bluetooth: bluetooth)
        } catch {
            logger.error("cannot write \(path): \(error); the journal goes on")
        }
    }

    /// The three steps, each a crash point:
    /// 1. `events.journal.tmp`, generation g+1, header only;
    /// 2. `state.json` (naming g+1) written to a temporary file and renamed
    ///    into place: from here the old journal (g) is ignored on start;
    /// 3. the new journal renamed over the old one.
    /// A crash before 2 leaves the old snapshot and the whole old journal; one
    /// between 2 and 3 the new snapshot and an ignored old journal; one after
    /// 3 the new snapshot and an empty journal. None loses or repeats a change.
    private func checkpoint(apps: [String: SavedApp], bluetooth: SavedBluetooth?) throws {
        let next = generation + 1
        let newJournal = journalPath + ".tmp"
        let fd = Glibc.open(newJournal, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("open", newJournal) }
        do {
            try writeAll(fd, JournalFormat.header(generation: next), path: newJournal)
            if durability == .power { try sync(fd, newJournal) }
            let snapshot = try JSONEncoder().encode(Contents(apps: apps, bluetooth: bluetooth, journal: next))
            CrashPoint.reach("snapshot.state", .before)
            try replace(path, with: [UInt8](snapshot))
            CrashPoint.reach("snapshot.state", .after)
            CrashPoint.reach("snapshot.journal", .before)
            guard rename(newJournal, journalPath) == 0 else { throw failure("rename", journalPath) }
            CrashPoint.reach("snapshot.journal", .after)
            if durability == .power { try syncDirectory() }
        } catch {
            Glibc.close(fd)
            unlink(newJournal)
            throw error
        }
        if journalFD >= 0 { Glibc.close(journalFD) }
        journalFD = fd
        generation = next
        journalSize = JournalFormat.headerSize
        encoder.reset(after: apps)
    }

    // MARK: Files

    private func append(_ bytes: [UInt8]) throws {
        try writeAll(journalFD, bytes, path: journalPath)
        journalSize += bytes.count
        if durability == .power { try sync(journalFD, journalPath) }
    }

    /// Writes `bytes` to a temporary file and renames it over `target`.
    private func replace(_ target: String, with bytes: [UInt8]) throws {
        let temporary = target + ".tmp"
        let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("open", temporary) }
        defer { Glibc.close(fd) }
        try writeAll(fd, bytes, path: temporary)
        if durability == .power { try sync(fd, temporary) }
        guard rename(temporary, target) == 0 else { throw failure("rename", target) }
        if durability == .power { try syncDirectory() }
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw failure("write", path)
                }
                offset += written
            }
        }
    }

    private func sync(_ fd: Int32, _ path: String) throws {
        guard fdatasync(fd) == 0 else { throw failure("fdatasync", path) }
    }

    private func syncDirectory() throws {
        let fd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("open", directory) }
        defer { Glibc.close(fd) }
        guard fsync(fd) == 0 else { throw failure("fsync", directory) }
    }

    private func removeTemporaryFiles() {
        unlink(path + ".tmp")
        unlink(journalPath + ".tmp")
    }

    /// Renames an unreadable file out of the way, keeping it for a post-mortem.
    private func moveAside(_ file: String) -> String {
        let aside = file + ".unreadable-\(Int(Date().timeIntervalSince1970))"
        return rename(file, aside) == 0 ? aside : "(could not move it: \(String(cString: strerror(errno))))"
    }

    private func failure(_ operation: String, _ path: String) -> DaemonError {
        DaemonError("\(operation) \(path): \(String(cString: strerror(errno)))")
    }
}

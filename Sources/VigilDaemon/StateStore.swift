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
///
/// Saving costs what changed, not what exists (issue 34). The state file
/// has two parts: the apps (queues, force-quit flags, refresh schedules),
/// continued by the journal, and what components saved (Bluetooth
/// intents). Each is kept encoded as last written, and a save re-encodes
/// only the part that changed:
/// - the apps are snapshotted (`checkpoint`, a new journal) only when the
///   engine changed something the journal does not carry
///   (`LifecycleEngine.unjournaledChanges`: refresh schedules, apps added
///   or dropped), when the journal passes `compactionSize`, at start and at
///   stop: a wake, an acknowledgement or a suspension changes queues only,
///   and those are in the journal already;
/// - the components' part is made again only by components whose
///   `savedPartVersion` moved (or that asked with `scheduleSave`), and
///   written only when it differs from what the file holds. That write
///   keeps the apps part as it was (the same bytes, naming the same
///   journal generation), so it needs no new journal: the file before and
///   after the rename are both a snapshot the open journal continues.
/// What the state file holds; each component saves its part (`DaemonComponent.save`).
typealias DaemonSnapshot = StateStore.Contents

final class StateStore {
    let path: String
    let journalPath: String
    let directory: String
    let durability: Durability
    /// The journal is compacted into a snapshot at once when it is this long.
    static let journalLimit = 16 << 20
    /// ... and on the next coalesced save once it is this long (a wake adds
    /// about 150 bytes: thousands of wakes share one snapshot).
    static let compactionSize = 1 << 20

    private var journalFD: Int32 = -1
    /// The generation of the open journal (and of the snapshot it continues).
    private(set) var generation: UInt64 = 0
    private(set) var journalSize = 0
    private var encoder = JournalEncoder()
    /// Set while journal writes fail, so the failure is logged once.
    private var writeFailure: String?

    /// The apps part of the state file as last written (JSON), continued by
    /// the journal of `generation`.
    private var appsJSON: [UInt8] = Array("{}".utf8)
    /// The engine's `unjournaledChanges` when `appsJSON` was taken.
    private var snapshotEngineChanges: UInt64 = 0
    /// The components' part as last written, and its JSON (nil: absent).
    private(set) var savedBluetooth: SavedBluetooth?
    private var bluetoothJSON: [UInt8]?
    /// Each component's `savedPartVersion` at its last `save(into:)`.
    var componentVersions: [ObjectIdentifier: UInt64] = [:]
    /// A component asked for a save (`DaemonCore.scheduleSave`): the next
    /// save asks every component, not only those whose version moved.
    var partsRequested = false
    /// The state file is behind what was last made (a write failed): the
    /// next save writes it whatever changed.
    private var fileBehind = false

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
            bluetoothJSON = try bluetooth.map(Self.encode)
            savedBluetooth = bluetooth
            try checkpoint(engine)
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

    /// Whether a save has anything to do without asking the components:
    /// records waiting in the encoder (acknowledgements), a change of the
    /// engine's the journal does not carry, a journal due for compaction, a
    /// component's request, or a state file behind.
    func needsSave(_ engine: LifecycleEngine) -> Bool {
        !encoder.bytes.isEmpty || engine.unjournaledChanges != snapshotEngineChanges
            || journalSize >= Self.compactionSize || partsRequested || fileBehind
    }

    /// Saves what changed since the last save. The engine's changes so far
    /// go to the journal first (waiting ones too: so a failed snapshot loses
    /// nothing, and an acknowledgement waits at most one save). Then:
    /// - a snapshot of the apps and a new journal (`checkpoint`), with
    ///   `snapshot`, or when the engine changed what the journal does not
    ///   carry, or when the journal passed `compactionSize`;
    /// - otherwise, when `bluetooth` (the components' part, nil: unchanged,
    ///   not asked) differs from what the file holds, the file rewritten
    ///   with the apps part as it was;
    /// - otherwise nothing.
    func save(engine: LifecycleEngine, bluetooth: SavedBluetooth??, snapshot: Bool, logger: Logger) {
        commit(engine, logger: logger, all: true)
        partsRequested = false
        do {
            if let bluetooth, bluetooth != savedBluetooth {
                bluetoothJSON = try bluetooth.map(Self.encode)
                savedBluetooth = bluetooth
                fileBehind = true
            }
            let appsDue = snapshot || engine.unjournaledChanges != snapshotEngineChanges || journalSize >= Self.compactionSize
            guard appsDue || fileBehind else { return }
            if appsDue {
                try checkpoint(engine)
            } else {
                CrashPoint.reach("state.parts", .before)
                try replace(path, with: stateFile(generation: generation))
                CrashPoint.reach("state.parts", .after)
            }
            fileBehind = false
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
    private func checkpoint(_ engine: LifecycleEngine) throws {
        let apps = engine.savedState()
        let changes = engine.unjournaledChanges
        let encodedApps = try Self.encode(apps)
        let next = generation + 1
        let newJournal = journalPath + ".tmp"
        let fd = Glibc.open(newJournal, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("open", newJournal) }
        do {
            try writeAll(fd, JournalFormat.header(generation: next), path: newJournal)
            if durability == .power { try sync(fd, newJournal) }
            CrashPoint.reach("snapshot.state", .before)
            try replace(path, with: stateFile(generation: next, apps: encodedApps))
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
        appsJSON = encodedApps
        snapshotEngineChanges = changes
    }

    /// The state file (`Contents`) from its parts' JSON: the apps (these, or
    /// as last written), the components' part as last made, and the
    /// generation of the journal that continues the apps.
    private func stateFile(generation: UInt64, apps: [UInt8]? = nil) -> [UInt8] {
        var bytes = Array(#"{"version":1,"journal":"#.utf8)
        bytes += Array(String(generation).utf8)
        bytes += Array(#","apps":"#.utf8)
        bytes += apps ?? appsJSON
        if let bluetoothJSON {
            bytes += Array(#","bluetooth":"#.utf8)
            bytes += bluetoothJSON
        }
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    /// One part as JSON.
    private static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        try [UInt8](JSONEncoder().encode(value))
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

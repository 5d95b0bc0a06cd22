import VigilProtocol

/// How far what the daemon read or queued is made durable before it is relied
/// on (config key `durability`).
public enum Durability: String, Sendable, CaseIterable {
    /// Written to the kernel (page cache) before it is relied on: survives a
    /// crash or SIGKILL of vigild, not a power loss or kernel crash.
    case process
    /// As `process`, and synced to the disk (fdatasync) before it is relied
    /// on: survives a power loss too, at the cost of a disk flush per loop turn.
    case power
}

/// One change to an app's durable queue state, in the order it happened.
///
/// The write-ahead event journal is a sequence of these on top of the last
/// state snapshot (`state.json`); replaying them gives the queues the daemon
/// had when it died. Every record is idempotent on replay (an enqueue is
/// skipped below the queue's high-water mark, a merge carries its offset), so
/// a record applied twice changes nothing.
public enum JournalRecord: Sendable, Equatable {
    /// An event was queued with `event.seq` (its payload as queued).
    case enqueued(app: String, event: QueuedEvent)
    /// `bytes` were appended to the unsent event `seq`, whose payload was
    /// `offset` bytes long before.
    case merged(app: String, seq: UInt64, offset: Int, bytes: [UInt8])
    /// Every event up to `seq` has now been sent to some process of the app
    /// (so it goes out again as `redelivered`), last to `process` when known
    /// (which may acknowledge them on a later connection; nil in records of
    /// daemons before 2026-11-28, read as unknown).
    case sent(app: String, upTo: UInt64, to: ProcessIdentity? = nil)
    /// These events have now been sent to some process of the app, last to
    /// `process`: written instead of `sent` when a waiting event below them
    /// was not sent to that process (held back for the foreground while
    /// later sources went ahead, or sent to another process).
    case sentEach(app: String, seqs: [UInt64], to: ProcessIdentity? = nil)
    /// The app acknowledged every event up to `seq`; they are gone.
    case acknowledged(app: String, upTo: UInt64)
    /// The app acknowledged these events; they are gone. Written instead of
    /// `acknowledged` when an event below them stays (one it was not sent).
    case acknowledgedEach(app: String, seqs: [UInt64])
    /// A waiting event got a new seq, `to` (see `EventQueue`): it goes after
    /// every event queued so far. The old seq is never used again.
    case renumbered(app: String, seq: UInt64, to: UInt64)
    /// Unsent events withdrawn (coalesced away).
    case withdrawn(app: String, seqs: [UInt64])
    /// The queue's drop counters, as they now are.
    case drops(app: String, unreported: Int, firstKind: String?, total: Int)
    /// The user's force-quit flag, as it now is.
    case forceQuit(app: String, Bool)

    /// Whether the record may wait for the next write that cannot: only an
    /// acknowledgement. Lost in a crash, it brings back events the app already
    /// has, which the journal holds as sent: the next daemon redelivers them
    /// with their seqs, flagged `redelivered` (at-least-once; nothing lost, no
    /// seq reused). Every other record must be durable before the daemon
    /// relies on it (an event before the app can see it, `sent` before the app
    /// does, or the redelivery would not be flagged).
    public var mayWait: Bool {
        switch self {
        case .acknowledged, .acknowledgedEach: true
        default: false
        }
    }

    public var app: String {
        switch self {
        case let .enqueued(app, _), let .merged(app, _, _, _), let .sent(app, _, _), let .acknowledged(app, _),
             let .withdrawn(app, _), let .drops(app, _, _, _), let .forceQuit(app, _), let .sentEach(app, _, _),
             let .acknowledgedEach(app, _), let .renumbered(app, _, _):
            return app
        }
    }
}

// MARK: - File format

/// The journal's on-disk format: a 16-byte header, then records.
///
/// Header: `VGJ1`, the generation (UInt64 LE: the state snapshot it follows),
/// CRC32 of those 12 bytes. Record: body length (UInt32 LE), CRC32 of the body
/// (UInt32 LE), body. A record is only as long as its length says, so a torn
/// last record (a crash mid-write, or a power loss) fails its length or CRC
/// check and it and everything after it are ignored. Payload bytes are stored
/// raw (no JSON, no base64).
public enum JournalFormat {
    public static let magic: [UInt8] = Array("VGJ1".utf8)
    public static let headerSize = 16
    /// A record longer than this is taken for garbage, not allocated.
    public static let maxRecordSize = 64 << 20

    public static func header(generation: UInt64) -> [UInt8] {
        var bytes = magic
        bytes.appendLE(generation)
        bytes.appendLE(CRC32.checksum(bytes))
        return bytes
    }

    /// The generation in a header, or nil if `bytes` does not start with one.
    public static func generation(inHeader bytes: ArraySlice<UInt8>) -> UInt64? {
        guard bytes.count >= headerSize else { return nil }
        let start = bytes.startIndex
        guard Array(bytes[start..<start + 4]) == magic,
              CRC32.checksum(bytes[start..<start + 12]) == bytes.loadLE(UInt32.self, at: start + 12)
        else { return nil }
        return bytes.loadLE(UInt64.self, at: start + 4)
    }

    /// What a journal file holds.
    public struct Contents: Sendable {
        public var generation: UInt64
        public var records: [JournalRecord]
        /// Bytes from the start of the file up to the end of the last good record.
        public var validLength: Int
        /// Why reading stopped before the end, if it did (a torn last record).
        public var stoppedEarly: String?
    }

    /// Reads a whole journal file. Nil when the header is missing or broken.
    public static func read(_ bytes: [UInt8]) -> Contents? {
        guard let generation = generation(inHeader: bytes[...]) else { return nil }
        var contents = Contents(generation: generation, records: [], validLength: headerSize)
        var offset = headerSize
        while offset < bytes.count {
            guard bytes.count - offset >= 8 else {
                contents.stoppedEarly = "a torn record header at byte \(offset)"
                break
            }
            let length = Int(bytes.loadLE(UInt32.self, at: offset))
            let crc = bytes.loadLE(UInt32.self, at: offset + 4)
            guard length <= maxRecordSize, bytes.count - offset - 8 >= length else {
                contents.stoppedEarly = "a torn record (\(length) bytes announced) at byte \(offset)"
                break
            }
            let body = bytes[(offset + 8)..<(offset + 8 + length)]
            guard CRC32.checksum(body) == crc else {
                contents.stoppedEarly = "a record failing its CRC at byte \(offset)"
                break
            }
            var reader = ByteReader(body)
            guard let record = reader.record(), reader.atEnd else {
                contents.stoppedEarly = "an undecodable record at byte \(offset)"
                break
            }
            contents.records.append(record)
            offset += 8 + length
            contents.validLength = offset
        }
        return contents
    }
}

/// Turns records into journal bytes; the daemon writes `bytes` with one write(2).
public struct JournalEncoder: Sendable {
    public private(set) var bytes: [UInt8] = []
    /// Whether `bytes` holds a record that may not wait (`JournalRecord.mayWait`).
    public private(set) var mustWrite = false
    /// The force-quit flag of each app as the journal (or snapshot) has it, to
    /// journal only changes.
    var forceQuit: [String: Bool] = [:]
    /// Which kinds of record `bytes` holds (bits of `crashPointNames`).
    private var kinds: UInt8 = 0

    /// The crash points (docs/reliability.md) that writing `bytes` is: each
    /// kind of durable step it holds, and `journal.write` for any.
    /// `journal.enqueued` is also the seq reservation: an event's seq, and
    /// with it the app's next seq, is durable with its enqueue record.
    public var crashPointNames: [String] {
        var names = ["journal.write"]
        if kinds & 1 != 0 { names.append("journal.enqueued") }
        if kinds & 2 != 0 { names.append("journal.sent") }
        if kinds & 4 != 0 { names.append("journal.acknowledged") }
        if kinds & 8 != 0 { names.append("journal.renumbered") }
        return names
    }

    public init() {}

    /// Starts over after a snapshot that holds `apps`.
    public mutating func reset(after apps: [String: SavedApp]) {
        bytes.removeAll(keepingCapacity: true)
        mustWrite = false
        kinds = 0
        forceQuit = apps.mapValues(\.forceQuit)
    }

    /// The bytes were written; keeps the buffer for the next turn.
    public mutating func clear() {
        bytes.removeAll(keepingCapacity: bytes.capacity <= 4 << 20)
        mustWrite = false
        kinds = 0
    }

    public mutating func append(_ record: JournalRecord) {
        let start = bytes.count
        bytes.appendLE(UInt32(0))  // length and CRC, filled in below
        bytes.appendLE(UInt32(0))
        bytes.encode(record)
        let length = bytes.count - start - 8
        let crc = CRC32.checksum(bytes[(start + 8)...])
        bytes.storeLE(UInt32(length), at: start)
        bytes.storeLE(crc, at: start + 4)
        if !record.mayWait { mustWrite = true }
        switch record {
        case .enqueued: kinds |= 1
        case .sent, .sentEach: kinds |= 2
        case .acknowledged, .acknowledgedEach: kinds |= 4
        case .renumbered: kinds |= 8
        default: break
        }
    }
}

// MARK: - Replay

/// Applies journal records to what a snapshot holds.
public enum JournalReplay {
    /// What a daemon starts from: a snapshot and the journal file found beside it.
    public struct Recovery: Sendable {
        public var apps: [String: SavedApp]
        /// The highest generation seen: the next journal must be above it.
        public var generation: UInt64
        public var replayedRecords = 0
        /// Whether the journal was there but had no valid header (to move aside).
        public var journalUnreadable = false
        /// For the log: what was done.
        public var notes: [String] = []
        /// For the log, as errors: inconsistencies.
        public var problems: [String] = []
    }

    /// The snapshot (which names the journal generation that continues it)
    /// with the journal replayed on top, if it belongs to it. A journal older
    /// than the snapshot is already in it: a crash fell after the snapshot
    /// was renamed into place and before the new journal was.
    public static func recover(snapshot: [String: SavedApp], snapshotGeneration: UInt64, journal bytes: [UInt8]?) -> Recovery {
        var recovery = Recovery(apps: snapshot, generation: snapshotGeneration)
        guard let bytes else { return recovery }
        guard let journal = JournalFormat.read(bytes) else {
            recovery.journalUnreadable = true
            recovery.problems.append("the journal has no valid header (\(bytes.count) bytes)")
            return recovery
        }
        recovery.generation = max(snapshotGeneration, journal.generation)
        if journal.generation < snapshotGeneration {
            recovery.notes.append("journal generation \(journal.generation) is older than the snapshot's (\(snapshotGeneration)): already included")
            return recovery
        }
        if journal.generation > snapshotGeneration {
            recovery.problems.append("journal generation \(journal.generation) is newer than the snapshot's (\(snapshotGeneration)); replayed anyway")
        }
        recovery.problems += apply(journal.records, to: &recovery.apps)
        recovery.replayedRecords = journal.records.count
        var note = "replayed \(journal.records.count) journal record(s) onto the snapshot"
        if let stopped = journal.stoppedEarly {
            // The write in progress when the daemon died: nothing relied on it yet.
            note += "; ignored the last \(bytes.count - journal.validLength) byte(s): \(stopped)"
        }
        recovery.notes.append(note)
        return recovery
    }

    /// Applies `records` in order to `apps`; returns inconsistencies found
    /// (none in a journal the daemon wrote on top of this snapshot).
    @discardableResult
    public static func apply(_ records: [JournalRecord], to apps: inout [String: SavedApp]) -> [String] {
        var problems: [String] = []
        for record in records {
            let id = record.app
            var app = apps[id] ?? SavedApp(
                forceQuit: false,
                queue: SavedQueue(events: [], nextSeq: 1, totalDropped: 0, unreportedDrops: 0, firstDroppedKind: nil))
            if let problem = apply(record, to: &app) { problems.append("\(id): \(problem)") }
            apps[id] = app
        }
        return problems
    }

    static func apply(_ record: JournalRecord, to app: inout SavedApp) -> String? {
        switch record {
        case let .enqueued(_, event):
            // At or above the high-water mark only: an enqueue seen before
            // (and maybe acknowledged since) is not queued again.
            guard event.seq >= app.queue.nextSeq else { return nil }
            app.queue.events.append(event)
            app.queue.nextSeq = event.seq + 1
        case let .merged(_, seq, offset, bytes):
            guard let index = app.queue.events.lastIndex(where: { $0.seq == seq }) else {
                // Below the high-water mark the event is gone since (a replay of a replay).
                return seq < app.queue.nextSeq ? nil : "bytes merged into event \(seq), which was never queued"
            }
            let have = app.queue.events[index].payload.count
            guard have >= offset else { return "bytes merged at offset \(offset) of event \(seq), which has \(have)" }
            let already = have - offset  // applied before (a replay of a replay)
            if already < bytes.count { app.queue.events[index].payload.append(contentsOf: bytes[already...]) }
        case let .sent(_, seq, process):
            for index in app.queue.events.indices where app.queue.events[index].seq <= seq {
                app.queue.events[index].everSent = true
                app.queue.events[index].sentTo = process
            }
        case let .sentEach(_, seqs, process):
            for index in app.queue.events.indices where seqs.contains(app.queue.events[index].seq) {
                app.queue.events[index].everSent = true
                app.queue.events[index].sentTo = process
            }
        case let .acknowledged(_, seq):
            app.queue.events.removeAll { $0.seq <= seq }
            app.queue.nextSeq = max(app.queue.nextSeq, seq + 1)
        case let .acknowledgedEach(_, seqs):
            let gone = Set(seqs)
            app.queue.events.removeAll { gone.contains($0.seq) }
            if let highest = seqs.max() { app.queue.nextSeq = max(app.queue.nextSeq, highest + 1) }
        case let .renumbered(_, seq, new):
            app.queue.nextSeq = max(app.queue.nextSeq, new + 1)
            guard let index = app.queue.events.firstIndex(where: { $0.seq == seq }) else {
                // Applied before (a replay of a replay), or acknowledged since.
                return app.queue.events.contains { $0.seq == new } || seq < app.queue.nextSeq ? nil : "event \(seq) renumbered, which was never queued"
            }
            var event = app.queue.events.remove(at: index)
            event.seq = new
            event.sentTo = nil
            let at = app.queue.events.firstIndex { $0.seq > new } ?? app.queue.events.endIndex
            app.queue.events.insert(event, at: at)
        case let .withdrawn(_, seqs):
            let gone = Set(seqs)
            app.queue.events.removeAll { gone.contains($0.seq) }
        case let .drops(_, unreported, firstKind, total):
            app.queue.unreportedDrops = unreported
            app.queue.firstDroppedKind = firstKind
            app.queue.totalDropped = total
        case let .forceQuit(_, value):
            app.forceQuit = value
        }
        return nil
    }
}

// MARK: - Binary encoding

private enum RecordTag: UInt8 {
    case enqueued = 1, merged, sent, acknowledged, withdrawn, drops, forceQuit
    // Since per-source order (issue 26); older daemons do not read them.
    case sentEach, acknowledgedEach, renumbered
}

private enum ValueTag: UInt8 {
    case null = 0, falseValue, trueValue, number, string, array, object
}

extension [UInt8] {
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    mutating func storeLE(_ value: UInt32, at offset: Int) {
        Swift.withUnsafeBytes(of: value.littleEndian) { raw in
            for i in 0..<4 { self[offset + i] = raw[i] }
        }
    }

    mutating func appendString(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            appendLE(UInt32(utf8.count))
            append(contentsOf: utf8)
        }
    }

    mutating func appendBytes(_ bytes: [UInt8]) {
        appendLE(UInt32(bytes.count))
        append(contentsOf: bytes)
    }

    fileprivate mutating func encode(_ record: JournalRecord) {
        func start(_ tag: RecordTag, _ app: String) {
            append(tag.rawValue)
            appendString(app)
        }
        switch record {
        case let .enqueued(app, event):
            start(.enqueued, app)
            appendLE(event.seq)
            appendString(event.kind)
            var flags: UInt8 = 0
            if event.everSent { flags |= 1 }
            if event.wakeMode != nil { flags |= 2 }
            if event.stream != nil { flags |= 4 }
            append(flags)
            if let mode = event.wakeMode { appendString(mode.rawValue) }
            if let stream = event.stream { appendString(stream) }
            encode(.object(event.attributes))
            appendBytes(event.payload)
        case let .merged(app, seq, offset, bytes):
            start(.merged, app)
            appendLE(seq)
            appendLE(UInt64(offset))
            appendBytes(bytes)
        case let .sent(app, seq, process):
            start(.sent, app)
            appendLE(seq)
            appendProcess(process)
        case let .acknowledged(app, seq):
            start(.acknowledged, app)
            appendLE(seq)
        case let .withdrawn(app, seqs):
            start(.withdrawn, app)
            appendLE(UInt32(seqs.count))
            for seq in seqs { appendLE(seq) }
        case let .sentEach(app, seqs, process):
            start(.sentEach, app)
            appendLE(UInt32(seqs.count))
            for seq in seqs { appendLE(seq) }
            appendProcess(process)
        case let .acknowledgedEach(app, seqs):
            start(.acknowledgedEach, app)
            appendLE(UInt32(seqs.count))
            for seq in seqs { appendLE(seq) }
        case let .renumbered(app, seq, new):
            start(.renumbered, app)
            appendLE(seq)
            appendLE(new)
        case let .drops(app, unreported, firstKind, total):
            start(.drops, app)
            appendLE(UInt64(unreported))
            appendLE(UInt64(total))
            append(firstKind == nil ? 0 : 1)
            if let firstKind { appendString(firstKind) }
        case let .forceQuit(app, value):
            start(.forceQuit, app)
            append(value ? 1 : 0)
        }
    }

    /// A `sent` record's receiving process, at its end: absent when unknown,
    /// as in records written before it was recorded, which thus still read.
    fileprivate mutating func appendProcess(_ process: ProcessIdentity?) {
        guard let process else { return }
        appendLE(process.pid)
        appendLE(process.startTime)
    }

    fileprivate mutating func encode(_ value: JSONValue) {
        switch value {
        case .null: append(ValueTag.null.rawValue)
        case let .bool(flag): append(flag ? ValueTag.trueValue.rawValue : ValueTag.falseValue.rawValue)
        case let .number(number):
            append(ValueTag.number.rawValue)
            appendLE(number.bitPattern)
        case let .string(string):
            append(ValueTag.string.rawValue)
            appendString(string)
        case let .array(values):
            append(ValueTag.array.rawValue)
            appendLE(UInt32(values.count))
            for value in values { encode(value) }
        case let .object(members):
            append(ValueTag.object.rawValue)
            appendLE(UInt32(members.count))
            for key in members.keys.sorted() {
                appendString(key)
                encode(members[key]!)
            }
        }
    }
}

extension Collection<UInt8> where Index == Int {
    func loadLE<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        var value: T = 0
        for i in 0..<MemoryLayout<T>.size { value |= T(self[offset + i]) << (8 * i) }
        return value
    }
}

/// Reads a record body; every read is bounds-checked (nil on garbage).
private struct ByteReader {
    let bytes: ArraySlice<UInt8>
    var offset: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        offset = bytes.startIndex
    }

    var atEnd: Bool { offset == bytes.endIndex }

    mutating func byte() -> UInt8? {
        guard offset < bytes.endIndex else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
        let size = MemoryLayout<T>.size
        guard bytes.endIndex - offset >= size else { return nil }
        defer { offset += size }
        return bytes.loadLE(T.self, at: offset)
    }

    mutating func count() -> Int? {
        guard let count = integer(UInt32.self).map(Int.init), count <= bytes.endIndex - offset else { return nil }
        return count
    }

    mutating func raw() -> [UInt8]? {
        guard let count = count() else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func string() -> String? {
        guard let count = count() else { return nil }
        defer { offset += count }
        return String(validating: bytes[offset..<offset + count], as: UTF8.self)
    }

    mutating func value(depth: Int = 0) -> JSONValue? {
        guard depth < 64, let tag = byte().flatMap(ValueTag.init(rawValue:)) else { return nil }
        switch tag {
        case .null: return .null
        case .falseValue: return .bool(false)
        case .trueValue: return .bool(true)
        case .number: return integer(UInt64.self).map { .number(Double(bitPattern: $0)) }
        case .string: return string().map(JSONValue.string)
        case .array:
            guard let count = count() else { return nil }
            var values: [JSONValue] = []
            for _ in 0..<count {
                guard let value = value(depth: depth + 1) else { return nil }
                values.append(value)
            }
            return .array(values)
        case .object:
            guard let count = count() else { return nil }
            var members: [String: JSONValue] = [:]
            for _ in 0..<count {
                guard let key = string(), let value = value(depth: depth + 1) else { return nil }
                members[key] = value
            }
            return .object(members)
        }
    }

    /// Reads the optional process at the end of a `sent` record
    /// (`appendProcess`) into `identity` (nil when absent); false on garbage.
    mutating func process(into identity: inout ProcessIdentity?) -> Bool {
        identity = nil
        if atEnd { return true }
        guard let pid = integer(Int32.self), let startTime = integer(UInt64.self) else { return false }
        identity = ProcessIdentity(pid: pid, startTime: startTime)
        return true
    }

    mutating func record() -> JournalRecord? {
        guard let tag = byte().flatMap(RecordTag.init(rawValue:)), let app = string() else { return nil }
        switch tag {
        case .enqueued:
            guard let seq = integer(UInt64.self), let kind = string(), let flags = byte() else { return nil }
            var wakeMode: BackgroundMode?
            if flags & 2 != 0 {
                guard let mode = string().flatMap(BackgroundMode.init(rawValue:)) else { return nil }
                wakeMode = mode
            }
            var stream: String?
            if flags & 4 != 0 {
                guard let name = string() else { return nil }
                stream = name
            }
            guard case let .object(attributes)? = value(), let payload = raw() else { return nil }
            var event = QueuedEvent(kind: kind, attributes: attributes, payload: payload, wakeMode: wakeMode, stream: stream)
            event.seq = seq
            event.everSent = flags & 1 != 0
            return .enqueued(app: app, event: event)
        case .merged:
            guard let seq = integer(UInt64.self), let offset = integer(UInt64.self), offset <= UInt64(Int.max),
                  let bytes = raw() else { return nil }
            return .merged(app: app, seq: seq, offset: Int(offset), bytes: bytes)
        case .sent:
            var process: ProcessIdentity?
            guard let seq = integer(UInt64.self), self.process(into: &process) else { return nil }
            return .sent(app: app, upTo: seq, to: process)
        case .acknowledged:
            return integer(UInt64.self).map { .acknowledged(app: app, upTo: $0) }
        case .withdrawn, .sentEach, .acknowledgedEach:
            guard let count = integer(UInt32.self), Int(count) * 8 <= bytes.endIndex - offset else { return nil }
            var seqs: [UInt64] = []
            for _ in 0..<count { seqs.append(integer(UInt64.self)!) }
            switch tag {
            case .sentEach:
                var process: ProcessIdentity?
                guard self.process(into: &process) else { return nil }
                return .sentEach(app: app, seqs: seqs, to: process)
            case .acknowledgedEach: return .acknowledgedEach(app: app, seqs: seqs)
            default: return .withdrawn(app: app, seqs: seqs)
            }
        case .renumbered:
            guard let seq = integer(UInt64.self), let new = integer(UInt64.self) else { return nil }
            return .renumbered(app: app, seq: seq, to: new)
        case .drops:
            guard let unreported = integer(UInt64.self), let total = integer(UInt64.self),
                  unreported <= UInt64(Int.max), total <= UInt64(Int.max), let hasKind = byte() else { return nil }
            var firstKind: String?
            if hasKind == 1 {
                guard let kind = string() else { return nil }
                firstKind = kind
            } else if hasKind != 0 {
                return nil
            }
            return .drops(app: app, unreported: Int(unreported), firstKind: firstKind, total: Int(total))
        case .forceQuit:
            guard let value = byte(), value <= 1 else { return nil }
            return .forceQuit(app: app, value == 1)
        }
    }
}

// MARK: - CRC32

/// CRC-32 (IEEE 802.3, as zlib's `crc32`), slice-by-8: the journal checksums
/// every byte the daemon reads, so this is on the hot path.
public enum CRC32 {
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for n in 0..<256 {
            var c = UInt32(n)
            for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            tables[n] = c
        }
        for n in 0..<256 {
            for k in 1..<8 {
                let previous = tables[(k - 1) * 256 + n]
                tables[k * 256 + n] = tables[Int(previous & 0xFF)] ^ (previous >> 8)
            }
        }
        return tables
    }()

    public static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        if let result = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return Array(bytes).withUnsafeBytes { checksum($0) }
    }

    public static func checksum(_ buffer: UnsafeRawBufferPointer) -> UInt32 {
        tables.withUnsafeBufferPointer { t in
            var crc: UInt32 = 0xFFFF_FFFF
            var index = 0
            let count = buffer.count
            while count - index >= 8 {
                let one = buffer.loadUnaligned(fromByteOffset: index, as: UInt32.self).littleEndian ^ crc
                let two = buffer.loadUnaligned(fromByteOffset: index + 4, as: UInt32.self).littleEndian
                crc = t[7 * 256 + Int(one & 0xFF)] ^ t[6 * 256 + Int((one >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((one >> 16) & 0xFF)] ^ t[4 * 256 + Int(one >> 24)]
                    ^ t[3 * 256 + Int(two & 0xFF)] ^ t[2 * 256 + Int((two >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((two >> 16) & 0xFF)] ^ t[Int(two >> 24)]
                index += 8
            }
            while index < count {
                crc = t[Int((crc ^ UInt32(buffer[index])) & 0xFF)] ^ (crc >> 8)
                index += 1
            }
            return crc ^ 0xFFFF_FFFF
        }
    }
}

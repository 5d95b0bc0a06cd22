import Glibc
import VigilProtocol
import VigilSystem

/// A session's log, as its one writer (the daemon) sees it: a file-backed ring
/// (`SessionLogLayout`) that device bytes are read straight into. What was read
/// is in the page cache the moment read(2) returns, so it survives the
/// daemon's death; the app reads it in place. Room in the ring is the
/// session's buffer: bytes read and not yet acknowledged.
public final class SessionLog {
    public let file: MappedFile
    public let capacity: Int

    /// The log file of a session, in the daemon's state directory.
    public static func path(session: Int, in directory: String) -> String {
        "\(directory)/session-logs/\(session).log"
    }

    /// Opens the log an earlier daemon left, or starts an empty one. A file
    /// that is not a usable log (torn, foreign, another version) is replaced,
    /// and `discarded` says why: its bytes are lost, and the caller reports it.
    public static func openOrCreate(path: String, capacity: Int) throws(SystemError) -> (log: SessionLog, discarded: String?) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let capacity = max(page, (capacity + page - 1) / page * page)
        var discarded: String?
        if access(path, F_OK) == 0 {
            let existing = try MappedFile.open(path: path, writable: true)
            guard let problem = SessionLogLayout.problem(in: existing.base, size: existing.size) else {
                return (SessionLog(file: existing), nil)
            }
            discarded = problem
            unlink(path)
        }
        let file = try MappedFile.open(path: path, writable: true, creatingSize: SessionLogLayout.fileSize(capacity: capacity))
        SessionLogLayout.format(file.base, capacity: capacity)
        return (SessionLog(file: file), discarded)
    }

    private init(file: MappedFile) {
        self.file = file
        capacity = Int(SessionLogLayout.load(.capacity, from: file.base))
    }

    public var path: String { file.path }

    /// Stream offset after the last byte read from the device.
    public var written: UInt64 { SessionLogLayout.load(.written, from: file.base) }
    /// Stream offset after the last byte the holder acknowledged.
    public var acknowledged: UInt64 { SessionLogLayout.load(.acknowledged, from: file.base) }
    /// Bytes read and not yet acknowledged.
    public var buffered: Int { Int(written - acknowledged) }
    public var isFull: Bool { buffered >= capacity }

    /// Whether the daemon that wrote this log was killed during a read (see
    /// `SessionLogLayout.Field.readInProgress`). Cleared by `clearInterruptedRead`.
    public var wasInterruptedDuringRead: Bool {
        // The mark holds the offset the read started at, plus one: a daemon
        // that died after storing the read's count (written moved on) lost nothing.
        let mark = SessionLogLayout.load(.readInProgress, from: file.base)
        return mark != 0 && mark - 1 == written
    }

    public func clearInterruptedRead() { SessionLogLayout.store(0, .readInProgress, to: file.base) }

    /// Marks a read in progress that does not go straight into the ring (a
    /// record read into the endpoint's buffer first, `appendRecord`ed once it
    /// fits): a daemon killed before it is in the log leaves the mark, and
    /// the next daemon reports the possible loss. Cleared with `clearInterruptedRead`.
    public func markReadInProgress() { SessionLogLayout.store(written + 1, .readInProgress, to: file.base) }

    /// Reads from `read` straight into the ring's free space (contiguous, up
    /// to `limit` bytes) and counts what it gave. `read` returns a byte count,
    /// or nil for none (would block, end of file, failure: the caller's to
    /// tell apart). Returns the count.
    ///
    /// The count is stored the instant read(2) returns; the in-progress mark
    /// around it lets the next daemon say so if this one dies in between.
    public func fill<E: Error>(limit: Int = .max, _ read: (UnsafeMutableRawBufferPointer) throws(E) -> Int?) throws(E) -> Int? {
        let written = self.written
        let start = Int(written % UInt64(capacity))
        let room = min(capacity - start, capacity - buffered, limit)
        guard room > 0 else { return 0 }
        let target = UnsafeMutableRawBufferPointer(start: file.base + SessionLogLayout.headerSize + start, count: room)
        SessionLogLayout.store(written + 1, .readInProgress, to: file.base)
        let count: Int?
        do {
            count = try read(target)
        } catch {
            clearInterruptedRead()
            throw error
        }
        if let count, count > 0 {
            CrashPoint.reach("session.written", .before)
            SessionLogLayout.store(written + UInt64(count), .written, to: file.base)
            CrashPoint.reach("session.written", .after)
        }
        clearInterruptedRead()
        return count
    }

    /// Appends one record (`SessionRecords`: its length, then its bytes) whole
    /// or not at all: false when the ring has no room for all of it now.
    /// `written` moves once, after every byte is in place (two pieces where
    /// the ring wraps), so a daemon killed in between leaves no torn record.
    public func appendRecord(_ record: UnsafeRawBufferPointer) -> Bool {
        precondition(record.count <= SessionRecords.maxLength, "a record longer than \(SessionRecords.maxLength) bytes")
        let total = SessionRecords.headerSize + record.count
        guard capacity - buffered >= total else { return false }
        let written = self.written
        let header = [UInt8(record.count & 0xff), UInt8(record.count >> 8)]
        var offset = written
        header.withUnsafeBytes { copyIn($0, at: &offset) }
        copyIn(record, at: &offset)
        SessionLogLayout.store(written + UInt64(total), .written, to: file.base)
        return true
    }

    /// Copies `bytes` into the ring at stream offset `offset` (wrapping), and moves `offset` past them.
    private func copyIn(_ bytes: UnsafeRawBufferPointer, at offset: inout UInt64) {
        var done = 0
        while done < bytes.count {
            let start = Int(offset % UInt64(capacity))
            let count = min(capacity - start, bytes.count - done)
            (file.base + SessionLogLayout.headerSize + start).copyMemory(from: bytes.baseAddress! + done, byteCount: count)
            done += count
            offset += UInt64(count)
        }
    }

    /// In a log of records: the end of the last whole record that starts at or
    /// after `offset` and ends within `limit` bytes of it, or, when even the
    /// first record is longer than `limit`, that first record's end (a record
    /// is never cut). `offset` must be a record's start.
    public func recordsEnd(from offset: UInt64, limit: Int) -> UInt64 {
        var end = offset
        let written = self.written
        while end + UInt64(SessionRecords.headerSize) <= written {
            let header = SessionLogLayout.copy(from: file.base, offset: end, length: SessionRecords.headerSize)
            let next = end + UInt64(SessionRecords.headerSize) + UInt64(Int(header[0]) | Int(header[1]) << 8)
            guard next <= written else { break }
            if next - offset > UInt64(limit), end > offset { break }
            end = next
            if end - offset >= UInt64(limit) { break }
        }
        return end
    }

    /// Copies out a range that was written and not yet acknowledged.
    public func bytes(from offset: UInt64, count: Int) -> [UInt8] {
        precondition(offset >= acknowledged && offset + UInt64(count) <= written, "a range outside the unacknowledged bytes")
        return SessionLogLayout.copy(from: file.base, offset: offset, length: count)
    }

    /// Whether pages that hold only acknowledged bytes may still be resident
    /// (`releaseAcknowledgedPages` gives them back).
    public private(set) var holdsAcknowledgedPages = false

    /// The holder is done with everything before `offset`: its room is free
    /// again. The pages stay resident (the next lap of the ring writes into
    /// them without a page fault) until `releaseAcknowledgedPages`, which the
    /// daemon calls once the session goes quiet.
    public func acknowledge(upTo offset: UInt64) {
        guard offset > acknowledged else { return }
        precondition(offset <= written, "acknowledging bytes never written")
        CrashPoint.reach("session.acknowledged", .before)
        SessionLogLayout.store(offset, .acknowledged, to: file.base)
        CrashPoint.reach("session.acknowledged", .after)
        holdsAcknowledgedPages = true
    }

    /// Gives every page of the ring that holds no unacknowledged byte back to
    /// the kernel (the file is sparse there again), so a quiet session keeps
    /// no data memory: with nothing unacknowledged, the whole ring, partial
    /// pages at the ends included (the next read writes afresh).
    public func releaseAcknowledgedPages() {
        guard holdsAcknowledgedPages else { return }
        holdsAcknowledgedPages = false
        let buffered = self.buffered
        guard buffered > 0 else {
            file.release(offset: SessionLogLayout.headerSize, count: capacity)
            return
        }
        // The free part of the ring, [written, acknowledged + capacity), as one
        // or two pieces; `release` keeps the partial pages at its ends.
        let start = Int(written % UInt64(capacity))
        let count = capacity - buffered
        let first = min(count, capacity - start)
        file.release(offset: SessionLogLayout.headerSize + start, count: first)
        if first < count { file.release(offset: SessionLogLayout.headerSize, count: count - first) }
    }

    /// Deletes the file; the object stays usable until released (the mapping
    /// is the process's until then).
    public func remove() {
        unlink(file.path)
    }
}

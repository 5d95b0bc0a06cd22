import Foundation
import Glibc
import Testing
import VigilProtocol
import VigilSystem
@testable import VigilStreams

@Suite("session logs: the ring device bytes are read into")
struct SessionLogTests {
    /// A scratch folder removed at the end.
    final class Scratch {
        let path: String
        init() {
            var template = Array("/tmp/vigil-log-XXXXXX".utf8CString)
            path = String(cString: mkdtemp(&template)!)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        var log: String { "\(path)/1.log" }
    }

    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Fills the log from `bytes` as a device read would, as far as it has room.
    @discardableResult
    static func feed(_ log: SessionLog, _ bytes: [UInt8]) -> Int {
        var offset = 0
        while offset < bytes.count {
            let count = log.fill { buffer in
                let count = min(buffer.count, bytes.count - offset)
                bytes[offset..<offset + count].withUnsafeBytes { buffer.copyMemory(from: $0) }
                return count
            }
            guard let count, count > 0 else { break }
            offset += count
        }
        return offset
    }

    static func pattern(_ count: Int, from start: Int = 0) -> [UInt8] {
        (start..<start + count).map { UInt8(truncatingIfNeeded: $0 % 251) }
    }

    @Test func bytesComeOutInOrderAcrossTheRingsWrap() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page).log
        #expect(log.capacity == Self.page)
        #expect(Self.feed(log, Self.pattern(3000)) == 3000)
        log.acknowledge(upTo: 3000)
        // 3000 more: 1096 fit before the ring's end, the rest wraps to its start.
        #expect(Self.feed(log, Self.pattern(3000, from: 3000)) == 3000)
        #expect(log.written == 6000 && log.acknowledged == 3000 && log.buffered == 3000)
        #expect(log.bytes(from: 3000, count: 3000) == Self.pattern(3000, from: 3000))
        // An app reads the same range through its own read-only mapping.
        let reader = try MappedFile.open(path: scratch.log, writable: false)
        #expect(SessionLogLayout.copy(from: reader.base, offset: 3500, length: 2000) == Self.pattern(2000, from: 3500))
    }

    @Test func aFullRingTakesNothingUntilAcknowledged() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page).log
        #expect(Self.feed(log, Self.pattern(Self.page + 100)) == Self.page)
        #expect(log.isFull)
        #expect(log.fill { _ in Issue.record("read into a full ring"); return 1 } == 0)
        log.acknowledge(upTo: 100)
        #expect(Self.feed(log, Self.pattern(500, from: Self.page)) == 100)
    }

    @Test func anotherDaemonTakesTheLogBackWithItsCounters() throws {
        let scratch = Scratch()
        do {
            let log = try SessionLog.openOrCreate(path: scratch.log, capacity: 2 * Self.page).log
            Self.feed(log, Self.pattern(5000))
            log.acknowledge(upTo: 1200)
        }
        let (log, discarded) = try SessionLog.openOrCreate(path: scratch.log, capacity: 64 * Self.page)
        #expect(discarded == nil)
        #expect(log.capacity == 2 * Self.page, "the log keeps the capacity it was made with")
        #expect(log.written == 5000 && log.acknowledged == 1200)
        #expect(log.bytes(from: 1200, count: 3800) == Self.pattern(3800, from: 1200))
    }

    @Test func aReadInProgressWhenTheDaemonDiedIsSeenOnlyIfItsCountWasNotStored() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page).log
        Self.feed(log, Self.pattern(100))
        #expect(!log.wasInterruptedDuringRead)
        // Killed inside read(2): the mark holds the start, the count was never stored.
        SessionLogLayout.store(log.written + 1, .readInProgress, to: log.file.base)
        #expect(log.wasInterruptedDuringRead)
        // Killed after storing the count, before clearing the mark: nothing was lost.
        SessionLogLayout.store(log.written, .readInProgress, to: log.file.base)
        #expect(!log.wasInterruptedDuringRead)
        log.clearInterruptedRead()
        #expect(SessionLogLayout.load(.readInProgress, from: log.file.base) == 0)
    }

    @Test func aFailedReadLeavesNoMark() throws {
        struct Failed: Error {}
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page).log
        #expect(throws: Failed.self) { try log.fill { (_) throws(Failed) -> Int? in throw Failed() } }
        #expect(SessionLogLayout.load(.readInProgress, from: log.file.base) == 0)
        #expect(log.written == 0)
    }

    @Test(arguments: [
        ("truncated", Array("VIGILLOG".utf8)),
        ("foreign", [UInt8](repeating: 0x41, count: 8192)),
    ])
    func anUnusableFileIsReplacedAndSaysWhy(_ name: String, _ contents: [UInt8]) throws {
        let scratch = Scratch()
        _ = FileManager.default.createFile(atPath: scratch.log, contents: Data(contents))
        let (log, discarded) = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page)
        #expect(discarded != nil, "\(name)")
        #expect(log.written == 0 && log.capacity == Self.page)
    }

    @Test func countersOutOfRangeAreRefused() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: Self.page).log
        SessionLogLayout.store(10, .acknowledged, to: log.file.base)  // beyond written (0)
        #expect(SessionLogLayout.problem(in: log.file.base, size: log.file.size)?.contains("out of range") == true)
        SessionLogLayout.store(UInt64(Self.page) + 20, .written, to: log.file.base)  // more unacknowledged than fits
        #expect(SessionLogLayout.problem(in: log.file.base, size: log.file.size)?.contains("out of range") == true)
    }

    @Test func acknowledgedPagesAreGivenBackWhenReleased() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: 16 * Self.page).log
        Self.feed(log, Self.pattern(16 * Self.page))
        let full = try Self.allocatedBlocks(scratch.log)
        // Half a page more than 8 pages: the 8 whole ones go, the partial one stays.
        log.acknowledge(upTo: UInt64(8 * Self.page + Self.page / 2))
        // Acknowledging alone keeps the pages (the next lap reuses them).
        #expect(try Self.allocatedBlocks(scratch.log) == full)
        #expect(log.holdsAcknowledgedPages)
        log.releaseAcknowledgedPages()
        #expect(!log.holdsAcknowledgedPages)
        let partial = try Self.allocatedBlocks(scratch.log)
        #expect(full - partial == 8 * Self.page / 512, "blocks \(full) -> \(partial)")
        #expect(log.bytes(from: log.acknowledged, count: log.buffered) == Self.pattern(log.buffered, from: Int(log.acknowledged)))
        // All acknowledged: only the header page is left.
        log.acknowledge(upTo: log.written)
        log.releaseAcknowledgedPages()
        #expect(try Self.allocatedBlocks(scratch.log) == Self.page / 512)
        #expect(log.buffered == 0)
    }

    @Test func releasingAWrappedRingKeepsEveryUnacknowledgedByte() throws {
        let scratch = Scratch()
        let log = try SessionLog.openOrCreate(path: scratch.log, capacity: 16 * Self.page).log
        Self.feed(log, Self.pattern(16 * Self.page))
        log.acknowledge(upTo: UInt64(10 * Self.page))
        Self.feed(log, Self.pattern(4 * Self.page, from: 16 * Self.page))
        let full = try Self.allocatedBlocks(scratch.log)
        // Unacknowledged: ring pages 10..<16 and 0..<4; free: 4..<10.
        log.releaseAcknowledgedPages()
        #expect(full - (try Self.allocatedBlocks(scratch.log)) == 6 * Self.page / 512)
        #expect(log.bytes(from: log.acknowledged, count: log.buffered) == Self.pattern(10 * Self.page, from: 10 * Self.page))
    }

    static func allocatedBlocks(_ path: String) throws -> Int {
        var status = stat()
        guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
        return Int(status.st_blocks)
    }
}


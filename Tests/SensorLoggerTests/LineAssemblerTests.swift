import Foundation
import Testing

@testable import SensorLogger

/// The simulator's records (`lab/peers/serial_accessory.py`).
private func simulatorLine(_ seq: Int) -> String {
    let value = Double((seq * 37) % 1000) / 10
    return "\(seq),\(Double(seq) * 0.1 + 0.000123),\(value)\n"
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct ParsedLineTests {
    @Test func aRecordLine() {
        #expect(ParsedLine(bytes("17,1.700123,62.9")) == .record(SensorRecord(seq: 17, deviceTime: 1.700123, value: 62.9)))
        #expect(ParsedLine(bytes(" 3 , 0.5 ,-2\r")) == .record(SensorRecord(seq: 3, deviceTime: 0.5, value: -2)))
    }

    @Test func blankLines() {
        for line in ["", "\r", "  \t ", " \r"] {
            #expect(ParsedLine(bytes(line)) == .blank)
        }
    }

    @Test(arguments: [
        "garbage", "1,2", "1,2,3,4", "-1,2,3", "x,2,3", "1,y,3", "1,2,z", "1,,3", ",1,2", "1.5,2,3",
        "1,nan,3", "1,2,inf", "99999999999999999999,1,2", "1,2,3\0", "1,2\0,3", "\u{FF}1,2,3", "1 2,3,4", "1,0x10,2",
    ])
    func malformedLines(_ line: String) {
        guard case .malformed = ParsedLine(bytes(line)) else {
            Issue.record("\(line.debugDescription) parsed as \(ParsedLine(bytes(line)))")
            return
        }
    }

    @Test func malformedLinesAreDescribedEscapedAndShort() {
        #expect(ParsedLine.describe([0x41, 0x00, 0x0D, 0xFF, 0x22]) == #""A\x00\r\xff\"""#)
        let long = ParsedLine.describe([UInt8](repeating: 0x61, count: 100))
        #expect(long == "\"" + String(repeating: "a", count: 60) + "\"… (100 bytes)")
    }
}

@Suite struct LineAssemblerTests {
    let stream = (0..<40).map(simulatorLine).joined()
    var expected: [SensorRecord] {
        (0..<40).map { seq in
            SensorRecord(seq: Int64(seq), deviceTime: Double(seq) * 0.1 + 0.000123, value: Double((seq * 37) % 1000) / 10)
        }
    }

    /// Feeds `chunks` in order; all records and malformed lines, and the assembler after.
    private func assemble(_ chunks: [[UInt8]], from start: LineAssembler = LineAssembler()) -> (AssembledLines, LineAssembler) {
        var assembler = start
        var all = AssembledLines()
        for chunk in chunks {
            let lines = assembler.feed(chunk)
            all.records += lines.records
            all.malformed += lines.malformed
        }
        return (all, assembler)
    }

    @Test func wholeStreamInOneChunk() {
        let (lines, assembler) = assemble([bytes(stream)])
        #expect(lines.records == expected)
        #expect(lines.malformed.isEmpty)
        #expect(assembler.isAtLineStart)
    }

    @Test func everyTwoWaySplit() {
        let all = bytes(stream)
        for cut in 0...all.count {
            let (lines, assembler) = assemble([Array(all[..<cut]), Array(all[cut...])])
            #expect(lines.records == expected, "cut at \(cut)")
            #expect(lines.malformed.isEmpty && assembler.isAtLineStart, "cut at \(cut)")
        }
    }

    @Test func byteByByteAndRandomChunks() {
        let all = bytes(stream)
        #expect(assemble(all.map { [$0] }).0.records == expected)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var chunks: [[UInt8]] = []
            var offset = 0
            while offset < all.count {
                let size = Int.random(in: 0...40, using: &generator)
                chunks.append(Array(all[offset..<min(all.count, offset + size)]))
                offset += size
            }
            #expect(assemble(chunks).0.records == expected)
        }
    }

    @Test func crlfAndBlankLines() {
        let crlf = bytes("\r\n\r\n" + stream.replacingOccurrences(of: "\n", with: "\r\n") + "\n\n")
        for cut in stride(from: 0, through: crlf.count, by: 7) {
            let (lines, assembler) = assemble([Array(crlf[..<cut]), Array(crlf[cut...])])
            #expect(lines.records == expected, "cut at \(cut)")
            #expect(lines.malformed.isEmpty && assembler.isAtLineStart)
        }
    }

    @Test func garbageIsCountedAndTheRestStillArrives() {
        let text = "\0\0\u{7}junk\n" + simulatorLine(0) + "1,2\n" + simulatorLine(1) + "\u{1B}[0m,1,2\n" + simulatorLine(2)
        let (lines, _) = assemble([bytes(text)])
        #expect(lines.records == Array(expected.prefix(3)))
        #expect(lines.malformed.count == 3)
        // Invalid UTF-8 too.
        let (binary, _) = assemble([[0xFF, 0xFE, 0x0A] + bytes(simulatorLine(0))])
        #expect(binary.records == [expected[0]] && binary.malformed.count == 1)
    }

    @Test func anOverlongLineIsDroppedOnceUpToItsNewline() {
        var assembler = LineAssembler()
        let first = assembler.feed([UInt8](repeating: 0x55, count: LineAssembler.maxLineLength + 10))
        #expect(first.malformed.count == 1 && first.records.isEmpty)
        #expect(assembler.pending.isEmpty && assembler.isDiscarding)
        let more = assembler.feed([UInt8](repeating: 0x55, count: 5000))
        #expect(more.malformed.isEmpty && assembler.pending.isEmpty)
        let rest = assembler.feed(bytes("UUU\n" + simulatorLine(0)))
        #expect(rest.records == [expected[0]] && rest.malformed.isEmpty)
        // An overlong line within one chunk.
        let inOne = assembler.feed(bytes(String(repeating: "9", count: 2000) + "\n" + simulatorLine(1)))
        #expect(inOne.records == [expected[1]] && inOne.malformed.count == 1)
    }

    @Test func theSnapshotResumesMidLine() {
        let all = bytes(stream)
        for cut in [1, 5, 17, 30, 100] {
            var assembler = LineAssembler()
            let head = assembler.feed(all[..<cut])
            let restored = LineAssembler(snapshot: assembler.snapshot)
            #expect(restored == assembler)
            let (tail, _) = assemble([Array(all[cut...])], from: restored)
            #expect(head.records + tail.records == expected)
        }
        #expect(LineAssembler(snapshot: []) == LineAssembler())
        var discarding = LineAssembler()
        _ = discarding.feed([UInt8](repeating: 0x41, count: 3000))
        #expect(LineAssembler(snapshot: discarding.snapshot) == discarding)
    }

    @Test func discardingPendingReportsAnUnfinishedLine() {
        var assembler = LineAssembler()
        _ = assembler.feed(bytes("12,3.4"))
        #expect(assembler.discardPending() == "\"12,3.4\"")
        #expect(assembler.isAtLineStart)
        _ = assembler.feed(bytes("1,2,3\n\r"))
        #expect(assembler.discardPending() == nil)
    }

    @Test func chunkHashesDiffer() {
        #expect(chunkHash(bytes("1,2,3\n")) == chunkHash(bytes("1,2,3\n")))
        #expect(chunkHash(bytes("1,2,3\n")) != chunkHash(bytes("1,2,4\n")))
    }

    @Test func theSummaryLine() {
        var lines = AssembledLines()
        lines.records = expected[40 - 12..<40].map(\.self)
        var committed = RecordStore.Committed()
        committed.inserted = 12
        #expect(Ingest.summary(lines, committed, redelivered: false) == "stored 12 records (seq 28-39), 0 malformed")
        committed.inserted = 9
        committed.duplicates = 3
        lines.malformed = ["x"]
        #expect(Ingest.summary(lines, committed, redelivered: true)
            == "stored 9 records (seq 28-39), 1 malformed, 3 already stored (redelivered)")
    }
}

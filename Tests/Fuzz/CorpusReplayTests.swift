import Foundation
import FuzzFrames
import FuzzGATT
import FuzzSupport
import FuzzTOML
import XCTest

/// Every committed fuzz input (seeds, and the crashes fuzzing found, kept as
/// regression inputs) through the fuzz targets' checks, without libFuzzer.
/// A crash names its input on stderr (Replay's crash note).
final class CorpusReplayTests: XCTestCase {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Corpus").path

    func replay(_ target: String, _ fuzz: ([UInt8]) -> Void) throws {
        let count = try Replay.run([Self.corpus + "/" + target], fuzz)
        print("\(target): replayed \(count) inputs")
        XCTAssertGreaterThan(count, 0, "no inputs in \(Self.corpus)/\(target)")
    }

    func testFrames() throws { try replay("FuzzFrames", FramesFuzzer.fuzz) }
    func testGATT() throws { try replay("FuzzGATT", GATTFuzzer.fuzz) }
    func testTOML() throws { try replay("FuzzTOML", TOMLFuzzer.fuzz) }
}

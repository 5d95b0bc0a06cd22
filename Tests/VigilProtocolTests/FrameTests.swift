import Testing
import VigilProtocol

@Suite("Frames")
struct FrameTests {
    @Test("the prefix holds both lengths, little-endian")
    func prefixLayout() {
        let bytes = Frame(header: Array(#"{"type":"x"}"#.utf8), body: [0xFF, 0x00, 0x7F]).encoded()
        #expect(Array(bytes[0..<8]) == [12, 0, 0, 0, 3, 0, 0, 0])
        #expect(bytes.count == 8 + 12 + 3)
        #expect(Array(bytes.suffix(3)) == [0xFF, 0x00, 0x7F])
    }

    @Test("the example hello of docs/protocol.md is 48 bytes of header")
    func documentedHello() {
        let header = Array(#"{"type":"hello","versions":[1],"role":"control"}"#.utf8)
        #expect(Array(Frame(header: header).encoded()[0..<8]) == [0x30, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test("a frame survives the round trip with a binary body")
    func roundTrip() throws {
        let frame = Frame(header: Array(#"{"type":"event"}"#.utf8), body: (0...255).map(UInt8.init))
        var decoder = FrameDecoder()
        decoder.append(frame.encoded())
        #expect(try decoder.next() == frame)
        #expect(try decoder.next() == nil)
        #expect(decoder.pendingByteCount == 0)
    }

    @Test("bytes fed one at a time yield the frame only when complete")
    func byteByByte() throws {
        let frame = Frame(header: Array(#"{"type":"ack","seq":3}"#.utf8), body: [1, 2, 3])
        let bytes = frame.encoded()
        var decoder = FrameDecoder()
        for byte in bytes.dropLast() {
            decoder.append([byte])
            #expect(try decoder.next() == nil)
        }
        decoder.append([bytes.last!])
        #expect(try decoder.next() == frame)
    }

    @Test("several frames in one read come out in order, a partial one waits")
    func severalInOneRead() throws {
        let frames = (0..<3).map { Frame(header: Array(#"{"type":"n\#($0)"}"#.utf8), body: Array(repeating: UInt8($0), count: $0)) }
        let tail = Frame(header: Array(#"{"type":"tail"}"#.utf8)).encoded()
        var decoder = FrameDecoder()
        decoder.append(frames.flatMap { $0.encoded() } + tail.prefix(5))
        for frame in frames { #expect(try decoder.next() == frame) }
        #expect(try decoder.next() == nil)
        decoder.append(tail.dropFirst(5))
        #expect(try decoder.next()?.header == Array(#"{"type":"tail"}"#.utf8))
    }

    @Test("a frame of an empty body and the consumed bytes of a long stream are not kept")
    func longStream() throws {
        var decoder = FrameDecoder()
        let frame = Frame(header: Array(#"{"type":"x"}"#.utf8), body: Array(repeating: 7, count: 10_000))
        for _ in 0..<50 {
            decoder.append(frame.encoded() + frame.encoded().prefix(9))
            #expect(try decoder.next() == frame)
            decoder.append(frame.encoded().dropFirst(9))
            #expect(try decoder.next() == frame)
        }
        #expect(decoder.pendingByteCount == 0)
    }
}

@Suite("Frame limits")
struct FrameLimitTests {
    /// Only the 8-byte prefix: a receiver must refuse without waiting for the rest.
    private func prefix(header: UInt32, body: UInt32) -> [UInt8] {
        var bytes = [UInt8]()
        for value in [header, body] { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }

    @Test("an oversized header is refused on the prefix alone")
    func headerTooLarge() {
        var decoder = FrameDecoder()
        decoder.append(prefix(header: 65_537, body: 0))
        #expect(throws: FrameError.headerTooLarge(65_537, limit: 65_536)) { try decoder.next() }
    }

    @Test("an oversized body is refused on the prefix alone")
    func bodyTooLarge() {
        var decoder = FrameDecoder()
        decoder.append(prefix(header: 20, body: 1_048_577))
        #expect(throws: FrameError.bodyTooLarge(1_048_577, limit: 1_048_576)) { try decoder.next() }
    }

    @Test("frames exactly at the limits are accepted")
    func atTheLimits() throws {
        let limits = FrameLimits(maxHeaderBytes: 16, maxBodyBytes: 4)
        let frame = Frame(header: Array(#"{"type":"abcde"}"#.utf8), body: [1, 2, 3, 4])
        #expect(frame.header.count == 16)
        var decoder = FrameDecoder(limits: limits)
        decoder.append(frame.encoded())
        #expect(try decoder.next() == frame)
    }

    @Test("a header length of zero is an error, not a frame")
    func emptyHeader() {
        var decoder = FrameDecoder()
        decoder.append(prefix(header: 0, body: 0))
        #expect(throws: FrameError.emptyHeader) { try decoder.next() }
    }

    @Test("the defaults are the limits docs/protocol.md announces")
    func defaults() {
        #expect(FrameLimits.default == FrameLimits(maxHeaderBytes: 65_536, maxBodyBytes: 1_048_576))
    }
}

/// One record as the sensor sends it: a line `seq,timestamp,value`
/// (`lab/peers/serial_accessory.py`: `17,1.700123,62.9`).
struct SensorRecord: Sendable, Equatable {
    /// The device's sequence number.
    var seq: Int64
    /// The device's timestamp (seconds, the device's own clock).
    var deviceTime: Double
    var value: Double
}

/// What one line of the stream is.
enum ParsedLine: Sendable, Equatable {
    case record(SensorRecord)
    /// Empty, or only spaces, tabs and carriage returns: skipped, not an error.
    case blank
    /// Anything else; the text is for the log (escaped, shortened).
    case malformed(String)

    /// Parses one line without its `\n`. Spaces, tabs and `\r` around the line
    /// and around each field are ignored (CRLF senders); `seq` is a
    /// non-negative integer, the other two fields finite numbers.
    init(_ line: some Collection<UInt8>) {
        let text = String(decoding: line, as: UTF8.self)
        let trimmed = text.trimmingASCIIWhitespace()
        if trimmed.isEmpty {
            self = .blank
            return
        }
        let fields = trimmed.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingASCIIWhitespace() }
        guard fields.count == 3,
              fields[0].allSatisfy({ $0.isASCII && $0.isNumber }), let seq = Int64(fields[0]),
              let deviceTime = Self.number(fields[1]), let value = Self.number(fields[2])
        else {
            self = .malformed(Self.describe(line))
            return
        }
        self = .record(SensorRecord(seq: seq, deviceTime: deviceTime, value: value))
    }

    /// A finite decimal number ("1.5", "-2", "3e-4"); not "nan", "inf", hex,
    /// nor a number followed by a NUL (which `Double.init` would stop at).
    private static func number(_ field: String) -> Double? {
        guard field.allSatisfy({ $0.isASCII && ($0.isNumber || "+-.eE".contains($0)) }),
              let number = Double(field), number.isFinite else { return nil }
        return number
    }

    /// The line for a log message: printable ASCII as is, the rest escaped, at most 60 bytes shown.
    static func describe(_ line: some Collection<UInt8>, limit: Int = 60) -> String {
        var out = ""
        for byte in line.prefix(limit) {
            switch byte {
            case UInt8(ascii: "\\"): out += "\\\\"
            case UInt8(ascii: "\""): out += "\\\""
            case 0x20..<0x7F: out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "\r"): out += "\\r"
            case UInt8(ascii: "\t"): out += "\\t"
            default: out += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
            }
        }
        return "\"" + out + "\"" + (line.count > limit ? "… (\(line.count) bytes)" : "")
    }
}

/// What a chunk of the stream held: the complete lines in it, with the end of
/// the line before it that an earlier chunk left over.
struct AssembledLines: Sendable, Equatable {
    var records: [SensorRecord] = []
    /// Descriptions of the malformed lines, in order.
    var malformed: [String] = []
}

/// Turns chunks of a byte stream, cut anywhere (a chunk is whatever the daemon
/// had read when it woke the app), into lines. The unfinished end of a chunk is
/// kept for the next one; its `snapshot` is what is saved with each committed
/// batch so that a process that redelivered data comes to can pick up where the
/// stream was.
struct LineAssembler: Sendable, Equatable {
    /// A line longer than this is garbage (a wrong baud rate, a binary
    /// protocol): counted once as malformed, and its bytes dropped up to the
    /// next newline, so memory stays bounded.
    static let maxLineLength = 1024

    /// The unfinished line.
    private(set) var pending: [UInt8] = []
    /// Inside an overlong line: dropping bytes up to the next newline.
    private(set) var isDiscarding = false

    init() {}

    /// Restores an assembler from `snapshot` (an empty or unknown snapshot gives a fresh one).
    init(snapshot: [UInt8]) {
        guard let flag = snapshot.first else { return }
        isDiscarding = flag == 1
        pending = Array(snapshot.dropFirst())
    }

    /// The state as bytes: a flag byte (1 while discarding an overlong line), then the unfinished line.
    var snapshot: [UInt8] { [isDiscarding ? 1 : 0] + pending }

    /// True when nothing of a line is pending.
    var isAtLineStart: Bool { pending.isEmpty && !isDiscarding }

    /// Feeds the next chunk; returns what the lines it completes hold.
    mutating func feed(_ chunk: some Collection<UInt8>) -> AssembledLines {
        var result = AssembledLines()
        var rest = chunk[...]
        while let newline = rest.firstIndex(of: UInt8(ascii: "\n")) {
            let piece = rest[..<newline]
            rest = rest[rest.index(after: newline)...]
            if isDiscarding {
                isDiscarding = false
                continue
            }
            let line: [UInt8]
            if pending.isEmpty {
                line = Array(piece)
            } else {
                line = pending + piece
                pending = []
            }
            if line.count > Self.maxLineLength {
                result.malformed.append(Self.overlong(line.count))
                continue
            }
            switch ParsedLine(line) {
            case let .record(record): result.records.append(record)
            case .blank: break
            case let .malformed(text): result.malformed.append(text)
            }
        }
        if !isDiscarding {
            pending += rest
            if pending.count > Self.maxLineLength {
                result.malformed.append(Self.overlong(pending.count))
                pending = []
                isDiscarding = true
            }
        }
        return result
    }

    /// Drops the unfinished line (the stream broke off: unplug, end of the
    /// session). Returns its description when there was one, for the log.
    mutating func discardPending() -> String? {
        defer {
            pending = []
            isDiscarding = false
        }
        if isDiscarding { return "the rest of an overlong line" }
        guard !pending.isEmpty, ParsedLine(pending) != .blank else { return nil }
        return ParsedLine.describe(pending)
    }

    private static func overlong(_ count: Int) -> String {
        "overlong line (\(count)+ bytes without a newline)"
    }
}

extension StringProtocol {
    /// Without the spaces, tabs, carriage returns and newlines at both ends.
    func trimmingASCIIWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" || $0 == "\r\n" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

/// FNV-1a, 64 bits: names a chunk of the stream so that a redelivered chunk
/// can be recognised as one already committed (not for security).
func chunkHash(_ bytes: some Sequence<UInt8>) -> Int64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in bytes {
        hash ^= UInt64(byte)
        hash &*= 0x100_0000_01b3
    }
    return Int64(bitPattern: hash)
}

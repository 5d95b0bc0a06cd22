import FoundationEssentials
import Glibc
import Glibc
import VigilKit

/// One line of the record file. Fields that do not apply to a kind are left out.
struct Record: Encodable, Sendable {
    /// CLOCK_MONOTONIC ns when the item was handled.
    var t: UInt64
    var pid = getpid()
    /// `launch`, `lifecycle`, `event`, `taskBegan`, `taskEnded`, `expiring`, `finished`, `reconnected`.
    var kind: String
    var reason: String?
    var eventKind: String?
    var state: String?
    var event: String?
    var seq: UInt64?
    var redelivered: Bool?
    var payload: String?
    var attributes: [String: JSONValue]?
    /// `t` minus the event's `sent` attribute: the wake latency the benchmark measures.
    var latencyNs: Int64?
    var task: Int?
    var name: String?
    /// Background time left, in seconds, when the expiration handler ran.
    var remaining: Double?

    init(kind: String, at t: UInt64 = MonotonicClock.now) {
        self.t = t
        self.kind = kind
    }
}

/// Writes a line per item to stdout (the app's log) and, when asked, appends
/// JSON lines to a file that tests read while the app runs. Each line is one
/// unbuffered `write(2)` (the record file opened `O_APPEND`): whole, in order,
/// and out of the process before it can be frozen or killed.
final class Recorder: Sendable {
    private let descriptor: Int32?

    init(path: String?) {
        descriptor = path.map { open($0, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) }.flatMap { $0 >= 0 ? $0 : nil }
        if let path, descriptor == nil { say("cannot open record file \(path)") }
    }

    /// A line for the app's log.
    func say(_ line: String) {
        Self.write(Array("vigil-demo-app[\(getpid())]: \(line)\n".utf8), to: STDOUT_FILENO)
    }

    func record(_ record: Record, _ line: String) {
        say(line)
        guard let descriptor else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard var bytes = try? Array(encoder.encode(record)) else { return }
        bytes.append(UInt8(ascii: "\n"))
        Self.write(bytes, to: descriptor)
    }

    private static func write(_ bytes: [UInt8], to descriptor: Int32) {
        _ = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
    }
}

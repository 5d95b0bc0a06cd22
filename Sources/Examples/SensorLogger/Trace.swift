import Foundation
import Glibc

/// `VIGIL_LOGGER_TRACE=FILE` (scripts/bench-fleet): one JSON line per batch
/// with the wall-clock time (seconds since the Unix epoch) of each step of
/// `Ingest.data`, so a benchmark can say where a record's latency goes:
/// `received` (the chunk reached the logger), `begun` (its background task
/// granted), `committed` (SQLite), `published` (vigild's outbox took the
/// export), `ended` (the task ended). `seq` is the batch's first record.
/// Written after the batch's last step, in one `write(2)`.
final class TraceFile: Sendable {
    private let fd: Int32

    init?(path: String?) {
        guard let path else { return nil }
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            say("cannot open trace file \(path): \(String(cString: strerror(errno)))")
            return nil
        }
    }

    deinit { close(fd) }

    static var now: Double { Date().timeIntervalSince1970 }

    func record(seq: Int64?, records: Int, steps: KeyValuePairs<String, Double>) {
        var line = "{\"seq\":\(seq.map(String.init) ?? "null"),\"records\":\(records)"
        for (name, time) in steps { line += ",\"\(name)\":\(String(format: "%.6f", time))" }
        line += "}\n"
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}

import Foundation
import VigilProtocol

/// The decision log on disk, so it lasts across restarts: `decisions.jsonl`
/// in the state directory, one JSON object per line (`DecisionRecord`),
/// appended with one write(2) per decision (in the page cache at once: a
/// SIGKILL loses none). Bounded: after `capacity` lines the file becomes
/// `decisions.jsonl.1` (replacing the one before) and a new one starts, so
/// at most twice `decision-log-size` decisions are kept.
final class DecisionLogFile {
    let path: String
    let capacity: Int
    private var fd: Int32 = -1
    private var lines = 0
    /// Set while writes fail, so the failure is logged once.
    private(set) var failure: String?

    init(directory: String, capacity: Int) {
        path = directory + "/decisions.jsonl"
        self.capacity = max(capacity, 1)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// The last `capacity` decisions of the files an earlier daemon left
    /// (oldest first), and how many lines could not be read (a torn last
    /// line, a damaged file). Opens the current file for appending.
    func load() -> (records: [DecisionRecord], unreadable: Int) {
        var records: [DecisionRecord] = []
        var unreadable = 0
        let decoder = JSONDecoder()
        for file in [path + ".1", path] {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            var count = 0
            for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
                count += 1
                if let record = try? decoder.decode(DecisionRecord.self, from: Data(line)) {
                    records.append(record)
                } else {
                    unreadable += 1
                }
            }
            if file == path { lines = count }
        }
        openCurrent()
        return (Array(records.suffix(capacity)), unreadable)
    }

    func append(_ record: DecisionRecord) {
        if lines >= capacity { rotate() }
        guard fd >= 0 else { return }
        let bytes = record.jsonLine
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written == bytes.count {
            lines += 1
            failure = nil
        } else {
            failure = "cannot append to \(path): \(String(cString: strerror(errno)))"
        }
    }

    private func openCurrent() {
        if fd >= 0 { close(fd) }
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o640)
        if fd < 0 { failure = "cannot open \(path): \(String(cString: strerror(errno)))" }
    }

    private func rotate() {
        if rename(path, path + ".1") != 0 && errno != ENOENT {
            failure = "cannot rotate \(path): \(String(cString: strerror(errno)))"
        }
        lines = 0
        openCurrent()
    }
}

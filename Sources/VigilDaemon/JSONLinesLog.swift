import FoundationEssentials
import Glibc
import VigilProtocol

/// A log of records on disk, so it lasts across restarts: `<name>.jsonl` in
/// the state directory, one JSON object per line, appended with one write(2)
/// per record (in the page cache at once: a SIGKILL loses none). Bounded:
/// after `capacity` lines the file becomes `<name>.jsonl.1` (replacing the
/// one before) and a new one starts, so at most twice `capacity` records are
/// kept. The decision log (`decisions.jsonl`, `DecisionRecord`) and the
/// device log (`devices.jsonl`, `DeviceRecord`) are two.
final class JSONLinesLog<Record: Decodable> {
    let path: String
    private let encode: (Record) -> [UInt8]
    let capacity: Int
    private var fd: Int32 = -1
    private var lines = 0
    /// Set while writes fail, so the failure is logged once.
    private(set) var failure: String?

    init(directory: String, name: String, capacity: Int, encode: @escaping (Record) -> [UInt8]) {
        path = "\(directory)/\(name).jsonl"
        self.capacity = max(capacity, 1)
        self.encode = encode
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// The last `capacity` records of the files an earlier daemon left
    /// (oldest first), and how many lines could not be read (a torn last
    /// line, a damaged file). Opens the current file for appending.
    func load() -> (records: [Record], unreadable: Int) {
        var records: [Record] = []
        var unreadable = 0
        let decoder = JSONDecoder()
        for file in [path + ".1", path] {
            guard let (data, cut) = Self.tail(of: file) else { continue }
            var count = 0
            // A tail cut mid-line starts with a partial line: not a record.
            for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).dropFirst(cut ? 1 : 0) {
                count += 1
                if let record = try? decoder.decode(Record.self, from: Data(line)) {
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

    /// At most the last `maxLoad` bytes of a regular file (a log far longer
    /// than vigild writes, or something else at its path, must not stall or
    /// swamp the start), and whether the start was cut off.
    static func tail(of path: String, maxLoad: Int = 16 << 20) -> (Data, cut: Bool)? {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return nil }
        let size = Int(status.st_size)
        let start = max(0, size - maxLoad)
        var bytes = [UInt8](repeating: 0, count: size - start)
        let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(start)) }
        guard count >= 0 else { return nil }
        return (Data(bytes.prefix(count)), start > 0)
    }

    func append(_ record: Record) {
        if lines >= capacity { rotate() }
        guard fd >= 0 else { return }
        let bytes = encode(record)
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

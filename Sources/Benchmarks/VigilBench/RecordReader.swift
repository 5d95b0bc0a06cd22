import Foundation

/// Follows the sample app's record file (JSON lines) as it grows.
final class RecordReader {
    private let handle: FileHandle?
    private var pending = Data()
    private let path: String
    private var opened: FileHandle?

    init(path: String) {
        self.path = path
        handle = nil
    }

    /// Records appended since the last call.
    func newRecords() -> [[String: Any]] {
        if opened == nil { opened = FileHandle(forReadingAtPath: path) }
        guard let opened else { return [] }
        pending.append(opened.readDataToEndOfFile())
        var records: [[String: Any]] = []
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
            let line = pending[pending.startIndex..<newline]
            pending.removeSubrange(pending.startIndex...newline)
            if let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any] {
                records.append(object)
            }
        }
        return records
    }
}

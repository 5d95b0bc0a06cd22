import FoundationEssentials
import Glibc
import VigilAccessories

/// `<state-dir>/sessions.json`: the apps' open sessions, so that the next
/// daemon, after this one died (SIGKILL included), re-establishes them with the
/// same ids before their apps even run again: a port's fd dies with the daemon,
/// and a suspended app cannot ask. Rewritten whole and atomically at each open,
/// close and move to a new connection (rare), like `processes.json`, and for
/// the same reason not fsynced. Sessions held by `vigilctl` end with its
/// connection, so they are not recorded.
struct SessionRecordFile {
    let path: String

    init(directory: String) {
        path = directory + "/sessions.json"
    }

    struct Contents: Codable {
        var version = 1
        var nextSessionID: Int
        var sessions: [SessionRecord]
    }

    func load() throws -> Contents {
        guard FileManager.default.fileExists(atPath: path) else { return Contents(nextSessionID: 1, sessions: []) }
        return try JSONDecoder().decode(Contents.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func save(_ table: SessionTable) throws {
        let recorded = table.sessions.values.filter { if case .app = $0.holder { true } else { false } }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let contents = Contents(nextSessionID: table.nextSessionID, sessions: recorded.sorted { $0.id < $1.id })
        try encoder.encode(contents).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}

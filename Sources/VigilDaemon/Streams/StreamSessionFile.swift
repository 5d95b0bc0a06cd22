import FoundationEssentials
import Glibc
import VigilProtocol
import VigilStreams
import VigilSystem

/// One session as `sessions.json` keeps it: what the stream layer needs
/// (id, holder, name, transport) and, beside it in the same object, what its
/// transport keeps (`details`: an accessory's identity, USB port, line
/// settings, `reopen`). The file's shape is the one older daemons wrote
/// (their L2CAP records carried empty accessory fields, which are ignored).
struct SavedStreamSession: Codable, Equatable {
    var id: Int
    var holder: SessionHolder
    var name: String
    var transport: String
    var details: [String: JSONValue]

    init(id: Int, holder: SessionHolder, name: String, transport: String, details: [String: JSONValue]) {
        self.id = id
        self.holder = holder
        self.name = name
        self.transport = transport
        self.details = details
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
        static let id = Key(stringValue: "id"), holder = Key(stringValue: "holder")
        static let name = Key(stringValue: "protocolString"), transport = Key(stringValue: "transport")
        static let own: Set<String> = ["id", "holder", "protocolString", "transport"]
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        id = try container.decode(Int.self, forKey: .id)
        holder = try container.decode(SessionHolder.self, forKey: .holder)
        name = try container.decode(String.self, forKey: .name)
        // Older daemons wrote no transport: their channels' names said it.
        transport = try container.decodeIfPresent(String.self, forKey: .transport) ?? (name.hasPrefix("l2cap:") ? "l2cap" : "accessory")
        var details: [String: JSONValue] = [:]
        for key in container.allKeys where !Key.own.contains(key.stringValue) {
            details[key.stringValue] = try container.decode(JSONValue.self, forKey: key)
        }
        self.details = details
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        for (key, value) in details where !Key.own.contains(key) {
            try container.encode(value, forKey: Key(stringValue: key))
        }
        try container.encode(id, forKey: .id)
        try container.encode(holder, forKey: .holder)
        try container.encode(name, forKey: .name)
        try container.encode(transport, forKey: .transport)
    }
}

/// `<state-dir>/sessions.json`: the apps' open sessions, of every transport,
/// so that the next daemon, after this one died (SIGKILL included),
/// re-establishes them with the same ids before their apps even run again:
/// an endpoint's fd dies with the daemon, and a suspended app cannot ask.
/// Rewritten whole and atomically at each open, end and move (rare), like
/// `processes.json`, and for the same reason not fsynced. Sessions held by
/// `vigilctl` end with its connection, so they are not recorded.
struct StreamSessionFile {
    let path: String

    init(directory: String) {
        path = directory + "/sessions.json"
    }

    struct Contents: Codable {
        var version = 1
        var nextSessionID: Int
        var sessions: [SavedStreamSession]
    }

    func load() throws -> Contents {
        guard FileManager.default.fileExists(atPath: path) else { return Contents(nextSessionID: 1, sessions: []) }
        return try JSONDecoder().decode(Contents.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func save(_ contents: Contents) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data = try encoder.encode(contents)
        CrashPoint.reach("sessions.file", .before)
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
        CrashPoint.reach("sessions.file", .after)
    }
}

extension SavedStreamSession {
    /// A transport's Codable record as `details` (its own keys beside the layer's).
    static func details<T: Encodable>(of record: T) -> [String: JSONValue] {
        guard let data = try? JSONEncoder().encode(record),
              let object = try? JSONDecoder().decode([String: JSONValue].self, from: data) else { return [:] }
        return object
    }

    /// The transport's record back from the saved object (its keys and the layer's).
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let data = try JSONEncoder().encode(self)
        return try JSONDecoder().decode(T.self, from: data)
    }
}

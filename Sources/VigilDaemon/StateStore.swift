import Foundation
import VigilLifecycle

/// The daemon's state file: what must outlive a daemon restart (unacknowledged
/// events, force-quit flags). Written atomically (temporary file + rename), so
/// a crash mid-write leaves the previous state intact.
struct StateStore {
    let path: String

    init(directory: String) {
        path = directory + "/state.json"
    }

    struct Contents: Codable {
        var version = 1
        var apps: [String: SavedApp]
    }

    func load() throws -> [String: SavedApp] {
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        return try JSONDecoder().decode(Contents.self, from: data).apps
    }

    func save(_ apps: [String: SavedApp]) throws {
        let data = try JSONEncoder().encode(Contents(apps: apps))
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}

import Foundation
import VigilBluetooth
import VigilLifecycle

/// The daemon's state file: what must outlive a daemon restart (unacknowledged
/// events, force-quit flags, what apps asked of Bluetooth). Written atomically (temporary file + rename), so
/// a crash mid-write leaves the previous state intact.
struct StateStore {
    let path: String

    init(directory: String) {
        path = directory + "/state.json"
    }

    struct Contents: Codable {
        var version = 1
        var apps: [String: SavedApp]
        /// Absent in files of daemons before Bluetooth.
        var bluetooth: SavedBluetooth?
    }

    func load() throws -> Contents {
        guard FileManager.default.fileExists(atPath: path) else { return Contents(apps: [:]) }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        return try JSONDecoder().decode(Contents.self, from: data)
    }

    func save(_ contents: Contents) throws {
        let data = try JSONEncoder().encode(contents)
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}

import FoundationEssentials
import Glibc
import VigilSystem

/// What the next daemon needs to adopt an app's process after this one has
/// died, even by SIGKILL, in either suspension mode.
struct ProcessRecord: Codable, Equatable {
    var app: String
    var pid: Int32
    /// /proc/PID/stat field 22: a reused pid has another, so it is never adopted.
    var startTime: UInt64
    /// The session (and process group) it leads: apps are started with setsid.
    var session: Int32
    /// Whether the daemon had stopped it (cgroup.freeze or SIGSTOP) when the
    /// file was last written (a spawn, exit or adoption; not every freeze and
    /// thaw). Informational: adoption reads the live state, never this.
    var stopped: Bool

    /// The recorded process as it is now, if it still runs: same pid, same
    /// start time, same session, not a zombie.
    func stillRunning() -> ProcessStat? {
        guard let stat = ProcessStat.read(pid), !stat.hasEnded, stat.startTime == startTime, stat.session == session
        else { return nil }
        return stat
    }
}

/// `<state-dir>/processes.json`: every app process of this daemon, rewritten
/// whole and atomically (temporary file + rename) at each spawn, exit and
/// adoption; not at freezes and thaws, which happen at every wake (the
/// file, written with Foundation's atomic write, was also fsynced each time).
/// Nothing needs it durable: the processes it describes do not outlive the
/// machine, and what a killed daemon wrote is in the page cache.
struct ProcessRecordFile {
    let path: String

    init(directory: String) {
        path = directory + "/processes.json"
    }

    private struct Contents: Codable {
        var version = 1
        var processes: [ProcessRecord]
    }

    func load() throws -> [ProcessRecord] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        return try JSONDecoder().decode(Contents.self, from: Data(contentsOf: URL(fileURLWithPath: path))).processes
    }

    func save(_ records: [ProcessRecord]) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data = try encoder.encode(Contents(processes: records.sorted { $0.app < $1.app }))
        CrashPoint.reach("processes.file", .before)
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
        CrashPoint.reach("processes.file", .after)
    }
}

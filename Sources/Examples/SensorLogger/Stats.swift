import Foundation
import Synchronization

/// The counts since this process started, written as JSON to `VIGIL_LOGGER_STATS`
/// after each batch (write to a temporary file, then rename: a reader never
/// sees half a file).
struct LoggerStats: Codable, Sendable, Equatable {
    var pid = Int(getpid())
    /// Chunks of data handled (each committed in one transaction).
    var batches = 0
    /// Of those, chunks redelivered from an earlier process or connection.
    var redeliveredBatches = 0
    /// Records inserted.
    var stored = 0
    /// Records that were already in the database (a redelivered chunk).
    var duplicates = 0
    /// Malformed lines (and partial lines dropped when a stream broke off).
    var malformed = 0
    /// The device's sequence number of the last record stored.
    var lastSeq: Int64?
    /// Rows in `records` after the last commit, whoever stored them.
    var totalRecords = 0
    /// `session.loss` reports, and the loss they counted.
    var lossReports = 0
    var overruns = 0
    var parityErrors = 0
    var frameErrors = 0
    var sessionsOpened = 0
    var sessionsInterrupted = 0
    var sessionsReopened = 0
    var sessionsClosed = 0
    /// Wall clock of the last update, seconds since the Unix epoch.
    var updatedAt = 0.0
}

final class StatsFile: Sendable {
    private let path: String?
    private let stats = Mutex(LoggerStats())

    init(path: String?) { self.path = path }

    var current: LoggerStats { stats.withLock { $0 } }

    /// Changes the counts and writes the file (when one is configured), under
    /// the lock so that concurrent updates reach the file in order.
    func update(_ change: (inout LoggerStats) -> Void) {
        stats.withLock { stats in
            change(&stats)
            stats.updatedAt = Date().timeIntervalSince1970
            write(stats)
        }
    }

    private func write(_ snapshot: LoggerStats) {
        guard let path else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            let temporary = path + ".tmp"
            try encoder.encode(snapshot).write(to: URL(fileURLWithPath: temporary))
            guard rename(temporary, path) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        } catch {
            say("cannot write stats file \(path): \(error)")
        }
    }
}

import Foundation
import GRDB

/// A chunk's records, ready to commit in one transaction together with the
/// stream state after it.
struct Batch: Sendable {
    /// The daemon's session id.
    var session: Int
    var accessorySerial: String
    var connectionID: UInt64
    /// Wall clock, seconds since the Unix epoch.
    var receivedAt: Double
    var records: [SensorRecord]
    /// Identifies the chunk, so a redelivered copy is recognised (see `RecordStore.resumeState`).
    var chunkHash: Int64
    /// `LineAssembler.snapshot` before and after the chunk.
    var stateBefore: [UInt8]
    var stateAfter: [UInt8]
}

/// The SQLite database, through GRDB.
///
/// - `records`: one row per record, unique on (accessorySerial, connectionID,
///   deviceSeq): `INSERT OR IGNORE`, so data redelivered after a crash is not
///   stored twice, while a sensor that restarts its count after a replug (a new
///   connection) is stored again.
/// - `losses`: the loss reports of the sessions (UART overruns, parity and framing errors).
/// - `sessions`: which accessory each daemon session is on, for data redelivered
///   to a later process (which only names the session).
/// - `chunks`: the last committed chunks of each session, with the line
///   assembler's state before and after each: a later process that is handed
///   a session's unacknowledged data again resumes the stream exactly where it
///   was, even in the middle of a line.
final class RecordStore: Sendable {
    private let queue: DatabaseQueue
    /// Chunks remembered per session: more than can be committed and not yet
    /// acknowledged at once (acknowledgement lags by one chunk per consumer).
    static let chunkHistory = 64

    init(path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.label = "vigil-sensor-logger"
        // WAL: a reader (sqlite3, a test) never holds the logger back, nor the other way round.
        configuration.journalMode = .wal
        configuration.busyMode = .timeout(5)
        queue = try DatabaseQueue(path: path, configuration: configuration)
        try Self.migrator.migrate(queue)
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE records (
                    id INTEGER PRIMARY KEY,
                    deviceSeq INTEGER NOT NULL,
                    deviceTime REAL NOT NULL,
                    value REAL NOT NULL,
                    receivedAt REAL NOT NULL,
                    accessorySerial TEXT NOT NULL,
                    connectionID INTEGER NOT NULL
                );
                CREATE UNIQUE INDEX records_by_device ON records (accessorySerial, connectionID, deviceSeq);
                CREATE TABLE losses (
                    id INTEGER PRIMARY KEY,
                    receivedAt REAL NOT NULL,
                    accessorySerial TEXT NOT NULL,
                    connectionID INTEGER NOT NULL,
                    session INTEGER NOT NULL,
                    overruns INTEGER NOT NULL,
                    parityErrors INTEGER NOT NULL,
                    frameErrors INTEGER NOT NULL
                );
                CREATE TABLE sessions (
                    id INTEGER PRIMARY KEY,
                    accessorySerial TEXT NOT NULL,
                    connectionID INTEGER NOT NULL,
                    protocol TEXT NOT NULL,
                    openedAt REAL NOT NULL
                );
                CREATE TABLE chunks (
                    id INTEGER PRIMARY KEY,
                    session INTEGER NOT NULL,
                    hash INTEGER NOT NULL,
                    stateBefore BLOB NOT NULL,
                    stateAfter BLOB NOT NULL
                );
                CREATE INDEX chunks_by_session ON chunks (session, id);
                """)
        }
        migrator.registerMigration("v2 broadcasts") { db in
            // One row per advertisement of a broadcast sensor (RuuviTag format 5),
            // unique on the sensor and vigild's receive time: a batch handed
            // again after a crash is not stored twice.
            try db.execute(sql: """
                CREATE TABLE broadcasts (
                    id INTEGER PRIMARY KEY,
                    address TEXT NOT NULL,
                    receivedAtNs INTEGER NOT NULL,
                    rssi INTEGER,
                    sequence INTEGER,
                    temperature REAL,
                    humidity REAL,
                    pressure REAL,
                    batteryVoltage REAL
                );
                CREATE UNIQUE INDEX broadcasts_by_time ON broadcasts (address, receivedAtNs);
                """)
        }
        return migrator
    }

    /// What a commit stored.
    struct Committed: Sendable {
        var inserted = 0
        /// Records already in the table (a redelivered chunk), left alone.
        var duplicates = 0
        var totalRecords = 0
    }

    /// Stores broadcast readings (one transaction); returns how many were new.
    func commit(broadcasts: [BroadcastReading]) async throws -> Int {
        try await queue.write { db in
            let insert = try db.cachedStatement(sql: """
                INSERT OR IGNORE INTO broadcasts
                    (address, receivedAtNs, rssi, sequence, temperature, humidity, pressure, batteryVoltage)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """)
            var inserted = 0
            for row in broadcasts {
                try insert.execute(arguments: [
                    row.address, Int64(truncatingIfNeeded: row.receivedAtNs), row.rssi, row.reading.sequence,
                    row.reading.temperature, row.reading.humidity, row.reading.pressure, row.reading.batteryVoltage,
                ])
                inserted += db.changesCount
            }
            return inserted
        }
    }

    /// Stores the batch's records and the stream state after it, in one transaction.
    func commit(_ batch: Batch) async throws -> Committed {
        try commitOnThisThread(batch)
    }

    /// GRDB's synchronous `write` runs on the calling thread while the queue is
    /// idle (as it is: one batch at a time), where its `async` one hops to the
    /// queue's thread and back: two thread wake-ups per batch, about as long
    /// as the commit itself on a busy gateway (scripts/bench-fleet's steps).
    private func commitOnThisThread(_ batch: Batch) throws -> Committed {
        try queue.write { db in
            var committed = Committed()
            let insert = try db.cachedStatement(sql: """
                INSERT OR IGNORE INTO records (deviceSeq, deviceTime, value, receivedAt, accessorySerial, connectionID)
                VALUES (?, ?, ?, ?, ?, ?)
                """)
            let connectionID = Int64(truncatingIfNeeded: batch.connectionID)
            for record in batch.records {
                try insert.execute(arguments: [
                    record.seq, record.deviceTime, record.value, batch.receivedAt, batch.accessorySerial, connectionID,
                ])
                if db.changesCount > 0 { committed.inserted += 1 } else { committed.duplicates += 1 }
            }
            try Self.remember(db, session: batch.session, hash: batch.chunkHash, before: batch.stateBefore, after: batch.stateAfter)
            committed.totalRecords = try Int.fetchOne(db, sql: "SELECT count(*) FROM records") ?? 0
            return committed
        }
    }

    /// The stream broke off (unplug): what was pending is dropped, for a later process too.
    func resetState(session: Int, before: [UInt8]) async throws {
        try await queue.write { db in
            try Self.remember(db, session: session, hash: 0, before: before, after: LineAssembler().snapshot)
        }
    }

    private static func remember(_ db: Database, session: Int, hash: Int64, before: [UInt8], after: [UInt8]) throws {
        try db.execute(
            sql: "INSERT INTO chunks (session, hash, stateBefore, stateAfter) VALUES (?, ?, ?, ?)",
            arguments: [session, hash, Data(before), Data(after)])
        try db.execute(
            sql: "DELETE FROM chunks WHERE session = ? AND id <= ? - ?",
            arguments: [session, db.lastInsertedRowID, chunkHistory])
    }

    /// The line assembler's state for a session's chunk that a new process is
    /// handed again: the state before it if it was committed already (its
    /// records are then duplicates), else the state after the last committed
    /// chunk; fresh for a session never seen.
    func resumeState(session: Int, chunkHash hash: Int64?) async throws -> [UInt8] {
        try await queue.read { db in
            if let hash, let before = try Data.fetchOne(
                db, sql: "SELECT stateBefore FROM chunks WHERE session = ? AND hash = ? ORDER BY id DESC LIMIT 1",
                arguments: [session, hash]) {
                return Array(before)
            }
            let after = try Data.fetchOne(
                db, sql: "SELECT stateAfter FROM chunks WHERE session = ? ORDER BY id DESC LIMIT 1", arguments: [session])
            return after.map(Array.init) ?? []
        }
    }

    /// A session opened.
    func recordSession(_ session: Int, accessorySerial: String, connectionID: UInt64, protocol: String) async throws {
        try await queue.write { db in
            try db.execute(
                sql: "INSERT OR REPLACE INTO sessions (id, accessorySerial, connectionID, protocol, openedAt) VALUES (?, ?, ?, ?, ?)",
                arguments: [session, accessorySerial, Int64(truncatingIfNeeded: connectionID), `protocol`, Date().timeIntervalSince1970])
        }
    }

    /// A session reopened on a new connection of its accessory.
    func moveSession(_ session: Int, toConnection connectionID: UInt64) async throws {
        try await queue.write { db in
            try db.execute(
                sql: "UPDATE sessions SET connectionID = ? WHERE id = ?",
                arguments: [Int64(truncatingIfNeeded: connectionID), session])
        }
    }

    /// The accessory a session was on, as recorded when it was opened.
    func origin(ofSession session: Int) async throws -> (accessorySerial: String, connectionID: UInt64)? {
        try await queue.read { db in
            try Row.fetchOne(db, sql: "SELECT accessorySerial, connectionID FROM sessions WHERE id = ?", arguments: [session])
                .map { row in (row["accessorySerial"], UInt64(truncatingIfNeeded: row["connectionID"] as Int64)) }
        }
    }

    /// The session is over: nothing of it can come again.
    func forget(session: Int) async throws {
        try await queue.write { db in
            try db.execute(sql: "DELETE FROM chunks WHERE session = ?", arguments: [session])
        }
    }

    func recordLoss(_ loss: SessionLossRow) async throws {
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO losses (receivedAt, accessorySerial, connectionID, session, overruns, parityErrors, frameErrors)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    loss.receivedAt, loss.accessorySerial, Int64(truncatingIfNeeded: loss.connectionID), loss.session,
                    loss.overruns, loss.parityErrors, loss.frameErrors,
                ])
        }
    }
}

/// A row of `losses`.
struct SessionLossRow: Sendable {
    var receivedAt: Double
    var accessorySerial: String
    var connectionID: UInt64
    var session: Int
    var overruns: Int
    var parityErrors: Int
    var frameErrors: Int
}

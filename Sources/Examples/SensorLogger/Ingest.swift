import Foundation
import VigilKit

/// One session's byte stream as this process follows it.
struct StreamState: Sendable {
    /// The daemon's session id.
    let session: Int
    var accessorySerial: String
    var connectionID: UInt64
    var assembler = LineAssembler()
    /// False for a session of an earlier process or connection, whose data
    /// comes again: the assembler's state is read from the database at the
    /// first chunk (see `RecordStore.resumeState`).
    var isResumed: Bool
}

/// What the logger does with each thing a session brings, whether the
/// session's own stream or `Application.events` (redelivered data) hands it
/// over. Every method returns once what it stored is committed: the caller
/// acknowledges only then, so a crash means redelivery, never loss.
struct Ingest: Sendable {
    let app: Application
    let store: RecordStore
    let stats: StatsFile
    /// `LoggerConfiguration.crashAfterBatch`.
    var crashAfterBatch: Int?
    /// `LoggerConfiguration.mqttTopic`.
    var mqttTopic: String?
    /// `LoggerConfiguration.tracePath`, opened.
    var trace: TraceFile?

    /// Malformed lines logged one by one per batch; the rest are counted.
    static let malformedLogLimit = 3

    /// Parses a chunk and commits its records, inside a "flush" background task.
    func data(_ bytes: [UInt8], on stream: inout StreamState, redelivered: Bool) async {
        let received = trace == nil ? 0 : TraceFile.now
        // Asked for, not waited for: the wake that brought the chunk lets the
        // app run meanwhile, and the task is needed only if the batch
        // outlasts the wake budget. Waiting would put a round trip to vigild
        // (0.5 ms p50 in scripts/bench-fleet) before every commit and export.
        async let task = app.beginBackgroundTask(name: "flush") {
            say("flush: background time is running out")
        }
        let begun = trace == nil ? 0 : TraceFile.now
        let hash = chunkHash(bytes)
        if !stream.isResumed {
            let (session, snapshot) = (stream.session, stream.assembler.snapshot)
            let resumed = await persist("read the state of session \(session)") {
                try await store.resumeState(session: session, chunkHash: hash)
            }
            stream.assembler = LineAssembler(snapshot: resumed.isEmpty ? snapshot : resumed)
            stream.isResumed = true
        }
        var assembler = stream.assembler
        let lines = assembler.feed(bytes)
        for text in lines.malformed.prefix(Self.malformedLogLimit) { say("malformed line: \(text)") }
        if lines.malformed.count > Self.malformedLogLimit {
            say("… and \(lines.malformed.count - Self.malformedLogLimit) more malformed line(s)")
        }
        let batch = Batch(
            session: stream.session, accessorySerial: stream.accessorySerial, connectionID: stream.connectionID,
            receivedAt: Date().timeIntervalSince1970, records: lines.records, chunkHash: hash,
            stateBefore: stream.assembler.snapshot, stateAfter: assembler.snapshot)
        let committed = await persist("store \(lines.records.count) record(s)") { try await store.commit(batch) }
        stream.assembler = assembler
        let stored = trace == nil ? 0 : TraceFile.now

        // The export first: the stats file and the log line are not on its way.
        if let mqttTopic, !lines.records.isEmpty {
            await export(lines.records, of: stream, to: mqttTopic)
        }
        let published = trace == nil ? 0 : TraceFile.now
        stats.update { stats in
            stats.batches += 1
            if redelivered { stats.redeliveredBatches += 1 }
            stats.stored += committed.inserted
            stats.duplicates += committed.duplicates
            stats.malformed += lines.malformed.count
            stats.totalRecords = committed.totalRecords
            if let last = lines.records.last { stats.lastSeq = last.seq }
        }
        say(Self.summary(lines, committed, redelivered: redelivered))
        let counts = stats.current
        if let crashAfterBatch, counts.batches == crashAfterBatch, counts.redeliveredBatches == 0 {
            say("crashing after batch \(crashAfterBatch), before acknowledging it (VIGIL_LOGGER_CRASH_AFTER_BATCH)")
            abort()
        }
        await app.endBackgroundTask(await task)
        trace?.record(
            seq: lines.records.first?.seq, records: lines.records.count,
            steps: ["received": received, "begun": begun, "committed": stored, "published": published, "ended": TraceFile.now])
    }

    /// One message per batch, published before the chunk is acknowledged: a
    /// crash after the commit redelivers the chunk and publishes it again, so
    /// a subscriber sees every record at least once and deduplicates by
    /// (`accessory`, `seq`), as with any QoS 1 stream.
    private func export(_ records: [SensorRecord], of stream: StreamState, to topic: String) async {
        struct Message: Encodable {
            struct Record: Encodable { var seq: Int64; var deviceTime: Double; var value: Double }
            var accessory: String
            var session: Int
            var records: [Record]
        }
        let message = Message(
            accessory: stream.accessorySerial, session: stream.session,
            records: records.map { Message.Record(seq: $0.seq, deviceTime: $0.deviceTime, value: $0.value) })
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            try await app.publish(Array(try encoder.encode(message)), toTopic: topic)
        } catch {
            say("cannot publish \(records.count) record(s) to \(topic): \(error)")
        }
    }

    /// "stored 12 records (seq 40-51), 0 malformed".
    static func summary(_ lines: AssembledLines, _ committed: RecordStore.Committed, redelivered: Bool) -> String {
        var line = "stored \(committed.inserted) record\(committed.inserted == 1 ? "" : "s")"
        if let first = lines.records.first?.seq, let last = lines.records.last?.seq {
            line += first == last ? " (seq \(first))" : " (seq \(first)-\(last))"
        }
        line += ", \(lines.malformed.count) malformed"
        if committed.duplicates > 0 { line += ", \(committed.duplicates) already stored" }
        if redelivered { line += " (redelivered)" }
        return line
    }

    /// The device lost bytes before vigild could read them.
    func loss(_ loss: SessionLoss, on stream: StreamState) async {
        let row = SessionLossRow(
            receivedAt: Date().timeIntervalSince1970, accessorySerial: stream.accessorySerial,
            connectionID: stream.connectionID, session: stream.session,
            overruns: loss.overruns, parityErrors: loss.parityErrors, frameErrors: loss.frameErrors)
        await persist("store a loss report") { try await store.recordLoss(row) }
        stats.update { stats in
            stats.lossReports += 1
            stats.overruns += loss.overruns
            stats.parityErrors += loss.parityErrors
            stats.frameErrors += loss.frameErrors
        }
        say("session \(stream.session): the device reported loss: \(loss.overruns) overrun(s), "
            + "\(loss.parityErrors) parity error(s), \(loss.frameErrors) framing error(s)")
    }

    /// The accessory went away; the session waits for it to return.
    func interrupted(_ reason: String, on stream: inout StreamState) async {
        await breakOff(&stream, "unplugged")
        stats.update { $0.sessionsInterrupted += 1 }
        say("session \(stream.session) interrupted (\(reason)); waiting for the accessory to return")
    }

    /// The accessory is back, on a new connection.
    func reopened(_ accessory: AccessoryInfo, on stream: inout StreamState) async {
        stream.connectionID = accessory.connectionID
        let session = stream.session
        await persist("record session \(session)") {
            try await store.moveSession(session, toConnection: accessory.connectionID)
        }
        stats.update { $0.sessionsReopened += 1 }
        say("session \(stream.session) reopened on \(accessory.deviceNode) (connection \(accessory.connectionID))")
    }

    /// The session is over.
    func closed(_ reason: String, on stream: inout StreamState) async {
        await breakOff(&stream, "session ended")
        let session = stream.session
        await persist("forget session \(session)") { try await store.forget(session: session) }
        stats.update { $0.sessionsClosed += 1 }
        say("session \(stream.session) closed: \(reason)")
    }

    /// The byte stream broke off: a line it left unfinished can never be completed.
    private func breakOff(_ stream: inout StreamState, _ why: String) async {
        if !stream.isResumed {
            let session = stream.session
            let snapshot = await persist("read the state of session \(session)") {
                try await store.resumeState(session: session, chunkHash: nil)
            }
            stream.assembler = LineAssembler(snapshot: snapshot)
            stream.isResumed = true
        }
        let before = stream.assembler.snapshot
        guard let partial = stream.assembler.discardPending() else { return }
        let session = stream.session
        await persist("reset session \(session)") { try await store.resetState(session: session, before: before) }
        stats.update { $0.malformed += 1 }
        say("\(why): dropped an unfinished line \(partial)")
    }

    /// Runs a database operation; retries a few times, then exits without
    /// acknowledging (vigild hands the data to the next process) rather than
    /// acknowledge data that is not stored.
    @discardableResult
    private func persist<T: Sendable>(_ what: String, _ operation: () async throws -> T) async -> T {
        var attempt = 1
        while true {
            do {
                return try await operation()
            } catch {
                say("cannot \(what): \(error)")
                guard attempt < 3 else {
                    say("giving up: exiting without acknowledging, so that vigild hands the data over again")
                    exit(1)
                }
                attempt += 1
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
    }
}

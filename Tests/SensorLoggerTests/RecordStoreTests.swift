import Foundation
import Testing

@testable import SensorLogger

/// The database part, on a file in a temporary folder.
@Suite struct RecordStoreTests {
    private func withStore(_ body: (RecordStore, String) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sensor-logger-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("state/records.sqlite").path
        try await body(try RecordStore(path: path), path)
    }

    private func batch(_ seqs: ClosedRange<Int64>, session: Int = 1, chunk: String, before: [UInt8] = [0], after: [UInt8] = [0]) -> Batch {
        Batch(
            session: session, accessorySerial: "VGL123", connectionID: 7, receivedAt: 1_700_000_000,
            records: seqs.map { SensorRecord(seq: $0, deviceTime: Double($0) / 10, value: 1.5) },
            chunkHash: chunkHash(Array(chunk.utf8)), stateBefore: before, stateAfter: after)
    }

    @Test func aRedeliveredChunkIsStoredOnce() async throws {
        try await withStore { store, path in
            let first = try await store.commit(batch(0...9, chunk: "a"))
            #expect(first.inserted == 10 && first.duplicates == 0 && first.totalRecords == 10)
            let again = try await store.commit(batch(5...14, chunk: "b"))
            #expect(again.inserted == 5 && again.duplicates == 5 && again.totalRecords == 15)
            // The same database opened again (a relaunched process): the migration is not repeated.
            let reopened = try RecordStore(path: path)
            #expect(try await reopened.commit(batch(0...0, chunk: "c")).duplicates == 1)
        }
    }

    @Test func aNewProcessResumesTheStreamWhereTheCommittedChunksLeftIt() async throws {
        try await withStore { store, _ in
            #expect(try await store.resumeState(session: 3, chunkHash: nil) == [])
            _ = try await store.commit(batch(0...1, session: 3, chunk: "one", before: [0], after: [0, 0x31]))
            _ = try await store.commit(batch(2...3, session: 3, chunk: "two", before: [0, 0x31], after: [0, 0x32]))
            // The last committed chunk comes again: from the state before it.
            #expect(try await store.resumeState(session: 3, chunkHash: chunkHash(Array("two".utf8))) == [0, 0x31])
            #expect(try await store.resumeState(session: 3, chunkHash: chunkHash(Array("one".utf8))) == [0])
            // A chunk never committed: from the state after the last one.
            #expect(try await store.resumeState(session: 3, chunkHash: chunkHash(Array("three".utf8))) == [0, 0x32])
            try await store.resetState(session: 3, before: [0, 0x32])
            #expect(try await store.resumeState(session: 3, chunkHash: nil) == [0])
            try await store.forget(session: 3)
            #expect(try await store.resumeState(session: 3, chunkHash: nil) == [])
        }
    }

    @Test func sessionsRememberTheirAccessory() async throws {
        try await withStore { store, _ in
            #expect(try await store.origin(ofSession: 4) == nil)
            try await store.recordSession(4, accessorySerial: "VGL123", connectionID: 2, protocol: "org.vigil.sensor")
            try await store.moveSession(4, toConnection: 5)
            let origin = try await store.origin(ofSession: 4)
            #expect(origin?.accessorySerial == "VGL123" && origin?.connectionID == 5)
            try await store.recordLoss(SessionLossRow(
                receivedAt: 1, accessorySerial: "VGL123", connectionID: 5, session: 4, overruns: 2, parityErrors: 0, frameErrors: 1))
        }
    }

    @Test func theDefaultDatabasePath() {
        #expect(LoggerConfiguration(environment: ["XDG_STATE_HOME": "/s", "HOME": "/h"]).databasePath
            == "/s/vigil-sensor-logger/records.sqlite")
        #expect(LoggerConfiguration(environment: ["HOME": "/h"]).databasePath == "/h/.local/state/vigil-sensor-logger/records.sqlite")
        let configured = LoggerConfiguration(environment: ["VIGIL_LOGGER_DB": "/x.sqlite", "VIGIL_LOGGER_PROTOCOL": "p"])
        #expect(configured.databasePath == "/x.sqlite" && configured.protocolString == "p" && configured.statsPath == nil)
        #expect(LoggerConfiguration(environment: [:]).protocolString == "org.vigil.sensor")
    }
}

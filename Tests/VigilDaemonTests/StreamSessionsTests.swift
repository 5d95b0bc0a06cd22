import Glibc
import Testing
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem
@testable import VigilDaemon

/// The stream layer below the binary: a socketpair transport registered
/// beside it, an app connected to a real engine, and the rules every
/// transport shares (announce, acknowledge, hold back, back-pressure,
/// pending writes, the end of a session and what it prunes).
@Suite("stream sessions: one layer for every byte transport")
struct StreamSessionsTests {
    static let app = "org.vigil.test.streams"
    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// A running loop, a fake core with the stream layer and the socketpair
    /// transport, a connected app, and a session of it on a socketpair whose
    /// other end `body` gets.
    func withSession(
        bufferLimit: Int = 64 * 1024, coalescing: Duration? = nil,
        _ body: (FakeServices, Int, UnixStream) async throws -> Void
    ) async throws {
        try await withLoop(named: "streams-test") { loop, directory in
            let services = FakeServices(loop: loop, stateDirectory: directory, bufferLimit: bufferLimit)
            let (ours, theirs) = try UnixStream.pair()
            let session = try await services.run { services in
                let endpoint = try SocketpairEndpoint(ours)
                // The one registration line a transport needs.
                services.components = [StreamSessions(), SocketpairTransport()]
                try services.launchConnected(Self.app, mode: .externalAccessory)
                let streams = services.component(StreamSessions.self)!
                let id = try streams.open(
                    holder: .app(Self.app), name: "socketpair", transport: services.component(SocketpairTransport.self)!,
                    wakeMode: .externalAccessory, coalescing: coalescing, services: services)
                try streams.attach(endpoint, to: id, services: services)
                return id
            }
            try await body(services, session, theirs)
        }
    }

    /// Polls `condition` on the loop until it holds (5 s at most).
    func eventually(_ services: FakeServices, _ condition: @escaping @Sendable (isolated FakeServices) -> Bool) async -> Bool {
        let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
        while MonotonicInstant.now() < deadline {
            if await services.run(condition) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return await services.run(condition)
    }

    /// `sessions(heldBy:)` answers from an index by holder (asked at every
    /// acknowledgement and suspension): ascending ids, per holder, kept
    /// through opens, ends and forgets.
    @Test func sessionsOfAHolderStayIndexedThroughOpenEndAndForget() async throws {
        var seen: [[Int]] = []
        try await withLoop(named: "streams-test") { loop, directory in
            let services = FakeServices(loop: loop, stateDirectory: directory, bufferLimit: 64 * 1024)
            seen = try await services.run { services -> [[Int]] in
                services.components = [StreamSessions(), SocketpairTransport()]
                try services.launchConnected(Self.app, mode: .externalAccessory)
                let streams = services.component(StreamSessions.self)!
                let transport = services.component(SocketpairTransport.self)!
                var opened: [Int] = []
                for holder in [SessionHolder.app(Self.app), .control(7), .app(Self.app), .app(Self.app)] {
                    opened.append(try streams.open(
                        holder: holder, name: "socketpair", transport: transport, wakeMode: .externalAccessory, services: services))
                }
                let (first, terminal, second, third) = (opened[0], opened[1], opened[2], opened[3])
                var seen = [[first, terminal, second, third],
                            streams.sessions(heldBy: .app(Self.app)), streams.sessions(heldBy: .control(7)),
                            streams.sessions(heldBy: .app(Self.app), transport: transport)]
                streams.end(second, reason: "test", willReopen: false, notify: false, services: services)
                streams.forget(terminal)
                seen += [streams.sessions(heldBy: .app(Self.app)), streams.sessions(heldBy: .control(7)),
                         streams.sessions(heldBy: .app("org.vigil.test.other"))]
                return seen
            }
        }
        let ids = seen[0]
        #expect(ids == ids.sorted() && Set(ids).count == 4)
        #expect(seen[1] == [ids[0], ids[2], ids[3]])
        #expect(seen[2] == [ids[1]])
        #expect(seen[3] == [ids[0], ids[2], ids[3]])
        #expect(seen[4] == [ids[0], ids[3]])
        #expect(seen[5] == [])
        #expect(seen[6] == [])
    }

    @Test func oneDataEventAtATimeAndTheNextAnnouncedAtTheAcknowledgement() async throws {
        try await withSession { services, session, peer in
            try peer.writeAll(Array(repeating: 1, count: 100))
            #expect(await eventually(services) { $0.dataEvents(of: Self.app, session: session).map(\.range) == [0..<100] })
            // More bytes while that event is unacknowledged: read, held back, not announced.
            try peer.writeAll(Array(repeating: 2, count: 50))
            #expect(await eventually(services) { $0.component(StreamSessions.self)!.session(session)!.log.written == 150 })
            #expect(await services.run { $0.dataEvents(of: Self.app, session: session).count } == 1)
            // The acknowledgement announces them, in the range after the first (no gap).
            let first = await services.run { $0.dataEvents(of: Self.app, session: session)[0].seq }
            await services.run { $0.acknowledge(Self.app, upTo: first) }
            #expect(await services.run { $0.dataEvents(of: Self.app, session: session).map(\.range) } == [100..<150])
            // The log knows what the app is done with.
            #expect(await services.run { $0.component(StreamSessions.self)!.session(session)!.log.acknowledged } == 100)
        }
    }

    @Test func aFullLogPausesReadingAndAcknowledgementsResumeItByteExact() async throws {
        let limit = Self.page  // the smallest log: one page
        try await withSession(bufferLimit: limit) { services, session, peer in
            let sent = (0..<(limit * 3)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            try peer.writeAll(sent)
            #expect(await eventually(services) { $0.component(StreamSessions.self)!.isPaused(session) })
            #expect(await services.run { $0.component(StreamSessions.self)!.session(session)!.log.buffered } == limit)
            // The app takes each range in turn and acknowledges it: reading resumes until all came.
            var received: [UInt8] = []
            let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
            while received.count < sent.count, MonotonicInstant.now() < deadline {
                let next = await services.run { services -> (UInt64, [UInt8])? in
                    guard let event = services.dataEvents(of: Self.app, session: session).first,
                          let log = services.component(StreamSessions.self)?.session(session)?.log else { return nil }
                    return (event.seq, log.bytes(from: event.range.lowerBound, count: Int(event.range.count)))
                }
                guard let (seq, bytes) = next else {
                    try await Task.sleep(for: .milliseconds(5))
                    continue
                }
                received += bytes
                await services.run { $0.acknowledge(Self.app, upTo: seq) }
            }
            #expect(received == sent)
            // A data event names at most a quarter of the log.
            #expect(await services.run { services in services.host.sent.allSatisfy { message in
                guard case let .event(event, _) = message, let range = StreamSessions.logRange(of: event, session: session) else { return true }
                return range.count <= UInt64(limit / 4)
            } })
        }
    }

    @Test func aFullEventQueueStopsReadingUntilTheAppAcknowledges() async throws {
        try await withSession { services, session, peer in
            // The app's queue full of events it has not acknowledged (the fake's limit is 64).
            let last = try await services.run { services -> UInt64 in
                var seq: UInt64 = 0
                for index in 0..<64 {
                    let event = QueuedEvent(kind: "test", attributes: ["n": .number(Double(index))], wakeMode: .externalAccessory)
                    seq = try services.withEngine { engine, now throws(ProtocolError) in try engine.deliver(event, to: Self.app, now: now).seq }
                }
                return seq
            }
            try peer.writeAll([1, 2, 3])
            #expect(await eventually(services) { $0.component(StreamSessions.self)!.isPaused(session) })
            #expect(await services.run { $0.component(StreamSessions.self)!.session(session)!.log.written } == 0)
            // Room again: reading resumes, and the bytes are announced.
            await services.run { $0.acknowledge(Self.app, upTo: last) }
            #expect(await eventually(services) { $0.dataEvents(of: Self.app, session: session).map(\.range) == [0..<3] })
            #expect(await services.run { !$0.component(StreamSessions.self)!.isPaused(session) })
        }
    }

    @Test func aWriteIsAnsweredOnceTheEndpointTookEveryByteAndFailsWhenTheSessionEnds() async throws {
        try await withSession { services, session, peer in
            let (client, _) = try UnixStream.pair()
            await services.run {
                $0.connections[7] = ClientConnection(
                    id: 7, stream: client, credentials: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), limits: .default)
            }
            // More than a socketpair's buffer: the write waits for the peer.
            let big = [UInt8](repeating: 0x5A, count: 4 << 20)
            try await services.run { services in
                try services.component(StreamSessions.self)!.write(
                    big, session: session, requestID: 1, from: services.connections[7]!, holder: .app(Self.app), services: services)
            }
            try await Task.sleep(for: .milliseconds(50))
            #expect(await services.run { $0.frames.isEmpty })
            // The peer reads: the write completes, and is answered once.
            var read = 0
            while read < big.count {
                guard let bytes = try peer.read(maxBytes: 1 << 20), !bytes.isEmpty else { break }
                read += bytes.count
                if await services.run({ !$0.frames.isEmpty }) && read == big.count { break }
            }
            #expect(read == big.count)
            #expect(await eventually(services) { $0.frames.count == 1 })
            #expect(await services.run { $0.frames[0].text.contains("\"written\":\(big.count)") })
            // A second write pending when the session ends gets invalidState.
            try await services.run { services in
                try services.component(StreamSessions.self)!.write(
                    big, session: session, requestID: 2, from: services.connections[7]!, holder: .app(Self.app), services: services)
                services.component(StreamSessions.self)!.end(session, reason: "test", willReopen: false, services: services)
            }
            let failed = await services.run { $0.frames.last?.text ?? "" }
            #expect(failed.contains("invalidState") && failed.contains("closed before the write completed"))
            // Another client's write, or one to a session that is gone, is refused.
            let refused = await services.run { services -> ProtocolError? in
                do throws(ProtocolError) {
                    try services.component(StreamSessions.self)!.write(
                        [1], session: session, requestID: 3, from: services.connections[7]!, holder: .app(Self.app), services: services)
                    return nil
                } catch { return error }
            }
            #expect(refused?.code == .invalidArgument)
        }
    }

    @Test func thePeerClosingEndsTheSessionItsBytesDeliveredAndItsLogPrunedOnceAcknowledged() async throws {
        try await withSession { services, session, peer in
            try peer.writeAll([1, 2, 3])
            peer.close()
            #expect(await eventually(services) { !$0.component(StreamSessions.self)!.contains(session) })
            let (ends, ended, closed) = await services.run { services in
                let transport = services.component(SocketpairTransport.self)!
                return (transport.endpointEnds.map(\.reason), transport.ended, services.events(of: Self.app, kind: AccessoryEventKind.closed))
            }
            #expect(ends == ["the peer closed its end"])
            #expect(ended == [session])  // the transport was told, once
            #expect(closed.count == 1 && closed.first?.attributes["willReopen"] == .bool(false))
            #expect(closed.first?.wakeMode == .externalAccessory)
            // The log stays while a queued event names it, then goes with every trace of the session.
            let path = SessionLog.path(session: session, in: services.config.stateDirectory)
            #expect(access(path, F_OK) == 0)
            #expect(await services.run { $0.component(StreamSessions.self)!.retiredLogs[session] } == Self.app)
            let last = await services.run { $0.engine.queuedEvents(of: Self.app).map(\.seq).max() ?? 0 }
            await services.run { $0.acknowledge(Self.app, upTo: last) }
            #expect(access(path, F_OK) != 0)
            #expect(await services.run { $0.component(StreamSessions.self)!.retiredLogs.isEmpty })
        }
    }

    @Test func anAppThatStopsRunningEndsItsSessionsQuietlyAndTheEndpointCloses() async throws {
        try await withSession { services, session, peer in
            await services.run { services in
                let streams = services.component(StreamSessions.self)!
                streams.appStateChanged(Self.app, from: .background, to: .notRunning, services: services)
            }
            #expect(await services.run { !$0.component(StreamSessions.self)!.contains(session) })
            #expect(await services.run { $0.events(of: Self.app, kind: AccessoryEventKind.closed).isEmpty })
            // Our end is closed: the peer reads end-of-file.
            var bytes: [UInt8]? = nil
            let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
            while MonotonicInstant.now() < deadline {
                bytes = try peer.read(maxBytes: 16)
                if bytes != nil { break }
            }
            #expect(bytes == [])
            // The log had nothing to deliver: deleted at once.
            #expect(access(SessionLog.path(session: session, in: services.config.stateDirectory), F_OK) != 0)
        }
    }

    @Test func sessionsJsonKeepsTheTransportsRecordAndTheLayerHandsItBack() async throws {
        try await withSession { services, session, _ in
            let saved = await services.run { services -> [SavedStreamSession] in
                let streams = services.component(StreamSessions.self)!
                streams.setDetails(session, ["reopen": .bool(true), "lineSettings": .string("9600 8N1")])
                streams.record(services: services)
                // A new layer (a restarted daemon) reads it; the transport takes its own.
                let next = StreamSessions()
                try? next.start(restoring: DaemonSnapshot(apps: [:], bluetooth: nil), services: services)
                return next.takeSaved(transport: "socketpair") + next.takeSaved(transport: "socketpair")
            }
            #expect(saved.count == 1)
            #expect(saved.first?.id == session && saved.first?.holder == .app(Self.app) && saved.first?.transport == "socketpair")
            #expect(saved.first?.details["lineSettings"] == .string("9600 8N1"))
        }
    }

    @Test func aCoalescingWindowHoldsAStreamsBytesForOneEventThenAnnouncesThem() async throws {
        // The window is measured from the last announcement, on the real
        // clock: what this test sees within it is checked only while it has
        // not passed (a loaded machine may take longer than the window
        // between two steps; the hold cannot be seen then, nor disproved).
        let window = Duration.seconds(1)
        try await withSession(coalescing: window) { services, session, peer in
            let beforeAnnouncement = MonotonicInstant.now()  // the window starts later than this
            try peer.writeAll([1])
            #expect(await eventually(services) { $0.dataEvents(of: Self.app, session: session).count == 1 })
            let first = await services.run { $0.dataEvents(of: Self.app, session: session)[0].seq }
            await services.run { $0.acknowledge(Self.app, upTo: first) }
            // Within the window after that event: read, held, then announced by the timer.
            try peer.writeAll([2, 3])
            #expect(await eventually(services) { $0.component(StreamSessions.self)!.session(session)!.log.written == 3 })
            let held = await services.run { $0.dataEvents(of: Self.app, session: session).isEmpty }
            if MonotonicInstant.now() < beforeAnnouncement.advanced(by: window) { #expect(held) }
            #expect(await eventually(services) { $0.dataEvents(of: Self.app, session: session).map(\.range) == [1..<3] })
        }
    }
}

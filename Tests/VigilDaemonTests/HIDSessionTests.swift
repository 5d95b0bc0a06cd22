import Glibc
import Testing
import VigilHID
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem
@testable import VigilDaemon

/// HID sessions on the stream layer: the real `HIDEndpoint` over a
/// SOCK_SEQPACKET socketpair, which keeps message boundaries as a hidraw
/// node does (one read, one report; one write, one report). The layer's
/// record mode must deliver every report whole, in order, through a log
/// small enough to fill, pause and wrap many times.
@Suite("HID sessions: input reports as records")
struct HIDSessionTests {
    static let app = "org.vigil.test.hid"
    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    func withHIDSession(bufferLimit: Int, _ body: (FakeServices, Int, Int32) async throws -> Void) async throws {
        try await withLoop(named: "hid-test") { loop, directory in
            let services = FakeServices(loop: loop, stateDirectory: directory, bufferLimit: bufferLimit)
            var fds: [Int32] = [-1, -1]
            #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
            let ours = fds[0], theirs = fds[1]
            defer { close(theirs) }
            #expect(fcntl(ours, F_SETFL, fcntl(ours, F_GETFL) | O_NONBLOCK) == 0)
            let session = try await services.run { services in
                let endpoint = HIDEndpoint(device: HIDDevice.adopting(fd: ours, path: "socketpair")) {}
                services.components = [StreamSessions(), SocketpairTransport()]
                try services.launchConnected(Self.app, mode: .externalAccessory)
                let streams = services.component(StreamSessions.self)!
                let id = try streams.open(
                    holder: .app(Self.app), name: "hid", transport: services.component(SocketpairTransport.self)!,
                    wakeMode: .externalAccessory, records: true, services: services)
                try streams.attach(endpoint, to: id, services: services)
                return id
            }
            try await body(services, session, theirs)
        }
    }

    /// Report `index`: 1 to 97 bytes (lengths that do not divide the ring, so
    /// records straddle its end), its index in the first two.
    static func report(_ index: Int) -> [UInt8] {
        let length = 1 + (index * 37) % 97
        return (0..<length).map { offset in
            offset == 0 ? UInt8(index & 0xff) : offset == 1 ? UInt8(index >> 8) : UInt8(truncatingIfNeeded: index &* 31 &+ offset)
        }
    }

    @Test func everyReportArrivesWholeAndInOrderThroughAFullWrappingLog() async throws {
        try await withHIDSession(bufferLimit: Self.page) { services, session, peer in
            let count = 600  // ~30 KB of reports through a 4 KiB log
            let sender = Task.detached {
                for index in 0..<count {
                    let report = Self.report(index)
                    while report.withUnsafeBytes({ send(peer, $0.baseAddress, $0.count, 0) }) < 0 {
                        guard errno == EAGAIN || errno == EINTR else { return false }
                        usleep(1000)
                    }
                }
                return true
            }
            var received: [[UInt8]] = []
            var framings: Set<String> = []
            let deadline = MonotonicInstant.now().advanced(by: .seconds(30))
            while received.count < count, MonotonicInstant.now() < deadline {
                let next = await services.run { services -> (UInt64, [UInt8], String)? in
                    guard let event = services.engine.queuedEvents(of: Self.app).first(where: {
                        StreamSessions.logRange(of: $0, session: session) != nil
                    }), let range = StreamSessions.logRange(of: event, session: session),
                        let log = services.component(StreamSessions.self)?.session(session)?.log else { return nil }
                    return (event.seq, log.bytes(from: range.lowerBound, count: Int(range.count)),
                            event.attributes["framing"]?.stringValue ?? "none")
                }
                guard let (seq, bytes, framing) = next else {
                    try await Task.sleep(for: .milliseconds(2))
                    continue
                }
                framings.insert(framing)
                received += try SessionRecords.split(bytes)  // throws if an event cut a record
                await services.run { $0.acknowledge(Self.app, upTo: seq) }
            }
            #expect(await sender.value)
            #expect(received.count == count)
            #expect(received == (0..<count).map(Self.report))
            #expect(framings == [SessionRecords.framing])
            // The log filled on the way (reading paused), and counted report bytes, not framing.
            let bytesIn = await services.run { $0.component(StreamSessions.self)!.info(session)!.bytesIn }
            #expect(bytesIn == UInt64((0..<count).map { Self.report($0).count }.reduce(0, +)))
        }
    }

    @Test func eachWriteIsOneOutputReport() async throws {
        try await withHIDSession(bufferLimit: 64 * 1024) { services, session, peer in
            let reports: [[UInt8]] = [[0, 1, 2, 3], [5], Array(repeating: 9, count: 300)]
            let (client, _) = try UnixStream.pair()
            try await services.run { services in
                let connection = ClientConnection(
                    id: 7, stream: client, credentials: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), limits: .default)
                services.connections[7] = connection
                for report in reports {
                    try services.component(StreamSessions.self)!.write(
                        report, session: session, requestID: nil, from: connection, holder: .app(Self.app), services: services)
                }
            }
            var got: [[UInt8]] = []
            var buffer = [UInt8](repeating: 0, count: 1024)
            for _ in reports {
                let count = buffer.withUnsafeMutableBytes { recv(peer, $0.baseAddress, $0.count, 0) }
                #expect(count > 0)
                got.append(Array(buffer.prefix(max(count, 0))))
            }
            #expect(got == reports)
        }
    }

    @Test func aHangUpEndsTheSession() async throws {
        try await withHIDSession(bufferLimit: 64 * 1024) { services, session, peer in
            shutdown(peer, Int32(SHUT_RDWR))
            #expect(await eventually(services) { $0.component(SocketpairTransport.self)!.endpointEnds.map(\.session) == [session] })
        }
    }

    @Test func aRecordSessionIsOneAgainAfterADaemonRestart() async throws {
        try await withHIDSession(bufferLimit: 64 * 1024) { services, session, _ in
            let restored = await services.run { services -> (saved: Bool, records: Bool) in
                let streams = services.component(StreamSessions.self)!
                streams.record(services: services)
                // A new layer (a restarted daemon) reads sessions.json and takes the session back.
                let next = StreamSessions()
                try? next.start(restoring: DaemonSnapshot(apps: [:], bluetooth: nil), services: services)
                guard let saved = next.takeSaved(transport: "socketpair").first else { return (false, false) }
                _ = next.restore(saved, transport: services.component(SocketpairTransport.self)!, wakeMode: .externalAccessory,
                                 services: services)
                return (saved.details[StreamSessions.recordsKey] == .bool(true), next.session(session)?.records ?? false)
            }
            #expect(restored.saved)
            #expect(restored.records)
        }
    }

    func eventually(_ services: FakeServices, _ condition: @escaping @Sendable (isolated FakeServices) -> Bool) async -> Bool {
        let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
        while MonotonicInstant.now() < deadline {
            if await services.run(condition) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return await services.run(condition)
    }
}

import Glibc
import SystemPackage
import Logging
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem
@testable import VigilDaemon

/// The daemon's core as a component sees it, on a real event loop (fd
/// watches and timers fire), with a real lifecycle engine over a host that
/// starts no process: what components do is read from the engine's queues
/// and the frames they send.
actor FakeServices: DaemonServices {
    nonisolated let loop: EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    /// Warnings and errors only: the layer's info lines would bury the test output.
    let logger: Logger = {
        var logger = Logger(label: "vigil-daemon-tests")
        logger.logLevel = .warning
        return logger
    }()
    let config: DaemonConfig
    var now: UInt64 { MonotonicInstant.now().nanoseconds }
    var stopping = false
    var engine: LifecycleEngine!
    let host = RecordingHost()
    var components: [any DaemonComponent] = []
    var connections: [Int: ClientConnection] = [:]
    /// Frames sent to client connections: (connection id, the frame's JSON as text).
    var frames: [(connection: Int, text: String)] = []
    var scheduledSaves = 0

    init(loop: EventLoop, stateDirectory: String, bufferLimit: Int, configure: (inout DaemonConfig) -> Void = { _ in }) {
        self.loop = loop
        var config = DaemonConfig(system: false, environment: ["HOME": stateDirectory])
        config.stateDirectory = stateDirectory
        config.sessionBufferLimit = bufferLimit
        configure(&config)
        self.config = config
    }

    /// Starts the components, in order, as the core does.
    func startComponents() throws {
        for component in components { try component.start(restoring: DaemonSnapshot(apps: [:]), services: self) }
    }

    /// Runs `body` in the fake's isolation (on the loop thread).
    func run<T: Sendable>(_ body: @Sendable (isolated FakeServices) throws -> T) rethrows -> T {
        try body(self)
    }

    func withEngine<T, E: Error>(_ body: (LifecycleEngine, UInt64) throws(E) -> T) throws(E) -> T {
        try body(engine, now)
    }

    func commitJournal(compactIfDue: Bool) {}
    func scheduleSave() { scheduledSaves += 1 }
    func connection(_ id: Int) -> ClientConnection? { connections[id] }
    func connection(ofApp app: String) -> ClientConnection? { nil }
    var connectionCount: Int { connections.count }

    func send(frame: [UInt8], to connection: ClientConnection) {
        frames.append((connection.id, String(decoding: frame.dropFirst(Frame.prefixSize), as: UTF8.self)))
    }

    func component<C: DaemonComponent>(_ type: C.Type) -> C? {
        for component in components {
            if let match = component as? C { return match }
        }
        return nil
    }

    func components<P>(_ type: P.Type) -> [P] { components.compactMap { $0 as? P } }
    func answer(_ outcome: Result<(any Message, [UInt8]), ProtocolError>, id: Int?, connectionID: Int) {}
    func credentials(ofApp app: String) -> SpawnCredentials? { nil }
    func close(_ connection: ClientConnection) { connections[connection.id] = nil }
    var metrics: DaemonMetrics? { nil }
    func saveState() {}
    func statusChanged() {}
    func recordDevice(kind: String, device: String, change: String, detail: String) {}

    // MARK: An app to hold sessions

    /// Registers `app` (with `mode`), launches it (no process: the host says
    /// pid 4242) and connects it, so events are sent to it as they queue.
    func launchConnected(_ app: String, mode: BackgroundMode) throws {
        engine = LifecycleEngine(timings: config.timings, queueLimit: 64, host: host)
        engine.updateManifests([app: AppManifest(id: app, exec: ["/bin/true"], backgroundModes: [mode])])
        try engine.launch(app, now: now)
        _ = engine.identified(app, now: now)
        _ = engine.connected(app, now: now)
    }

    /// The app's acknowledgement up to `seq`, as the core handles it: the
    /// components before the engine, then after.
    func acknowledge(_ app: String, upTo seq: UInt64) {
        for case let observer as any EventDeliveryObserver in components { observer.willAcknowledge(seq, by: app, services: self) }
        engine.acknowledge(app, upTo: seq, now: now)
        for component in components { component.didAcknowledge(by: app, services: self) }
    }

    /// The app's queued `session.data` events of `session`: (seq, offset, length).
    func dataEvents(of app: String, session: Int) -> [(seq: UInt64, range: Range<UInt64>)] {
        engine.queuedEvents(of: app).compactMap { event in
            StreamSessions.logRange(of: event, session: session).map { (event.seq, $0) }
        }
    }

    func events(of app: String, kind: String) -> [QueuedEvent] {
        engine.queuedEvents(of: app).filter { $0.kind == kind }
    }
}

/// A lifecycle host that starts nothing and records what the engine sends.
final class RecordingHost: LifecycleHost {
    var sent: [OutboundMessage] = []
    func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32 { 4242 }
    func freeze(_ app: String) {}
    func thaw(_ app: String) {}
    func kill(_ app: String) {}
    func send(_ message: OutboundMessage, to app: String) { sent.append(message) }
    func record(_ decision: Decision) {}
    func stateChanged(_ app: String, from old: AppState, to new: AppState) {}
}

/// A byte transport that exists only here: its endpoints are socketpairs,
/// and it is registered with one line (in the fake's component list). What
/// it must say is what transports differ in: an endpoint's end ends the session.
final class SocketpairTransport: StreamTransport {
    let name = "socketpair"
    let transportName = "socketpair"
    /// Sessions the stream layer told it ended, in order.
    var ended: [Int] = []
    /// Endpoint ends the layer reported: (session, reason).
    var endpointEnds: [(session: Int, reason: String)] = []

    func endpointEnded<S: DaemonServices>(_ session: Int, reason: String, services: isolated S) {
        endpointEnds.append((session, reason))
        services.component(StreamSessions.self)?.end(session, reason: reason, willReopen: false, services: services)
    }

    func notOpenReason(_ session: Int) -> String { "session \(session) has no socketpair" }

    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S) { ended.append(session) }
}

/// One end of a socketpair as a stream endpoint; the test holds the other.
final class SocketpairEndpoint: StreamEndpoint {
    let stream: UnixStream
    private(set) var closed = false

    init(_ stream: UnixStream) throws {
        self.stream = stream
        try stream.setNonBlocking(true)
    }

    var descriptor: Int32 { stream.fd }

    func read(into log: SessionLog) throws -> StreamRead {
        var ended = false
        let count = try log.fill { buffer in
            guard let count = try stream.read(into: buffer) else { return nil }
            if count == 0 { ended = true }
            return count
        }
        if ended { return .ended("the peer closed its end") }
        guard let count, count > 0 else { return .wouldBlock }
        return .bytes(count)
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? { try stream.write(bytes) }

    func close() {
        closed = true
        stream.close()
    }
}

/// A fresh state directory and a running event loop for one test, both
/// gone when `body` returns.
func withLoop(named name: String, _ body: (EventLoop, String) async throws -> Void) async throws {
    let directory = "/tmp/vigil-\(name)-\(getpid())-\(MonotonicInstant.now().nanoseconds)"
    guard mkdir(directory, 0o700) == 0 else { throw SystemError(Errno(rawValue: errno), "mkdir", path: directory) }
    defer { removeTree(directory) }
    let loop = try EventLoop(name: name)
    loop.start()
    defer {
        loop.stop()
        loop.waitUntilStopped()
    }
    try await body(loop, directory)
}

/// Removes a folder and what it holds (a test's state directory).
func removeTree(_ path: String) {
    if let directory = opendir(path) {
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name == "." || name == ".." { continue }
            removeTree(path + "/" + name)
        }
        closedir(directory)
        rmdir(path)
    } else {
        unlink(path)
    }
}

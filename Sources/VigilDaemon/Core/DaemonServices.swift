import Logging
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// What a component may ask of the daemon's core: the engine (to deliver an
/// event, wake or query an app), the client connections (to reply and push),
/// the state file's next save, the loop (timers, fd watches) and the logger.
/// `DaemonCore` implements it; a test implements it with a fake.
///
/// An actor whose executor is the event loop: a component's methods take it
/// as their `isolated` argument, so they run in the core's isolation and call
/// these synchronously. That argument is generic (`services: isolated S`),
/// not `isolated any DaemonServices`: Swift 6.3's region checker cannot
/// check calls through an isolated existential.
protocol DaemonServices: Actor {
    nonisolated var loop: EventLoop { get }
    var logger: Logger { get }
    var config: DaemonConfig { get }
    /// Monotonic nanoseconds, the engine's clock.
    var now: UInt64 { get }
    /// Set once the daemon's stop began.
    var stopping: Bool { get }
    /// The engine, for queries (`apps`, `queuedEvents(of:)`). Changes go
    /// through `withEngine`, which journals, re-arms and saves after them.
    var engine: LifecycleEngine! { get }

    /// Runs `body` against the engine; what it changed is journaled before
    /// this returns, and frames it sends to one app go out in one write.
    func withEngine<T, E: Error>(_ body: (LifecycleEngine, UInt64) throws(E) -> T) throws(E) -> T

    /// Writes the event journal now (before relying on what was queued).
    func commitJournal(compactIfDue: Bool)

    /// Asks for the state file to be written soon (coalesced).
    func scheduleSave()

    /// A client connection by id, if it is still open.
    func connection(_ id: Int) -> ClientConnection?

    /// How many client connections are open.
    var connectionCount: Int { get }

    /// The connection an app is talking on, if any.
    func connection(ofApp app: String) -> ClientConnection?

    /// Sends an encoded frame to a client (`send` encodes one).
    func send(frame: [UInt8], to connection: ClientConnection)

    /// The component of this type, if the daemon runs one.
    func component<C: DaemonComponent>(_ type: C.Type) -> C?

    /// The components that conform to `P` (a narrow protocol between
    /// components, such as `BluetoothLinkObserver`), in start order.
    func components<P>(_ type: P.Type) -> [P]

    /// Answers a request that was handled in a task (`EventLoop.task`): the
    /// reply, or the error, to the connection if it is still open.
    func answer(_ outcome: Result<(any Message, [UInt8]), ProtocolError>, id: Int?, connectionID: Int)

    /// A device's change in the decision log (connected, disconnected, ...).
    func recordDevice(kind: String, device: String, change: String, detail: String)

    /// The credentials an app runs with (resolved at its launch, else now);
    /// nil when it runs as the daemon's user.
    func credentials(ofApp app: String) -> SpawnCredentials?

    /// Closes a client connection (its components are told).
    func close(_ connection: ClientConnection)

    /// Something the daemon's one-line status shows changed (systemd's STATUS=).
    func statusChanged()

    /// Metrics, when the endpoint is configured.
    var metrics: DaemonMetrics? { get }

    /// Writes the state file now, not coalesced: what must be in it before
    /// a reply (an L2CAP PSM an app is about to advertise).
    func saveState()
}

extension DaemonServices {
    /// Sends a message (with its body, and the id of the request it answers) to a client.
    func send(_ message: any Message, id: Int? = nil, body: [UInt8] = [], to connection: ClientConnection) {
        send(frame: MessageCodec.encode(message, id: id, body: body), to: connection)
    }

    /// A loop callback (fd watch, timer) into the component of type `C`: it
    /// runs `body` in the core's isolation, or nothing if the daemon no
    /// longer runs such a component or is gone (a timer or watch that fires
    /// after its core ended: in-process tests end cores while their loop runs).
    nonisolated func callback<C: DaemonComponent>(
        _ type: C.Type, _ body: @escaping @Sendable (C, isolated Self) -> Void
    ) -> @Sendable () -> Void {
        { [weak self] in
            self?.assumeIsolated { services in
                guard let component = services.component(C.self) else { return }
                body(component, services)
            }
        }
    }

    /// As `callback`, for a watch's handler (which is told the events).
    nonisolated func watchCallback<C: DaemonComponent>(
        _ type: C.Type, _ body: @escaping @Sendable (C, IOEvents, isolated Self) -> Void
    ) -> @Sendable (IOEvents) -> Void {
        { [weak self] events in
            self?.assumeIsolated { services in
                guard let component = services.component(C.self) else { return }
                body(component, events, services)
            }
        }
    }
}

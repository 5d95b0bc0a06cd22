import VigilProtocol

/// The control role: inspects and drives the daemon, for vigilctl and test rigs.
/// Open to the daemon's user and root, never to an app's own processes.
public final class ControlClient: Sendable {
    /// The socket this client is connected to.
    public var socketPath: String { connection.path }
    /// The daemon's name and version, from the handshake.
    public let daemon: String

    let connection: Connection
    /// Session data and accessory changes the daemon pushes.
    let pushes: ControlPushes

    private init(connection: Connection, welcome: Welcome, pushes: ControlPushes) {
        self.connection = connection
        self.daemon = welcome.daemon
        self.pushes = pushes
    }

    deinit { connection.close() }

    /// Connects to the daemon; the socket is resolved by `DaemonSocket.path(explicit:)`.
    public static func connect(socketPath: String? = nil) async throws -> ControlClient {
        let pushes = ControlPushes()
        let (connection, welcome) = try await Connection.establish(
            path: DaemonSocket.path(explicit: socketPath),
            hello: Hello(role: .control, client: "VigilKit/\(ProtocolVersion.current)"),
            onEvent: { pushes.receive($0) }
        )
        return ControlClient(connection: connection, welcome: welcome, pushes: pushes)
    }

    public func status() async throws -> DaemonStatus {
        try await connection.request(StatusRequest())
    }

    public func apps() async throws -> [AppInfo] {
        try await connection.request(ListApps(), expecting: AppList.self).apps
    }

    /// Does what the user would (launch, background, foreground, quit) or the
    /// system would (terminate). Returns the app as it is after the action.
    public func perform(_ action: UserAction, app: String) async throws -> AppInfo {
        try await connection.request(AppActionRequest(action: action, app: app), expecting: AppReply.self).app
    }

    /// Delivers an event to `app` through the path real sources use: it is
    /// queued, and the app is woken or launched if its modes allow.
    public func wake(
        app: String, kind: String = "test", attributes: [String: JSONValue] = [:], payload: [UInt8] = []
    ) async throws -> EventAccepted {
        try await connection.request(WakeRequest(app: app, kind: kind, attributes: attributes), body: payload)
    }

    /// The decision log, oldest first; optionally one app's, optionally only the last `limit`.
    public func log(app: String? = nil, limit: Int? = nil, since: Double? = nil) async throws -> [DecisionRecord] {
        try await connection.request(LogRequest(app: app, limit: limit, since: since), expecting: DecisionLog.self).decisions
    }

    /// The decision log and, without `app`, the devices that came and went
    /// (accessories, Bluetooth LE links) in the same period.
    public func logWithDevices(app: String? = nil, since: Double? = nil) async throws -> DecisionLog {
        try await connection.request(LogRequest(app: app, since: since), expecting: DecisionLog.self)
    }

    /// The decision log kept so far (as `log`), then each new decision as it
    /// is made; the stream ends when the connection does.
    public func followLog(app: String? = nil, limit: Int? = nil, since: Double? = nil) async throws
        -> (decisions: [DecisionRecord], updates: AsyncStream<DecisionRecord>) {
        let (updates, continuation) = AsyncStream.makeStream(of: DecisionRecord.self)
        let pushes = self.pushes
        do {
            let log = try await connection.request(
                LogRequest(app: app, limit: limit, since: since, follow: true), expecting: DecisionLog.self
            ) { _ in pushes.addDecisionFollower(continuation) }
            return (log.decisions, updates)
        } catch {
            continuation.finish()
            throw error
        }
    }

    /// Rereads the manifest directories.
    public func reload() async throws -> ReloadResult {
        try await connection.request(ReloadRequest())
    }

    /// Closes the connection; requests still waiting fail with `disconnected`.
    public func close() {
        connection.close()
    }
}

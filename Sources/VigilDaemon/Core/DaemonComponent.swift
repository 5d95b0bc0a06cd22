import VigilLifecycle
import VigilProtocol

/// Who sent a request: an app (by id) or a control client (by connection).
enum Requester: Equatable, Sendable {
    case app(String)
    case control(connection: Int)

    var app: String? {
        if case let .app(id) = self { return id }
        return nil
    }

    /// The app that sent `message`, for a request of the app role only: a
    /// control client is answered as for a type it does not know.
    func app(sending message: IncomingMessage) throws(ProtocolError) -> String {
        guard case let .app(id) = self else {
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)' for a control client", id: message.id)
        }
        return id
    }
}

/// One subsystem of the daemon (MQTT, accessories, Bluetooth, ...): it owns
/// its state, and reaches the rest of the daemon only through the
/// `DaemonServices` it is handed, the way the lifecycle engine reaches the
/// world only through `LifecycleHost`.
///
/// The core holds its components in one list: it starts them in that order,
/// stops them in reverse, fans state changes, acknowledgements and closed
/// connections out to each, and routes each request type to the one
/// component that lists it (`requestTypes`). Every entry runs on the loop
/// thread, isolated to the core, so a component needs no locks; a callback
/// of its own (a watch, a timer) comes back through `DaemonServices.callback`.
///
/// Every requirement but `name` has a default that does nothing, so a
/// component says only what it takes part in.
protocol DaemonComponent: AnyObject {
    /// For logs and errors.
    var name: String { get }

    /// The request types this component answers, for either role (it refuses
    /// the role it does not serve). A type is listed by one component only.
    var requestTypes: Set<String> { get }

    /// Starts with what the last daemon saved (`DaemonSnapshot`), after the
    /// engine has restored its queues and adopted the surviving apps.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws

    /// The stop's first step, before the apps are left or told to terminate:
    /// stop taking new work from outside (a broker, a scrape endpoint).
    func stopIntake<S: DaemonServices>(services: isolated S)

    /// The stop's last step, in reverse start order, once the apps were left
    /// (`leavingApps`) or have ended.
    func stop<S: DaemonServices>(leavingApps: Bool, services: isolated S) async

    /// The manifests were loaded again (`vigilctl reload`, SIGHUP).
    func manifestsReloaded<S: DaemonServices>(services: isolated S)

    /// An app changed state; called once the engine call that changed it
    /// returned, so the component may deliver events.
    func appStateChanged<S: DaemonServices>(_ app: String, from old: AppState, to new: AppState, services: isolated S)

    /// `app` acknowledged events: its queue has room again.
    func didAcknowledge<S: DaemonServices>(by app: String, services: isolated S)

    /// What an app is told of its launch, when it connects: a component adds
    /// what it kept for the app (restore identifiers).
    func addLaunchOptions<S: DaemonServices>(_ launch: inout LaunchOptions, of app: String, services: isolated S)

    /// A client connection closed (an app's, or a control client's).
    func connectionClosed<S: DaemonServices>(_ connection: ClientConnection, services: isolated S)

    /// Handles one of `requestTypes`.
    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection,
        services: isolated S) throws(ProtocolError)

    /// Its part of `vigilctl status`.
    func addStatus<S: DaemonServices>(to status: inout DaemonStatus, services: isolated S)

    /// Its part of the one-line status systemd shows (`"2 sessions"`).
    func addSummary<S: DaemonServices>(to parts: inout [String], services: isolated S)

    /// Its series on the metrics page.
    func addMetrics<S: DaemonServices>(to metrics: DaemonMetrics, services: isolated S)

    /// Its part of the state file, written on the next save. `snapshot`
    /// holds the parts as last saved: a component changes its own and leaves
    /// the others (a save asks only some components: `savedPartVersion`).
    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S)

    /// Moves whenever its part of the state file may have changed (a change
    /// counter; moving without a change costs only a comparison). After
    /// every engine call the core looks at it, and `save` is called when it
    /// moved since the last save: a wake does not remake parts nothing
    /// changed (issue 34). nil (the default): not followed; `save` is called
    /// only when some component asked with `DaemonServices.scheduleSave` and
    /// on the full saves (stop, the journal's compaction), so a component
    /// with a part and no version asks for saves itself.
    func savedPartVersion<S: DaemonServices>(services: isolated S) -> UInt64?
}

extension DaemonComponent {
    var requestTypes: Set<String> { [] }
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {}
    func stopIntake<S: DaemonServices>(services: isolated S) {}
    func stop<S: DaemonServices>(leavingApps: Bool, services: isolated S) async {}
    func manifestsReloaded<S: DaemonServices>(services: isolated S) {}
    func appStateChanged<S: DaemonServices>(_ app: String, from old: AppState, to new: AppState, services: isolated S) {}
    func didAcknowledge<S: DaemonServices>(by app: String, services: isolated S) {}
    func addLaunchOptions<S: DaemonServices>(_ launch: inout LaunchOptions, of app: String, services: isolated S) {}
    func connectionClosed<S: DaemonServices>(_ connection: ClientConnection, services: isolated S) {}
    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        throw ProtocolError(.unknownMessage, "\(name) does not handle '\(message.type)'", id: message.id)
    }
    func addStatus<S: DaemonServices>(to status: inout DaemonStatus, services: isolated S) {}
    func addSummary<S: DaemonServices>(to parts: inout [String], services: isolated S) {}
    func addMetrics<S: DaemonServices>(to metrics: DaemonMetrics, services: isolated S) {}
    func save<S: DaemonServices>(into snapshot: inout DaemonSnapshot, services: isolated S) {}
    func savedPartVersion<S: DaemonServices>(services: isolated S) -> UInt64? { nil }
}

/// A component that acts on every event sent to an app and every
/// acknowledgement before the engine journals it (the stream layer: its
/// logs). Apart from `DaemonComponent` because the core calls these on every
/// wake: it calls only the components that conform (a loop over every
/// component's default, twice a wake, was ~400 instructions of the ~166k).
protocol EventDeliveryObserver: DaemonComponent {
    /// `app` is about to acknowledge its events up to `seq` (before the engine
    /// journals it): what must be durable before the acknowledgement is.
    func willAcknowledge<S: DaemonServices>(_ seq: UInt64, by app: String, services: isolated S)

    /// An event is about to be sent to `app`: whatever the app needs to act
    /// on it (a file it names made readable) is done now.
    func willSend<S: DaemonServices>(_ event: QueuedEvent, to app: String, services: isolated S)
}

import VigilProtocol
import VigilSystem

/// Hands each of the app's events to one consumer and acknowledges them.
///
/// The daemon sends one ordered stream of events per app. Accessory events go
/// where the app is waiting for them: `session.*` of a session this connection
/// opened to that `AccessorySession`, `accessory.connected`/`disconnected` to
/// `AccessoryManager.notifications` once the app registered for them in this
/// process; everything else to `Application.events`, including redelivered
/// `session.*` events (their session belonged to an earlier process or
/// connection, and is gone).
///
/// Bluetooth events (`ble.*`) go to the app's `CentralManager`. Until one
/// exists in this process they are held, neither yielded nor acknowledged,
/// and handed to it when it registers, right after its `willRestoreState`.
/// The central's events are numbered across connections (the daemon's `seq`
/// survives its restarts), so those it was already given are not given twice
/// when a new connection redelivers them.
///
/// Consumers finish at their own pace; the `AcknowledgementLedger` sends `ack`
/// only up to the oldest event some consumer still holds, so what one consumer
/// had not finished when the process died comes again.
///
/// Yields happen outside the lock, and so does letting go of a continuation: a
/// dropped item finishes its token, which takes the lock again.
final class EventRouter: Sendable {
    private let main: AsyncStream<ApplicationEvent>.Continuation
    private let state = Locked(State())
    private let acknowledger = Locked<(@Sendable (UInt64) -> Void)?>(nil)

    typealias SessionContinuation = AsyncStream<Delivery<AccessorySession.Event>>.Continuation
    typealias NotificationContinuation = AsyncStream<Delivery<AccessoryNotification>>.Continuation
    typealias CentralContinuation = AsyncStream<Delivery<CentralEvent>>.Continuation

    /// The events of the `n`th central manager registered in this process, in
    /// the ledger: negative session ids (the daemon numbers sessions from 1),
    /// since the ledger lives in VigilProtocol; a `case central(Int)` there
    /// would say it better. One consumer per manager, so the late tokens of a
    /// replaced one finish nothing of its successor's.
    static func centralConsumer(_ n: Int) -> AcknowledgementLedger.Consumer { .session(-n) }

    private static func isCentral(_ consumer: AcknowledgementLedger.Consumer) -> Bool {
        if case let .session(id) = consumer { id < 0 } else { false }
    }

    struct SessionSink: Sendable {
        var continuation: SessionContinuation
        var status: AccessorySession.Status
    }

    private struct State {
        var ledger = AcknowledgementLedger()
        /// Counts lost connections: tokens of an earlier epoch finish nothing.
        var epoch = 0
        var sessions: [Int: SessionSink] = [:]
        /// Sessions this connection closed: their late events are dropped, acknowledged.
        var closedSessions: Set<Int> = []
        /// Sessions of a lost connection, closed on the next one before it is used.
        var staleSessions: [Int] = []
        var notifications: NotificationContinuation?
        var isRegisteredForNotifications = false
        var central: CentralSink?
        /// `ble.*` events that came before any `CentralManager`: held, in order.
        var heldBluetooth: [(event: AppEvent, content: BluetoothEventContent)] = []
        /// The last `seq` yielded to the central, and the last it finished
        /// (across connections: a redelivered event up to it is a repeat).
        var centralYielded: UInt64?
        var centralFinished: UInt64?
        /// How many central managers registered (the current one's number).
        var centralCount = 0
        var centralConsumer: AcknowledgementLedger.Consumer { EventRouter.centralConsumer(centralCount) }
        var isEnded = false
    }

    init(main: AsyncStream<ApplicationEvent>.Continuation) {
        self.main = main
    }

    /// How an `ack` reaches the daemon (the current connection, whichever it is).
    func setAcknowledger(_ send: @escaping @Sendable (UInt64) -> Void) {
        acknowledger.withLock { $0 = send }
    }

    private func acknowledge(_ seq: UInt64?) {
        guard let seq, let send = acknowledger.withLock({ $0 }) else { return }
        send(seq)
    }

    // MARK: Routing (on the connection's reader thread, in wire order)

    private enum Route {
        case main
        case notification(NotificationContinuation, AccessoryNotification, epoch: Int)
        case session(SessionSink, epoch: Int, isLast: Bool)
        case central(CentralContinuation, BluetoothEventContent, consumer: AcknowledgementLedger.Consumer)
        case dropped(acknowledge: UInt64?)
    }

    func receive(_ event: AppEvent) {
        // Unknown and malformed `ble.*` events go to `Application.events`, like any event this client cannot read.
        if BluetoothEventContent.isBluetoothKind(event.kind),
           let content = (try? BluetoothEventContent(kind: event.kind, attributes: event.attributes)) ?? nil {
            return receive(event, content)
        }
        let content = (try? AccessoryEventContent(kind: event.kind, attributes: event.attributes)) ?? nil
        let route = state.withLock { state -> Route in
            switch content {
            case let .connected(accessory)?, let .disconnected(accessory)?:
                guard state.isRegisteredForNotifications, let continuation = state.notifications else { break }
                state.ledger.received(event.seq, for: .notifications)
                let isConnect = event.kind == AccessoryEventKind.connected
                return .notification(continuation, isConnect ? .connected(accessory) : .disconnected(accessory), epoch: state.epoch)
            case let content?:
                // A redelivered session event belongs to a session of an earlier process or connection.
                guard let session = content.session, !event.redelivered else { break }
                if let sink = state.sessions[session] {
                    state.ledger.received(event.seq, for: .session(session))
                    guard case .closed(_, _, willReopen: false) = content else {
                        return .session(sink, epoch: state.epoch, isLast: false)
                    }
                    state.sessions[session] = nil
                    state.closedSessions.insert(session)
                    return .session(sink, epoch: state.epoch, isLast: true)
                }
                if state.closedSessions.contains(session) {
                    state.ledger.received(event.seq, for: .session(session))
                    return .dropped(acknowledge: state.ledger.finish(.session(session), upTo: event.seq))
                }
            case nil:
                break
            }
            state.ledger.received(event.seq, for: .events)
            return .main
        }
        switch route {
        case .main:
            main.yield(.event(event))
        case let .notification(continuation, notification, epoch):
            continuation.yield(Delivery(element: notification, token: token(event.seq, .notifications, epoch)))
        case let .session(sink, epoch, isLast):
            guard let content, let session = content.session else { return }
            // A token dropped unused (no item to make, a finished stream) finishes itself.
            let token = token(event.seq, .session(session), epoch)
            if let element = sink.status.apply(content, payload: event.payload) {
                sink.continuation.yield(Delivery(element: element, token: token))
            }
            if isLast { sink.continuation.finish() }
        case .central:
            break  // `receive(_:_:)` routes Bluetooth events
        case let .dropped(seq):
            acknowledge(seq)
        }
    }

    /// A Bluetooth event: to the central manager, or held until there is one.
    private func receive(_ event: AppEvent, _ content: BluetoothEventContent) {
        let route = state.withLock { state -> Route? in
            guard let central = state.central else {
                state.ledger.received(event.seq, for: nil)
                state.heldBluetooth.append((event, content))
                return nil
            }
            state.ledger.received(event.seq, for: state.centralConsumer)
            if event.redelivered, let yielded = state.centralYielded, event.seq <= yielded {
                // The central has it from the lost connection: done once it finished that copy.
                guard let finished = state.centralFinished else { return .dropped(acknowledge: nil) }
                return .dropped(acknowledge: state.ledger.finish(state.centralConsumer, upTo: finished))
            }
            state.centralYielded = max(state.centralYielded ?? 0, event.seq)
            // A redelivered state is older than what the central knows (its registration, a later event).
            if case let .state(bluetooth) = content, !event.redelivered { central.status.setState(bluetooth) }
            return .central(central.continuation, content, consumer: state.centralConsumer)
        }
        switch route {
        case let .central(continuation, content, consumer)?:
            continuation.yield(Delivery(element: CentralEvent(content, payload: event.payload), token: token(event.seq, consumer, 0)))
        case let .dropped(seq)?:
            acknowledge(seq)
        default:
            break
        }
    }

    private func token(_ seq: UInt64, _ consumer: AcknowledgementLedger.Consumer, _ epoch: Int) -> AcknowledgementToken {
        AcknowledgementToken(seq: seq, consumer: consumer, epoch: epoch, router: self)
    }

    // MARK: Finishing

    /// A consumer is done with its events up to `seq`.
    /// The central's tokens finish across connections: `seq` numbers the
    /// app's events for good, and the repeats a new connection brings of what
    /// the central already holds are not given to it again (see `receive`).
    func finish(_ consumer: AcknowledgementLedger.Consumer, upTo seq: UInt64, epoch: Int) {
        acknowledge(state.withLock { state in
            if Self.isCentral(consumer) {
                if consumer == state.centralConsumer { state.centralFinished = max(state.centralFinished ?? 0, seq) }
                return state.ledger.finish(consumer, upTo: seq)
            }
            return state.epoch == epoch ? state.ledger.finish(consumer, upTo: seq) : nil
        })
    }

    /// `Application.acknowledge`: the app's own stream, cumulative as before.
    func acknowledgeEvents(upTo seq: UInt64) {
        acknowledge(state.withLock { $0.ledger.finish(.events, upTo: seq) })
    }

    // MARK: Consumers

    /// A session opened: called on the reader thread with the reply, before its first event.
    func register(session: Int, _ sink: SessionSink) {
        // What the lock replaces is let go outside it (see the type's comment).
        let (refused, replaced) = state.withLock { state -> (Bool, SessionSink?) in
            guard !state.isEnded else { return (true, nil) }
            sink.status.registered(epoch: state.epoch)
            state.closedSessions.remove(session)
            return (false, state.sessions.updateValue(sink, forKey: session))
        }
        replaced?.continuation.finish()
        if refused { sink.continuation.finish() }
    }

    /// The app closed the session (or let go of it): the stream ends with
    /// `.closed(reason)`, and what it had not consumed counts as handled.
    /// A session of a lost connection is left alone: its id may be another's now.
    func close(session: Int, status: AccessorySession.Status, reason: String) {
        let (sink, seq) = state.withLock { state -> (SessionSink?, UInt64?) in
            guard status.epoch == state.epoch else { return (nil, nil) }
            state.closedSessions.insert(session)
            let sink = state.sessions[session]?.status === status ? state.sessions.removeValue(forKey: session) : nil
            return (sink, state.ledger.finishAll(.session(session)))
        }
        acknowledge(seq)
        guard let sink else { return }
        sink.status.closed(reason)
        sink.continuation.yield(Delivery(element: .closed(reason: reason), token: nil))
        sink.continuation.finish()
    }

    func setNotifications(_ continuation: NotificationContinuation) {
        state.withLock { $0.notifications = continuation }
    }

    /// Called with the daemon's reply to `registerForAccessoryNotifications`,
    /// on the reader thread: events read after it go to `notifications`.
    func setRegisteredForNotifications(_ registered: Bool) {
        state.withLock { $0.isRegisteredForNotifications = registered }
    }

    /// A central manager registered: called on the reader thread with the
    /// reply to `ble.registerCentral`, before any later event is read. Its
    /// stream gets `willRestoreState` first, then the held events, in order.
    func register(central sink: CentralSink, _ registered: CentralRegistered) {
        let outcome = state.withLock { state -> (replaced: CentralSink?, held: [(event: AppEvent, content: BluetoothEventContent)], consumer: AcknowledgementLedger.Consumer)? in
            guard !state.isEnded else { return nil }
            sink.status.setState(registered.state)
            let replaced = state.central
            state.central = sink
            state.centralCount += 1
            (state.centralYielded, state.centralFinished) = (nil, nil)
            defer { state.heldBluetooth = [] }
            for (event, _) in state.heldBluetooth {
                state.ledger.assign(event.seq, to: state.centralConsumer)
                state.centralYielded = max(state.centralYielded ?? 0, event.seq)
            }
            return (replaced, state.heldBluetooth, state.centralConsumer)
        }
        guard let outcome else { return sink.continuation.finish() }
        outcome.replaced?.continuation.finish()
        if let restored = registered.restored {
            sink.continuation.yield(Delivery(element: .willRestoreState(restored), token: nil))
        }
        for (event, content) in outcome.held {
            sink.continuation.yield(
                Delivery(element: CentralEvent(content, payload: event.payload), token: token(event.seq, outcome.consumer, 0)))
        }
    }

    /// The central manager is gone (released, or its stream ended): later
    /// Bluetooth events are held again, for the next one.
    func unregister(central status: CentralStatus) {
        let sink = state.withLock { state -> CentralSink? in
            guard state.central?.status === status else { return nil }
            defer { state.central = nil }
            return state.central
        }
        sink?.continuation.finish()
    }

    /// The adapter state as the daemon reported it after a reconnection (on
    /// the reader thread, with the reply): a change is yielded as `stateChanged`.
    func refreshed(central status: CentralStatus, state bluetooth: BluetoothState) {
        let continuation = state.withLock { state -> CentralContinuation? in
            guard let central = state.central, central.status === status, status.state != bluetooth else { return nil }
            status.setState(bluetooth)
            return central.continuation
        }
        continuation?.yield(Delivery(element: .stateChanged(bluetooth), token: nil))
    }

    // MARK: Connections

    /// The connection dropped: its sessions are over (the daemon that comes
    /// back, often a restarted one, does not know them), and every event not
    /// acknowledged comes again on the next connection.
    func connectionLost(_ reason: ProtocolError) {
        endSessions(reason: "the connection to vigild was lost (\(reason.message))", keepStale: true)
    }

    /// A new connection is greeted: what to tell it before anything else, so it
    /// matches this client's view: sessions to close, and the notification registration.
    func reconnected() -> (staleSessions: [Int], register: Bool, central: CentralStatus?) {
        state.withLock { state in
            defer { state.staleSessions = [] }
            return (state.staleSessions, state.isRegisteredForNotifications, state.central?.status)
        }
    }

    /// Nothing more comes: every stream ends.
    func end() {
        let (notifications, central) = state.withLock { state in
            state.isEnded = true
            defer { state.central = nil }
            return (state.notifications, state.central)
        }
        endSessions(reason: "the app disconnected from vigild", keepStale: false)
        notifications?.finish()
        central?.continuation.finish()
    }

    private func endSessions(reason: String, keepStale: Bool) {
        let sinks = state.withLock { state in
            state.epoch += 1
            state.ledger.reset()
            // Held events were not acknowledged: the next connection brings them again.
            state.heldBluetooth = []
            state.closedSessions = []
            if keepStale { state.staleSessions += state.sessions.keys.sorted() }
            defer { state.sessions = [:] }
            return state.sessions.values.map(\.self)
        }
        for sink in sinks {
            sink.status.closed(reason)
            sink.continuation.yield(Delivery(element: .closed(reason: reason), token: nil))
            sink.continuation.finish()
        }
    }
}

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
/// Bluetooth events go to the app's Bluetooth managers: `ble.peripheral.*` to
/// its `PeripheralManager`, the other `ble.*` kinds to its `CentralManager`,
/// and `ble.state` to both (the central's copy, or the only manager's, is the
/// one acknowledged; the other gets one that acknowledges nothing). Until the
/// manager an event is for exists in this process it is held, neither yielded
/// nor acknowledged, and handed to it when it registers, right after its
/// `willRestoreState`. A manager's events are numbered across connections (the
/// daemon's `seq` survives its restarts), so those it was already given are
/// not given twice when a new connection redelivers them.
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
    /// Sends an `ack` up to a seq, or (`finishing`) a `finishedProcessing` carrying it.
    private let acknowledger = Locked<(@Sendable (_ seq: UInt64, _ finishing: Bool) -> Void)?>(nil)
    /// Channels of `ble.l2cap.incoming` events the app has not taken yet (L2CAPChannel.swift).
    let incomingChannels = Locked<[Int: PendingChannel]>([:])

    typealias SessionContinuation = AsyncStream<Delivery<AccessorySession.Event>>.Continuation
    typealias NotificationContinuation = AsyncStream<Delivery<AccessoryNotification>>.Continuation
    typealias CentralContinuation = AsyncStream<Delivery<CentralEvent>>.Continuation
    typealias PeripheralContinuation = AsyncStream<Delivery<PeripheralManagerEvent>>.Continuation

    /// The events of the `n`th Bluetooth manager (central or peripheral)
    /// registered in this process, in the ledger: negative session ids (the
    /// daemon numbers sessions from 1), since the ledger lives in
    /// VigilProtocol; a `case manager(Int)` there would say it better. One
    /// consumer per manager, so the late tokens of a replaced one finish
    /// nothing of its successor's.
    static func managerConsumer(_ n: Int) -> AcknowledgementLedger.Consumer { .session(-n) }

    private static func isManager(_ consumer: AcknowledgementLedger.Consumer) -> Bool {
        if case let .session(id) = consumer { id < 0 } else { false }
    }

    /// The two Bluetooth managers an app may have.
    private enum Role { case central, peripheral }

    /// A Bluetooth event by the manager(s) it is for.
    private enum BluetoothTarget {
        /// A central-role kind other than `ble.state`: what the central manager
        /// yields for it, in order (a `ble.notification` may carry several values).
        case central([CentralEvent])
        case peripheral(PeripheralEventContent)
        /// `ble.state`: both managers.
        case state(BluetoothState)

        func isFor(_ role: Role) -> Bool {
            switch self {
            case .central: role == .central
            case .peripheral: role == .peripheral
            case .state: true
            }
        }
    }

    /// What the router knows of one role's current manager's events.
    private struct Track {
        /// The current manager's ledger consumer (nil before the first).
        var consumer: AcknowledgementLedger.Consumer?
        /// The last `seq` yielded to it, and the last it finished (across
        /// connections: a redelivered event up to it is a repeat).
        var yielded: UInt64?
        var finished: UInt64?
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
        var peripheral: PeripheralSink?
        /// Bluetooth events that came before the manager they are for: held, in order.
        var heldBluetooth: [(event: AppEvent, target: BluetoothTarget)] = []
        var centralTrack = Track()
        var peripheralTrack = Track()
        /// How many Bluetooth managers registered (numbers their consumers).
        var managerCount = 0
        var isEnded = false
        /// `finishedProcessing()` was called while an event was held by a
        /// consumer: it goes out with the next `ack`, as one message
        /// (`deferFinish`). Cleared by that ack, by any event that arrives
        /// first, and by the loss of the connection.
        var finishDeferred = false

        subscript(track role: Role) -> Track {
            get { role == .central ? centralTrack : peripheralTrack }
            set { if role == .central { centralTrack = newValue } else { peripheralTrack = newValue } }
        }

        func has(_ role: Role) -> Bool { role == .central ? central != nil : peripheral != nil }

        /// A new manager of `role`: a new consumer, nothing yielded yet; it takes
        /// the held events meant for it (the others stay held).
        mutating func registered(_ role: Role) -> (consumer: AcknowledgementLedger.Consumer, held: [(event: AppEvent, target: BluetoothTarget)]) {
            managerCount += 1
            let consumer = EventRouter.managerConsumer(managerCount)
            self[track: role] = Track(consumer: consumer)
            let held = heldBluetooth.filter { $0.target.isFor(role) }
            heldBluetooth.removeAll { $0.target.isFor(role) }
            for (event, _) in held {
                ledger.assign(event.seq, to: consumer)
                self[track: role].yielded = max(self[track: role].yielded ?? 0, event.seq)
            }
            return (consumer, held)
        }
    }

    init(main: AsyncStream<ApplicationEvent>.Continuation) {
        self.main = main
    }

    /// How an `ack` reaches the daemon (the current connection, whichever it
    /// is): on its own, or (`finishing`) in a `finishedProcessing`.
    func setAcknowledger(_ send: @escaping @Sendable (_ seq: UInt64, _ finishing: Bool) -> Void) {
        acknowledger.withLock { $0 = send }
    }

    private func acknowledge(_ seq: UInt64?) {
        guard let seq, let send = acknowledger.withLock({ $0 }) else { return }
        let finishing = state.withLock { state in
            defer { state.finishDeferred = false }
            return state.finishDeferred
        }
        send(seq, finishing)
    }

    /// `Application.finishedProcessing()` while some event is still held by a
    /// consumer (a session's chunk in the body of a `for await` loop, which
    /// is finished when the loop asks for the next one): the finish is kept
    /// and goes out with the acknowledgement that follows, as one
    /// `finishedProcessing` with `ack` (one message and one daemon wake-up
    /// instead of a request, its reply and an `ack`). The daemon's decision is
    /// the same: it suspends a finished app only once everything it was sent
    /// is acknowledged, so the finish could not act before that ack anyway.
    /// An event that arrives before the ack cancels it (the daemon would have
    /// counted that event as new work after the finish: the app is then not
    /// suspended before its window ends, as it would not have been). Returns
    /// false, keeping nothing, when no event is held: the caller sends it now.
    func deferFinish() -> Bool {
        state.withLock { state in
            guard !state.isEnded, state.ledger.outstandingCount > 0 else { return false }
            state.finishDeferred = true
            return true
        }
    }

    // MARK: Routing (on the connection's reader thread, in wire order)

    private enum Route {
        case main
        case notification(NotificationContinuation, AccessoryNotification, epoch: Int)
        case session(SessionSink, epoch: Int, isLast: Bool)
        case dropped(acknowledge: UInt64?)
    }

    /// Where a Bluetooth event goes (made under the lock, yielded outside it).
    private enum BluetoothRoute {
        case central(CentralContinuation, [CentralEvent], consumer: AcknowledgementLedger.Consumer?)
        case peripheral(PeripheralContinuation, PeripheralManagerEvent, consumer: AcknowledgementLedger.Consumer?)
        case dropped(acknowledge: UInt64?)
    }

    func receive(_ event: AppEvent) {
        noteIncomingChannel(event)
        state.withLock { $0.finishDeferred = false }
        // Unknown and malformed `ble.*` events go to `Application.events`, like any event this client cannot read.
        if PeripheralEventContent.isPeripheralKind(event.kind) {
            if let content = (try? PeripheralEventContent(kind: event.kind, attributes: event.attributes)) ?? nil {
                return receive(event, .peripheral(content))
            }
        } else if BluetoothEventContent.isBluetoothKind(event.kind),
                  let content = (try? BluetoothEventContent(kind: event.kind, attributes: event.attributes)) ?? nil {
            if case let .state(bluetooth) = content { return receive(event, .state(bluetooth)) }
            if let elements = CentralEvent.elements(content, event) {
                return receive(event, .central(elements))
            }
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
        case let .dropped(seq):
            acknowledge(seq)
        }
    }

    /// A Bluetooth event: to the manager it is for, or held until there is one.
    private func receive(_ event: AppEvent, _ target: BluetoothTarget) {
        let routes = state.withLock { state -> [BluetoothRoute] in
            // `ble.state` is the central's to acknowledge when there is one, else the peripheral's.
            let owner: Role? = switch target {
            case .central: state.has(.central) ? .central : nil
            case .peripheral: state.has(.peripheral) ? .peripheral : nil
            case .state: state.has(.central) ? .central : state.has(.peripheral) ? .peripheral : nil
            }
            guard let owner, let consumer = state[track: owner].consumer else {
                state.ledger.received(event.seq, for: nil)
                state.heldBluetooth.append((event, target))
                return []
            }
            state.ledger.received(event.seq, for: consumer)
            if event.redelivered, let yielded = state[track: owner].yielded, event.seq <= yielded {
                // The manager has it from the lost connection: done once it finished that copy.
                guard let finished = state[track: owner].finished else { return [.dropped(acknowledge: nil)] }
                return [.dropped(acknowledge: state.ledger.finish(consumer, upTo: finished))]
            }
            state[track: owner].yielded = max(state[track: owner].yielded ?? 0, event.seq)
            var routes: [BluetoothRoute] = []
            if case let .state(bluetooth) = target {
                // A redelivered state is older than what the managers know (their registration, a later event).
                if !event.redelivered {
                    state.central?.status.setState(bluetooth)
                    state.peripheral?.status.setState(bluetooth)
                }
                if let central = state.central {
                    routes.append(.central(central.continuation, [.stateChanged(bluetooth)], consumer: consumer))
                }
                if let peripheral = state.peripheral, owner == .peripheral || !event.redelivered {
                    routes.append(.peripheral(peripheral.continuation, .stateChanged(bluetooth), consumer: owner == .peripheral ? consumer : nil))
                }
                return routes
            }
            switch target {
            case let .central(elements):
                if let central = state.central {
                    routes.append(.central(central.continuation, elements, consumer: consumer))
                }
            case let .peripheral(content):
                if let peripheral = state.peripheral {
                    routes.append(.peripheral(peripheral.continuation, PeripheralManagerEvent(content, payload: event.payload), consumer: consumer))
                }
            case .state:
                break
            }
            return routes
        }
        for route in routes {
            switch route {
            case let .central(continuation, elements, consumer):
                yield(elements, to: continuation, token: consumer.map { token(event.seq, $0, 0) })
            case let .peripheral(continuation, element, consumer):
                continuation.yield(Delivery(element: element, token: consumer.map { token(event.seq, $0, 0) }))
            case let .dropped(seq):
                acknowledge(seq)
            }
        }
    }

    /// The elements of one event, in order: only the last carries the event's
    /// token, so the event is acknowledged once the manager is done with all of them.
    private func yield(_ elements: [CentralEvent], to continuation: CentralContinuation, token: AcknowledgementToken?) {
        for (index, element) in elements.enumerated() {
            continuation.yield(Delivery(element: element, token: index == elements.count - 1 ? token : nil))
        }
    }

    private func token(_ seq: UInt64, _ consumer: AcknowledgementLedger.Consumer, _ epoch: Int) -> AcknowledgementToken {
        AcknowledgementToken(seq: seq, consumer: consumer, epoch: epoch, router: self)
    }

    // MARK: Finishing

    /// A consumer is done with its events up to `seq`.
    /// A Bluetooth manager's tokens finish across connections: `seq` numbers
    /// the app's events for good, and the repeats a new connection brings of
    /// what the manager already holds are not given to it again (see `receive`).
    func finish(_ consumer: AcknowledgementLedger.Consumer, upTo seq: UInt64, epoch: Int) {
        acknowledge(state.withLock { state in
            if Self.isManager(consumer) {
                for role in [Role.central, .peripheral] where state[track: role].consumer == consumer {
                    state[track: role].finished = max(state[track: role].finished ?? 0, seq)
                }
                return state.ledger.finish(consumer, upTo: seq)
            }
            return state.epoch == epoch ? state.ledger.finish(consumer, upTo: seq) : nil
        })
    }

    /// `Application.finishedProcessing(acknowledging:)`: as `acknowledgeEvents`,
    /// but the `ack` to send, if any, is returned for the caller to carry in
    /// its `finishedProcessing` instead of going out on its own.
    func takeAcknowledgement(upTo seq: UInt64) -> UInt64? {
        state.withLock { state in
            state.finishDeferred = false  // this finish replaces it
            return state.ledger.finish(.events, upTo: seq)
        }
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
    /// stream gets `willRestoreState` first, then the held events meant for it, in order.
    func register(central sink: CentralSink, _ registered: CentralRegistered) {
        let outcome = state.withLock { state -> (replaced: CentralSink?, taken: (consumer: AcknowledgementLedger.Consumer, held: [(event: AppEvent, target: BluetoothTarget)]))? in
            guard !state.isEnded else { return nil }
            sink.status.setState(registered.state)
            defer { state.central = sink }
            return (state.central, state.registered(.central))
        }
        guard let outcome else { return sink.continuation.finish() }
        outcome.replaced?.continuation.finish()
        if let restored = registered.restored {
            sink.continuation.yield(Delivery(element: .willRestoreState(restored), token: nil))
        }
        for (event, target) in outcome.taken.held {
            let elements: [CentralEvent]
            switch target {
            case let .central(held): elements = held
            case let .state(bluetooth): elements = [.stateChanged(bluetooth)]
            case .peripheral: continue
            }
            yield(elements, to: sink.continuation, token: token(event.seq, outcome.taken.consumer, 0))
        }
    }

    /// A peripheral manager registered: called on the reader thread with the
    /// reply to `ble.registerPeripheral`, before any later event is read. Its
    /// stream gets `willRestoreState` first, then the held events meant for it, in order.
    func register(peripheral sink: PeripheralSink, _ registered: PeripheralRegistered) {
        let outcome = state.withLock { state -> (replaced: PeripheralSink?, taken: (consumer: AcknowledgementLedger.Consumer, held: [(event: AppEvent, target: BluetoothTarget)]))? in
            guard !state.isEnded else { return nil }
            sink.status.setState(registered.state)
            if let restored = registered.restored { sink.status.restored(restored) }
            defer { state.peripheral = sink }
            return (state.peripheral, state.registered(.peripheral))
        }
        guard let outcome else { return sink.continuation.finish() }
        outcome.replaced?.continuation.finish()
        if let restored = registered.restored {
            sink.continuation.yield(Delivery(element: .willRestoreState(restored), token: nil))
        }
        for (event, target) in outcome.taken.held {
            let element: PeripheralManagerEvent
            switch target {
            case let .peripheral(content): element = PeripheralManagerEvent(content, payload: event.payload)
            case let .state(bluetooth): element = .stateChanged(bluetooth)
            case .central: continue
            }
            sink.continuation.yield(Delivery(element: element, token: token(event.seq, outcome.taken.consumer, 0)))
        }
    }

    /// The central manager is gone (released, or its stream ended): later
    /// central events are held again, for the next one.
    func unregister(central status: CentralStatus) {
        let sink = state.withLock { state -> CentralSink? in
            guard state.central?.status === status else { return nil }
            defer { state.central = nil }
            return state.central
        }
        sink?.continuation.finish()
    }

    /// The peripheral manager is gone: later peripheral events are held again, for the next one.
    func unregister(peripheral status: PeripheralStatus) {
        let sink = state.withLock { state -> PeripheralSink? in
            guard state.peripheral?.status === status else { return nil }
            defer { state.peripheral = nil }
            return state.peripheral
        }
        sink?.continuation.finish()
    }

    /// The adapter state as the daemon reported it after a reconnection (on
    /// the reader thread, with the reply): a change is yielded as `stateChanged`
    /// to each manager that did not know it.
    func refreshed(state bluetooth: BluetoothState) {
        let (central, peripheral) = state.withLock { state -> (CentralContinuation?, PeripheralContinuation?) in
            var central: CentralContinuation?
            var peripheral: PeripheralContinuation?
            if let sink = state.central, sink.status.state != bluetooth {
                sink.status.setState(bluetooth)
                central = sink.continuation
            }
            if let sink = state.peripheral, sink.status.state != bluetooth {
                sink.status.setState(bluetooth)
                peripheral = sink.continuation
            }
            return (central, peripheral)
        }
        central?.yield(Delivery(element: .stateChanged(bluetooth), token: nil))
        peripheral?.yield(Delivery(element: .stateChanged(bluetooth), token: nil))
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
    func reconnected() -> (staleSessions: [Int], register: Bool, central: CentralStatus?, peripheral: PeripheralStatus?) {
        state.withLock { state in
            defer { state.staleSessions = [] }
            return (state.staleSessions, state.isRegisteredForNotifications, state.central?.status, state.peripheral?.status)
        }
    }

    /// Nothing more comes: every stream ends.
    func end() {
        let (notifications, central, peripheral) = state.withLock { state in
            state.isEnded = true
            defer {
                state.central = nil
                state.peripheral = nil
            }
            return (state.notifications, state.central, state.peripheral)
        }
        endSessions(reason: "the app disconnected from vigild", keepStale: false)
        notifications?.finish()
        central?.continuation.finish()
        peripheral?.continuation.finish()
    }

    private func endSessions(reason: String, keepStale: Bool) {
        let sinks = state.withLock { state in
            state.epoch += 1
            state.ledger.reset()
            state.finishDeferred = false
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

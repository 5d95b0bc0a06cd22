import VigilProtocol
import VigilSystem

/// What the daemon pushes to a control client without being asked: the data
/// and end of its terminal sessions, accessory changes after
/// `watchAccessories`, and Bluetooth events (`blePush`) after its `ble.*` requests. Routed on the reader thread, in wire order; streams are
/// registered by the reply that creates them, so none misses its first push.
/// (Yields happen outside the lock: `onTermination` takes it again.)
final class ControlPushes: Sendable {
    private let state = Locked(State())

    private struct State {
        var watchers: [Int: AsyncStream<AccessoryEvent>.Continuation] = [:]
        var nextWatcher = 0
        var sessions: [Int: AsyncStream<ControlSession.Output>.Continuation] = [:]
        var bluetooth: [Int: AsyncStream<CentralEvent>.Continuation] = [:]
        var peripheral: [Int: AsyncStream<PeripheralManagerEvent>.Continuation] = [:]
        var decisions: [Int: AsyncStream<DecisionRecord>.Continuation] = [:]
        var l2cap: [Int: AsyncStream<ControlL2CAPChannel>.Continuation] = [:]
        var rfcomm: [Int: AsyncStream<ControlRFCOMMChannel>.Continuation] = [:]
        var isClosed = false
    }

    /// On the reader thread.
    func receive(_ event: ConnectionEvent) {
        switch event {
        case .welcome:
            break
        case let .message(message):
            try? route(message)
        case let .closed(reason):
            closeAll("the connection to vigild was lost (\(reason.message))")
        }
    }

    private func route(_ message: IncomingMessage) throws(ProtocolError) {
        switch message.type {
        case DecisionPushed.type:
            let record = try message.decode(DecisionPushed.self).decision
            for follower in state.withLock({ Array($0.decisions.values) }) { follower.yield(record) }
        case AccessoryEvent.type:
            let event = try message.decode(AccessoryEvent.self)
            for watcher in state.withLock({ Array($0.watchers.values) }) { watcher.yield(event) }
        case SessionData.type:
            let session = try message.decode(SessionData.self).session
            state.withLock { $0.sessions[session] }?.yield(.data(message.body))
        case SessionLinesChanged.type:
            let changed = try message.decode(SessionLinesChanged.self)
            state.withLock { $0.sessions[changed.session] }?.yield(.lines(changed.lines, changed: changed.changed))
        case SessionClosed.type:
            let closed = try message.decode(SessionClosed.self)
            if closed.willReopen == true {
                state.withLock { $0.sessions[closed.session] }?.yield(.waitingToReopen(reason: closed.reason))
                return
            }
            guard let continuation = state.withLock({ $0.sessions.removeValue(forKey: closed.session) }) else { return }
            continuation.yield(.closed(reason: closed.reason))
            continuation.finish()
        case BluetoothPush.type:
            let push = try message.decode(BluetoothPush.self)
            if push.kind == L2CAPEventKind.incoming { return incomingChannel(push) }
            if push.kind == RFCOMMEventKind.incoming { return incomingRFCOMMChannel(push) }
            // Kinds this version does not know are skipped. The peripheral role's
            // go to peripheral listeners, the adapter's state to both kinds of listener.
            if PeripheralEventContent.isPeripheralKind(push.kind) {
                guard let content = try PeripheralEventContent(kind: push.kind, attributes: push.attributes) else { return }
                let event = PeripheralManagerEvent(content, payload: message.body)
                for watcher in state.withLock({ Array($0.peripheral.values) }) { watcher.yield(event) }
                return
            }
            guard let content = try BluetoothEventContent(kind: push.kind, attributes: push.attributes) else { return }
            let events = CentralEvent.all(content, payload: message.body, attributes: push.attributes) ?? []
            for watcher in state.withLock({ Array($0.bluetooth.values) }) { for event in events { watcher.yield(event) } }
            if case let .state(bluetooth) = content {
                for watcher in state.withLock({ Array($0.peripheral.values) }) { watcher.yield(.stateChanged(bluetooth)) }
            }
        default:
            break
        }
    }

    /// A Bluetooth listener: every `blePush` from now on, until the connection closes.
    func addBluetoothWatcher(_ continuation: AsyncStream<CentralEvent>.Continuation) {
        add(continuation, to: \.bluetooth)
    }

    /// A channel a central opened to a PSM this client published: its session
    /// is registered before its first data is read, then listeners get it.
    private func incomingChannel(_ push: BluetoothPush) {
        guard let info = L2CAPChannelInfo(attributes: push.attributes) else { return }
        announce(session: info.session, to: \.l2cap) { ControlL2CAPChannel(info: info, output: $0) }
    }

    /// An incoming channel's session, registered before its first data is
    /// read; then every listener of `listeners` gets the channel.
    private func announce<Channel: Sendable>(
        session: Int, to listeners: KeyPath<State, [Int: AsyncStream<Channel>.Continuation]> & Sendable,
        _ make: (AsyncStream<ControlSession.Output>) -> Channel
    ) {
        let (output, continuation) = AsyncStream.makeStream(of: ControlSession.Output.self)
        addSession(session, continuation)
        let channel = make(output)
        for listener in state.withLock({ Array($0[keyPath: listeners].values) }) { listener.yield(channel) }
    }

    /// A channel a device opened to a serial service this client published,
    /// registered as an L2CAP one is.
    private func incomingRFCOMMChannel(_ push: BluetoothPush) {
        guard let info = RFCOMMChannelInfo(attributes: push.attributes) else { return }
        announce(session: info.session, to: \.rfcomm) { ControlRFCOMMChannel(info: info, output: $0) }
    }

    /// An RFCOMM listener: every incoming channel from now on, until the connection closes.
    func addRFCOMMListener(_ continuation: AsyncStream<ControlRFCOMMChannel>.Continuation) {
        add(continuation, to: \.rfcomm)
    }

    /// An L2CAP listener: every incoming channel from now on, until the connection closes.
    func addL2CAPListener(_ continuation: AsyncStream<ControlL2CAPChannel>.Continuation) {
        add(continuation, to: \.l2cap)
    }

    /// A peripheral-role listener: every `ble.peripheral.*` and `ble.state`
    /// push from now on, until the connection closes.
    func addPeripheralWatcher(_ continuation: AsyncStream<PeripheralManagerEvent>.Continuation) {
        add(continuation, to: \.peripheral)
    }

    /// A watch began: called with its reply, before any later push is read.
    func addDecisionFollower(_ continuation: AsyncStream<DecisionRecord>.Continuation) {
        add(continuation, to: \.decisions)
    }

    func addWatcher(_ continuation: AsyncStream<AccessoryEvent>.Continuation) {
        add(continuation, to: \.watchers)
    }

    /// Registers a listener under a new id until its stream ends; a closed
    /// connection finishes it at once.
    private func add<Element>(
        _ continuation: AsyncStream<Element>.Continuation,
        to listeners: WritableKeyPath<State, [Int: AsyncStream<Element>.Continuation]> & Sendable
    ) {
        let id = state.withLock { state -> Int? in
            guard !state.isClosed else { return nil }
            defer { state.nextWatcher += 1 }
            state[keyPath: listeners][state.nextWatcher] = continuation
            return state.nextWatcher
        }
        guard let id else { return continuation.finish() }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0[keyPath: listeners].removeValue(forKey: id) }
        }
    }

    /// A session opened: called with its reply, before its first data is read.
    func addSession(_ session: Int, _ continuation: AsyncStream<ControlSession.Output>.Continuation) {
        let refused = state.withLock { state -> Bool in
            guard !state.isClosed else { return true }
            state.sessions[session] = continuation
            return false
        }
        if refused { continuation.finish() }
    }

    /// The client closed the session: its output finishes without a `.closed`.
    func removeSession(_ session: Int) {
        state.withLock { $0.sessions.removeValue(forKey: session) }?.finish()
    }

    private func closeAll(_ reason: String) {
        let (l2cap, rfcomm) = state.withLock { state in
            defer {
                state.l2cap = [:]
                state.rfcomm = [:]
            }
            return (Array(state.l2cap.values), Array(state.rfcomm.values))
        }
        for listener in l2cap { listener.finish() }
        for listener in rfcomm { listener.finish() }
        let (watchers, sessions, bluetooth, peripheral, decisions) = state.withLock { state in
            state.isClosed = true
            defer {
                state.decisions = [:]
                state.watchers = [:]
                state.sessions = [:]
                state.bluetooth = [:]
                state.peripheral = [:]
            }
            return (Array(state.watchers.values), Array(state.sessions.values), Array(state.bluetooth.values), Array(state.peripheral.values),
                    Array(state.decisions.values))
        }
        for follower in decisions { follower.finish() }
        for watcher in bluetooth { watcher.finish() }
        for watcher in peripheral { watcher.finish() }
        for session in sessions {
            session.yield(.closed(reason: reason))
            session.finish()
        }
        for watcher in watchers { watcher.finish() }
    }
}

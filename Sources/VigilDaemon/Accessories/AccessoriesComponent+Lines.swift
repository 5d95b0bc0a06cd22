import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilStreams
import VigilSystem

/// A session whose input lines are watched.
///
/// Why sampling on a loop timer and not TIOCMIWAIT: TIOCMIWAIT blocks in
/// the ioctl until a line changes, so it needs a thread per watched port,
/// and such a thread can only be stopped (session closed, daemon stopping)
/// by a signal that interrupts the ioctl, or by the device going away:
/// closing the fd from another thread does not wake it. The loop has no fd
/// event for a modem line either (poll reports data and hang-up only). So
/// the daemon samples the driver's TIOCGICOUNT counters of CTS, DSR, DCD and
/// RI on a loop timer, only while some session asked (an idle daemon with
/// no watch is never woken): a counter that grew shows a change even when
/// the pulse was shorter than the interval and the line is back where it
/// was, which sampling TIOCMGET alone would miss. Where the driver keeps no
/// counters, the lines' state (TIOCMGET) is compared instead.
struct LineWatch {
    var wake: Bool
    var interval: Duration
    var timer: TimerID?
    var counters: ModemLineCounters?
    var lines: ModemLines
    /// Changes held for an app that is not running and did not ask to be woken.
    var held: ModemLines = []
}

/// A break being sent: the timer that ends it, and whom to answer then.
struct PendingBreak {
    var timer: TimerID
    var connectionID: Int
    var requestID: Int?
}

extension AccessoriesComponent {
    func handleLineRequest<S: DaemonServices>(
        _ message: IncomingMessage, holder: SessionHolder, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        do throws(ProtocolError) {
            switch message.type {
            case SetSessionLines.type:
                let request: SetSessionLines = try message.decode()
                let port = try linePort(request.session, holder: holder, services: services)
                try lineCall { () throws(SerialLineError) in try port.setModemLines(dtr: request.dtr, rts: request.rts) }
                if request.dtr != nil || request.rts != nil {
                    services.logger.info("session \(request.session): \(request.dtr.map { "DTR \($0 ? "up" : "down") " } ?? "")\(request.rts.map { "RTS \($0 ? "up" : "down")" } ?? "")")
                }
                let lines = try lineCall { () throws(SerialLineError) in try port.modemLines() }
                services.send(SessionLinesReply(lines: Self.sessionLines(lines)), id: message.id, to: connection)
            case SendBreak.type:
                let request: SendBreak = try message.decode()
                guard SendBreak.milliseconds.contains(request.milliseconds) else {
                    throw ProtocolError(.invalidArgument, "a break lasts \(SendBreak.milliseconds.lowerBound) to \(SendBreak.milliseconds.upperBound) ms")
                }
                let port = try linePort(request.session, holder: holder, services: services)
                guard breaks[request.session] == nil else {
                    throw ProtocolError(.invalidState, "session \(request.session) is already sending a break")
                }
                try lineCall { () throws(SerialLineError) in try port.setBreak(true) }
                let session = request.session
                let (connectionID, requestID) = (connection.id, message.id)
                let timer = services.loop.schedule(
                    after: .milliseconds(request.milliseconds),
                    services.callback(AccessoriesComponent.self) { accessories, services in
                        accessories.endBreak(session, replyTo: connectionID, id: requestID, services: services)
                    })
                breaks[session] = PendingBreak(timer: timer, connectionID: connectionID, requestID: requestID)
                services.logger.info("session \(session): break for \(request.milliseconds) ms")
            case WatchSessionLines.type:
                let request: WatchSessionLines = try message.decode()
                let port = try linePort(request.session, holder: holder, services: services)
                let lines = try lineCall { () throws(SerialLineError) in try port.modemLines() }
                stopWatching(request.session, services: services)
                if request.enabled {
                    let milliseconds = request.intervalMilliseconds ?? 20
                    guard WatchSessionLines.intervals.contains(milliseconds) else {
                        throw ProtocolError(.invalidArgument, "intervalMilliseconds must be \(WatchSessionLines.intervals.lowerBound) to \(WatchSessionLines.intervals.upperBound)")
                    }
                    lineWatches[request.session] = LineWatch(
                        wake: request.wake ?? false, interval: .milliseconds(milliseconds),
                        counters: try? port.modemLineCounters(), lines: lines)
                    scheduleLineSample(request.session, services: services)
                    services.logger.info("session \(request.session): watching CTS, DSR, DCD and RI every \(milliseconds) ms\(request.wake == true ? ", waking the app" : "")")
                }
                services.send(SessionLinesReply(lines: Self.sessionLines(lines)), id: message.id, to: connection)
            case SetSessionRS485.type:
                let request: SetSessionRS485 = try message.decode()
                let port = try linePort(request.session, holder: holder, services: services)
                let config = request.rs485
                let wanted = RS485Settings(
                    enabled: config.enabled, rtsOnSend: config.rtsOnSend ?? true, rtsAfterSend: config.rtsAfterSend ?? false,
                    delayBeforeSend: config.delayBeforeSend ?? 0, delayAfterSend: config.delayAfterSend ?? 0,
                    receiveDuringSend: config.receiveDuringSend ?? false)
                let taken = try lineCall { () throws(SerialLineError) in try port.setRS485(wanted) }
                services.logger.info("session \(request.session): RS-485 \(taken.enabled ? "on" : "off")")
                services.send(RS485Reply(rs485: RS485Config(
                    enabled: taken.enabled, rtsOnSend: taken.rtsOnSend, rtsAfterSend: taken.rtsAfterSend,
                    delayBeforeSend: taken.delayBeforeSend, delayAfterSend: taken.delayAfterSend,
                    receiveDuringSend: taken.receiveDuringSend)), id: message.id, to: connection)
            default:
                throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'")
            }
        } catch {
            throw ProtocolError(error.code, error.message, id: message.id)
        }
    }

    /// The open port of an accessory session this holder holds.
    private func linePort<S: DaemonServices>(_ session: Int, holder: SessionHolder, services: isolated S) throws(ProtocolError) -> SerialPort {
        guard table.sessions[session] != nil, services.component(StreamSessions.self)?.holder(of: session) == holder else {
            throw ProtocolError(.invalidArgument, "no accessory session \(session) is held by this client")
        }
        guard let endpoint = ports[session] else {
            if hidDevices[session] != nil || table.sessions[session]?.lineSettings == "" {
                throw ProtocolError(.notSupported, "session \(session) is on a HID accessory: it has no serial lines")
            }
            throw ProtocolError(.invalidState, notOpenReason(session))
        }
        return endpoint.port
    }

    private func lineCall<T>(_ call: () throws(SerialLineError) -> T) throws(ProtocolError) -> T {
        do {
            return try call()
        } catch {
            switch error {
            case .notSupported: throw ProtocolError(.notSupported, "\(error)")
            case .invalidValue: throw ProtocolError(.invalidArgument, "\(error)")
            case .failed: throw ProtocolError(.deviceError, "\(error)")
            }
        }
    }

    static func sessionLines(_ lines: ModemLines) -> SessionLines {
        SessionLines(
            dtr: lines.contains(.dtr), rts: lines.contains(.rts), cts: lines.contains(.cts),
            dsr: lines.contains(.dsr), dcd: lines.contains(.dcd), ri: lines.contains(.ri))
    }

    private func endBreak<S: DaemonServices>(_ session: Int, replyTo connectionID: Int, id: Int?, services: isolated S) {
        guard breaks.removeValue(forKey: session) != nil else { return }
        let connection = services.connection(connectionID)
        do throws(ProtocolError) {
            guard let port = ports[session]?.port else { throw ProtocolError(.invalidState, "session \(session) ended during the break") }
            try lineCall { () throws(SerialLineError) in try port.setBreak(false) }
            if let connection { services.send(Done(), id: id, to: connection) }
        } catch {
            if let connection { services.send(ProtocolError(error.code, error.message, id: id), to: connection) }
        }
    }

    // MARK: Watching the input lines

    private func scheduleLineSample<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard let interval = lineWatches[session]?.interval else { return }
        lineWatches[session]?.timer = services.loop.schedule(
            after: interval,
            services.callback(AccessoriesComponent.self) { accessories, services in
                accessories.sampleLines(session, services: services)
            })
    }

    /// One sample: counters that grew or lines that differ are a change.
    /// A session waiting for its accessory keeps its watch (sampled again
    /// once its port is back, from the new port's counters).
    private func sampleLines<S: DaemonServices>(_ session: Int, services: isolated S) {
        guard var watch = lineWatches[session] else { return }
        watch.timer = nil
        defer {
            lineWatches[session] = watch
            scheduleLineSample(session, services: services)
        }
        guard let port = ports[session]?.port, let lines = try? port.modemLines() else {
            watch.counters = nil
            return
        }
        let counters = try? port.modemLineCounters()
        var changed = lines.symmetricDifference(watch.lines).intersection(.inputs)
        if let counters, let earlier = watch.counters { changed.formUnion(counters.changed(since: earlier)) }
        watch.counters = counters
        watch.lines = lines
        guard !changed.isEmpty else { return }
        let holder = services.component(StreamSessions.self)?.holder(of: session)
        switch holder {
        case let .app(app)?:
            let running = services.engine.apps[app]?.state.isRunning ?? false
            if watch.wake || running {
                deliverLines(session, lines: lines, changed: changed.union(watch.held), services: services)
                watch.held = []
            } else {
                watch.held.formUnion(changed)
            }
        case let .control(connectionID)?:
            if let connection = services.connection(connectionID) {
                services.send(SessionLinesChanged(session: session, lines: Self.sessionLines(lines), changed: Self.names(changed)), to: connection)
            }
        case nil:
            break
        }
    }

    private func deliverLines<S: DaemonServices>(_ session: Int, lines: ModemLines, changed: ModemLines, services: isolated S) {
        var attributes = Self.sessionLines(lines).attributes
        attributes["changed"] = .array(Self.names(changed).map { .string($0) })
        services.component(StreamSessions.self)?.deliver(AccessoryEventKind.lines, attributes, of: session, services: services)
    }

    private static func names(_ lines: ModemLines) -> [String] {
        ModemLines.named.filter { lines.contains($0.line) }.map(\.name)
    }

    /// An app runs again: the changes held for it while it was suspended go now.
    func deliverHeldLineChanges<S: DaemonServices>(of app: String, services: isolated S) {
        guard let streams = services.component(StreamSessions.self) else { return }
        for (session, watch) in lineWatches.sorted(by: { $0.key < $1.key })
        where !watch.held.isEmpty && streams.holder(of: session) == .app(app) {
            lineWatches[session]?.held = []
            deliverLines(session, lines: watch.lines, changed: watch.held, services: services)
        }
    }

    private func stopWatching<S: DaemonServices>(_ session: Int, services: isolated S) {
        if let timer = lineWatches.removeValue(forKey: session)?.timer { services.loop.cancelTimer(timer) }
    }

    /// The session ended: its watch and any break go.
    func endLineControl<S: DaemonServices>(_ session: Int, services: isolated S) {
        stopWatching(session, services: services)
        if let pending = breaks.removeValue(forKey: session) {
            services.loop.cancelTimer(pending.timer)
            if let connection = services.connection(pending.connectionID) {
                services.send(ProtocolError(.invalidState, "session \(session) ended during the break", id: pending.requestID), to: connection)
            }
        }
    }
}

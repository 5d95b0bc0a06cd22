import VigilProtocol

/// What happened to an event handed to `deliver`.
public enum Disposition: String, Sendable {
    /// Sent to the running app.
    case delivered
    /// The suspended app was resumed for it.
    case woke
    /// The app was launched into the background for it.
    case launched
    /// Kept until the app may receive it (suspended without the mode, force-quit, …).
    case queued
}

extension LifecycleEngine {
    /// Hands an event to an app: the one path every event source uses.
    ///
    /// - Parameter canBeHeldBack: whether the source can keep the event itself
    ///   (a serial port with flow control). If so, a full queue throws `queueFull`
    ///   and the source stops reading; if not, the event is counted as dropped,
    ///   the drop is logged, and the app is told with an `overflow` event.
    @discardableResult
    public func deliver(_ event: QueuedEvent, to id: String, canBeHeldBack: Bool = false, now: UInt64) throws(ProtocolError) -> (seq: UInt64, disposition: Disposition) {
        // In place: appending to a copy of the record would copy its queue too.
        guard let appended = withRecord(id, { app -> QueuedEvent? in
            app.queue.append(event) == nil ? nil : app.queue.events.last
        }) else { throw ProtocolError(.unknownApp, "no app with id '\(id)'") }
        guard let stored = appended else {
            if canBeHeldBack {
                throw ProtocolError(.queueFull, "the event queue of \(id) is full (\(queueLimit) unacknowledged events)")
            }
            var dropped = 0
            update(id) {
                $0.queue.countDrop(kind: event.kind)
                dropped = $0.queue.totalDropped
            }
            decide(id, .drop, "event queue full (\(queueLimit)): dropped a '\(event.kind)' event (\(dropped) in total); the app will get an overflow event")
            throw ProtocolError(.queueFull, "the event queue of \(id) is full; the event was dropped and will be reported to the app")
        }
        noteChanged(id)
        let seq = stored.seq
        let disposition = route(stored, to: id, now: now)
        if disposition == .delivered, withRecord(id, { $0.queue.unsent.contains(where: { $0.seq == seq }) }) == true {
            return (seq, .queued)  // not connected yet, or waiting behind an earlier event of its source
        }
        return (seq, disposition)
    }

    /// An earlier waiting event of `event`'s source that the app may not be
    /// woken for: `event` waits behind it (for the foreground), so waking the
    /// app for `event` is pointless. Other sources' held events do not matter.
    func heldAhead(of event: QueuedEvent, in app: AppRecord) -> QueuedEvent? {
        app.queue.heldAhead(of: event) { app.manifest.mayBeWoken(for: $0.wakeMode) }
    }

    /// The first waiting event the app may be woken or launched for now: one
    /// whose mode it declares and that no held event of its source is ahead of.
    func firstWakingEvent(of app: AppRecord) -> QueuedEvent? {
        app.queue.firstDeliverable { app.manifest.mayBeWoken(for: $0.wakeMode) }
    }

    /// Decides what an event does to the app's state.
    func route(_ event: QueuedEvent, to id: String, now: UInt64) -> Disposition {
        guard let state = withRecord(id, { $0.state }) else { return .queued }
        switch state {
        case .active, .inactive:
            flush(id)
            return .delivered
        case .background:
            guard let (mayReceive, terminating) = withRecord(id, { ($0.mayReceive(event), $0.terminateAt != nil) }) else { return .queued }
            guard mayReceive else {
                decide(id, .queue, "'\(event.kind)' queued: no \(event.wakeMode?.rawValue ?? "") background mode, delivered in the foreground")
                return .queued
            }
            if !terminating {
                // New work: a fresh processing window within the limit, and an
                // earlier "finished" no longer covers it.
                update(id) {
                    $0.suspendAt = max($0.suspendAt ?? 0, min(now + nanoseconds(timings.wakeBudget), $0.limitAt ?? .max))
                    $0.finishRequested = false
                }
            }
            flush(id)
            return .delivered
        case .suspended:
            guard let (mayWake, blocking) = withRecord(id, { ($0.manifest.mayBeWoken(for: event.wakeMode), heldAhead(of: event, in: $0)) })
            else { return .queued }
            guard mayWake else {
                decide(id, .queue, "'\(event.kind)' queued: no \(event.wakeMode?.rawValue ?? "") background mode, delivered in the foreground")
                return .queued
            }
            if let head = blocking {
                decide(id, .queue, "'\(event.kind)' queued behind seq \(head.seq) ('\(head.kind)') of its source, which waits for the foreground")
                return .queued
            }
            resume(id, now: now, reason: "woken for '\(event.kind)' (seq \(event.seq))")
            return .woke
        case .notRunning:
            guard let app = apps[id], canRelaunch(app, for: event) else { return .queued }
            do {
                try start(
                    id, launch: LaunchOptions(reason: .event, eventKind: event.kind), state: .background, now: now,
                    action: .relaunch, reason: "launched into the background for '\(event.kind)' (seq \(event.seq))")
                update(id) { $0.wakes += 1 }
                return .launched
            } catch {
                return .queued
            }
        }
    }

    /// Wakes a suspended app for work that is not a new event: a source holding
    /// data back until the app acknowledges what it was sent (see the daemon's
    /// sessions). Returns false, doing nothing, unless the app is suspended.
    @discardableResult
    public func wake(_ id: String, reason: String, now: UInt64) -> Bool {
        guard withRecord(id, { $0.state }) == .suspended else { return false }
        resume(id, now: now, reason: "woken: " + reason)
        return true
    }

    /// Suspended to background with a fresh processing window; sends what waits.
    private func resume(_ id: String, now: UInt64, reason: String) {
        host.thaw(id)
        update(id) {
            $0.state = .background
            $0.wakes += 1
        }
        beginBackgroundStretch(id, now: now, window: timings.wakeBudget)
        decide(id, .wake, "\(reason): \(seconds(timings.wakeBudget)) to process")
        flush(id)
    }

    /// Whether an event may launch a stopped app, logging why not.
    private func canRelaunch(_ app: AppRecord, for event: QueuedEvent) -> Bool {
        if app.forceQuit {
            decide(app.id, .queue, "'\(event.kind)' queued: force-quit by the user, not relaunched until the user launches it")
            return false
        }
        if app.manifest.exitsOnSuspend {
            decide(app.id, .queue, "'\(event.kind)' queued: the app exits on suspend and does not run in the background")
            return false
        }
        if !app.manifest.mayBeWoken(for: event.wakeMode) {
            decide(app.id, .queue, "'\(event.kind)' queued: no \(event.wakeMode?.rawValue ?? "") background mode")
            return false
        }
        if let head = heldAhead(of: event, in: app) {
            decide(app.id, .queue, "'\(event.kind)' queued behind seq \(head.seq) ('\(head.kind)') of its source, which waits for the foreground")
            return false
        }
        return true
    }

    /// After a crash: relaunches the app if it has events it may be woken for,
    /// unless it keeps crashing.
    func relaunchForPendingEvents(_ id: String, now: UInt64, reason: LaunchReason) {
        guard let app = apps[id], let first = firstWakingEvent(of: app) else { return }
        guard !app.forceQuit, !app.manifest.exitsOnSuspend else { return }
        if app.crashTimes.count > timings.relaunchLimit {
            decide(id, .refuse, "not relaunched: ended \(app.crashTimes.count) times within \(seconds(timings.relaunchWindow)); waiting for the next event or the user")
            return
        }
        try? start(
            id, launch: LaunchOptions(reason: reason, eventKind: first.kind), state: .background, now: now,
            action: .relaunch, reason: "relaunched into the background to redeliver \(app.queue.events.count) unacknowledged event(s)")
    }

    /// The app acknowledged every event up to `seq`.
    /// Acknowledged are the events this process was sent with a seq up to
    /// `seq`: on this connection, or on an earlier one of the same process
    /// (same pid and start time; e.g. before a daemon restart, ahead of their
    /// redelivery), see `EventQueue.acknowledge`. An `ack` that covers none
    /// of them but names an event another process was sent (or one sent
    /// when the receiver was not recorded) is refused and logged: the event
    /// comes again, flagged `redelivered`.
    public func acknowledge(_ id: String, upTo seq: UInt64, now: UInt64) {
        var ignored: QueuedEvent?
        var receiver: ProcessIdentity?
        update(id) {
            if $0.queue.acknowledge(upTo: seq) == 0 {
                ignored = $0.queue.unsent.first { $0.seq <= seq && $0.everSent }
                receiver = $0.queue.receiver
            }
            $0.queue.appendOverflowReportIfPossible()
        }
        if let ignored {
            let sentTo = ignored.sentTo.map { "another process (\($0))" } ?? "a process not recorded"
            let this = receiver.map { "this one (\($0))" } ?? "this connection's, whose process is not known"
            decide(id, .refuse, "ack up to seq \(seq) refused: seq \(ignored.seq) ('\(ignored.kind)') was sent to \(sentTo), not \(this), and not yet again on this connection; it comes again, redelivered")
        }
        flush(id)
        suspendIfDone(id, now: now, trigger: "finished processing and acknowledged its last event")
    }

    /// Sends every event the app may receive now, in `seq` order. Per source,
    /// stops at the first one it may not receive yet, or whose stream has an
    /// event in flight, so a source's order is never broken; other sources go on.
    ///
    /// All are marked sent before the first goes out, so the daemon journals
    /// them with one write before the first send.
    func flush(_ id: String) {
        // Taken in place: a copy of the queue would copy its events on the first change.
        let batch = withRecord(id) { app -> [(event: QueuedEvent, redelivered: Bool)] in
            guard app.connected, app.state.isRunning else { return [] }
            let foreground = app.state.isForeground
            let manifest = app.manifest
            return app.queue.takeSendable { foreground || manifest.mayBeWoken(for: $0.wakeMode) }
        } ?? []
        guard !batch.isEmpty else { return }
        noteChanged(id)
        for (event, redelivered) in batch {
            // A send that finds the connection broken closes it (rewinding the queue).
            guard withRecord(id, { $0.connected }) == true else { return }
            host.send(.event(event, redelivered: redelivered), to: id)
        }
    }
}

import VigilProtocol

extension LifecycleEngine {
    /// The next instant at which `advance(to:)` has something to do; nil if none.
    /// The daemon arms a single timer for it, so an idle daemon never wakes.
    /// Costs the apps changed since the last call, plus a scan of the apps that
    /// have a deadline (a few, typically: those running in the background).
    public var nextDeadline: UInt64? {
        refreshDeadlines()
        return deadlines.values.min()
    }

    /// Recomputes the deadlines of the apps changed since the last time.
    func refreshDeadlines() {
        guard !changedSinceDeadlines.isEmpty else { return }
        for id in changedSinceDeadlines {
            let (next, due) = withRecord(id) { (deadline(of: &$0), $0.refresh?.due) } ?? (nil, nil)
            deadlines[id] = next
            refreshDue[id] = due
        }
        changedSinceDeadlines.removeAll(keepingCapacity: true)
    }

    /// `inout` only so that the record is read where it lies, not copied.
    /// The earliest kept in a running minimum, not an array: this runs for
    /// every app changed by an engine call (three times per wake).
    private func deadline(of app: inout AppRecord) -> UInt64? {
        var earliest: UInt64?
        func consider(_ instant: UInt64) { earliest = min(earliest ?? instant, instant) }
        if let terminateAt = app.terminateAt { consider(terminateAt) }
        if let connectBy = app.connectBy { consider(connectBy) }
        if let refresh = refreshDeadline(of: app) { consider(refresh) }
        if app.state == .background, let limit = app.limitAt {
            if app.tasks.isEmpty {
                if let suspendAt = app.suspendAt { consider(min(suspendAt, limit)) }
            } else {
                if !app.expirationWarned {
                    consider(limit - min(limit, nanoseconds(timings.expirationWarning)))
                }
                consider(limit)
            }
        }
        return earliest
    }

    /// Acts on every deadline that has passed by `now`.
    public func advance(to now: UInt64) {
        refreshDeadlines()
        if refreshDue.values.contains(where: { $0 <= now }) { fireDueRefreshes(now: now) }
        // Only apps with a deadline that has passed have anything to do here.
        for id in deadlines.filter({ $0.value <= now }).keys.sorted() {
            guard let app = records[id] else { continue }
            if let terminateAt = app.terminateAt, terminateAt <= now {
                stop(id, cause: .notice, now: now, action: .terminate, reason: "did not exit within \(seconds(timings.exitGrace)) of willTerminate")
                continue
            }
            if let connectBy = app.connectBy, connectBy <= now {
                let waiting = app.queue.events.count
                stop(id, cause: .launchTimeout, now: now, action: .terminate,
                     reason: "launched into the background, it did not connect within \(seconds(timings.launchTimeout)) (launch-timeout); "
                        + "not relaunched: its \(waiting) event(s) wait for the next event or the user")
                continue
            }
            guard app.state == .background, let limit = app.limitAt, app.terminateAt == nil else { continue }
            if app.tasks.isEmpty {
                if let suspendAt = app.suspendAt, min(suspendAt, limit) <= now {
                    let why = app.launch?.reason == .user && app.wakes == 0 && app.backgroundNanosecondsUsed == 0
                        ? "grace period of \(seconds(timings.suspendGrace)) over" : "processing window over"
                    suspend(id, now: now, reason: why + ", no background task held")
                }
                continue
            }
            if !app.expirationWarned, limit <= now + nanoseconds(timings.expirationWarning) {
                update(id) { $0.expirationWarned = true }
                for task in app.tasks {
                    send(id, .taskExpiring(TaskExpiring(task: task.id, name: task.name)))
                }
                let names = app.tasks.map { "\($0.id) '\($0.name)'" }.joined(separator: ", ")
                decide(id, .expire, "background time nearly used up: expiration handlers called for task(s) \(names)")
            }
            if limit <= now {
                let names = app.tasks.map { "\($0.id) '\($0.name)'" }.joined(separator: ", ")
                stop(
                    id, cause: .watchdog(tasks: app.tasks), now: now, action: .terminate,
                    reason: "watchdog: background time limit of \(seconds(timings.backgroundTimeLimit)) reached while holding task(s) \(names)")
            }
        }
    }
}

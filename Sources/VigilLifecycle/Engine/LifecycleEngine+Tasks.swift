import VigilProtocol

extension LifecycleEngine {
    /// Begins a background task; returns its id, or 0 (invalid) when no
    /// background time can be granted.
    public func beginBackgroundTask(_ id: String, name: String, now: UInt64) -> Int {
        guard let app = apps[id], app.state.isRunning, app.terminateAt == nil else { return 0 }
        if !app.state.isForeground, let limit = app.limitAt,
           limit <= now + nanoseconds(timings.expirationWarning) {
            decide(id, .refuse, "background task '\(name)' refused: less than \(seconds(timings.expirationWarning)) of background time left")
            return 0
        }
        let task = BackgroundTaskInfo(id: app.nextTaskID, name: name)
        update(id) {
            $0.nextTaskID += 1
            $0.tasks.append(task)
        }
        if !app.state.isForeground {
            decide(id, .extend, "background task \(task.id) '\(name)' begun: held out of suspension up to the limit")
        }
        return task.id
    }

    /// Ends a background task. Suspends the app at once if nothing else keeps it running.
    public func endBackgroundTask(_ id: String, task: Int, now: UInt64) throws(ProtocolError) {
        guard let app = apps[id], app.tasks.contains(where: { $0.id == task }) else {
            throw ProtocolError(.invalidArgument, "no background task \(task) is held")
        }
        update(id) { $0.tasks.removeAll { $0.id == task } }
        suspendIfDone(id, now: now, trigger: "last background task ended")
    }

    /// The app says it has finished processing: suspended at once unless it
    /// holds tasks, or events it was sent (or may be sent) are not yet
    /// acknowledged; then as soon as the last of those is done. It finished
    /// what it had seen, not what was on its way.
    public func finishedProcessing(_ id: String, now: UInt64) {
        guard withRecord(id, { $0.state == .background && $0.terminateAt == nil }) == true else { return }
        update(id) { $0.finishRequested = true }
        suspendIfDone(id, now: now, trigger: "finished processing early")
    }

    /// `acknowledge(upTo: seq)` and then `finishedProcessing`, as the two
    /// frames would have them (the `finishedProcessing` request's `ack`): the
    /// acknowledgement's checks and refusals are `acknowledge`'s, and the
    /// finish sees the queue after it. `between` runs after the acknowledgement
    /// (what it lets the sources do, the reply), before the finish.
    public func finishedProcessing(_ id: String, acknowledgingUpTo seq: UInt64, now: UInt64, between: () -> Void = {}) {
        acknowledge(id, upTo: seq, now: now)
        between()
        finishedProcessing(id, now: now)
    }

    /// Suspends a background app that holds no task once its window is over,
    /// or once it has finished and acknowledged everything it was given.
    func suspendIfDone(_ id: String, now: UInt64, trigger: String) {
        guard let (windowOver, finished) = withRecord(id, { app -> (Bool, Bool)? in
            guard app.state == .background, app.terminateAt == nil, app.tasks.isEmpty else { return nil }
            let windowOver = app.suspendAt.map { $0 <= now } ?? false
            let finished = app.finishRequested && app.queue.unacknowledgedCount == 0
                && app.queue.firstDeliverable(mayReceive: app.mayReceive) == nil
            return (windowOver, finished)
        }) ?? nil, windowOver || finished else { return }
        suspend(id, now: now, reason: trigger + (windowOver ? ", processing window over" : ", nothing left to handle"))
    }

    /// Seconds of background time left; nil in the foreground (unlimited).
    public func backgroundTimeRemaining(_ id: String, now: UInt64) -> Double? {
        guard let app = apps[id], !app.state.isForeground else { return nil }
        guard let limit = app.limitAt else { return 0 }
        return limit > now ? Double(limit - now) / 1e9 : 0
    }
}

extension LifecycleEngine {
    /// Seconds spent running in the background in total, the current stretch included.
    public func backgroundTimeUsed(_ id: String, now: UInt64) -> Double {
        guard let app = apps[id] else { return 0 }
        var used = app.backgroundNanosecondsUsed
        if let since = app.backgroundSince, now > since { used += now - since }
        return Double(used) / 1e9
    }
}

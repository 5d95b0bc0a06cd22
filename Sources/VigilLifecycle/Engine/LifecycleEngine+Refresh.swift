import VigilProtocol

/// Background refresh (the `fetch` mode): an app asks to be woken now and
/// then; the engine wakes (or launches) it with an `app.refresh` event and the
/// usual budget. Refreshes are never early and at most `refresh-coalescing`
/// late: the one engine deadline falls at the earliest due refresh plus that
/// window, and when it passes every refresh due by then goes out together, so
/// many apps cost the daemon one wake-up per batch and no timer each.
extension LifecycleEngine {
    /// Sets (or replaces) an app's refresh schedule; returns it.
    @discardableResult
    public func scheduleRefresh(_ id: String, interval: Double, earliestBegin: Double?, now: UInt64) throws(ProtocolError) -> RefreshSchedule {
        let app = try record(id)
        guard app.manifest.backgroundModes.contains(.fetch) else {
            throw ProtocolError(.invalidState, "\(id) does not declare the 'fetch' background mode in its manifest")
        }
        let year = 366.0 * 86_400
        guard interval.isFinite, interval > 0, interval <= year else {
            throw ProtocolError(.invalidArgument, "refresh interval \(interval) s: must be more than 0 and at most a year (\(Int(year)) s)")
        }
        if let earliestBegin, !(earliestBegin.isFinite && earliestBegin >= 0 && earliestBegin <= year) {
            throw ProtocolError(.invalidArgument, "earliestBegin \(earliestBegin) s: must be 0 to a year (\(Int(year)) s) from now")
        }
        let applied = nanoseconds(max(interval, timings.refreshMinimumInterval))
        let schedule = RefreshSchedule(
            interval: applied, due: now + (earliestBegin.map(nanoseconds) ?? applied), noDataStreak: app.refresh?.noDataStreak ?? 0)
        update(id) { $0.refresh = schedule }
        unjournaledChanges &+= 1
        decide(id, .refresh, "refresh scheduled every \(seconds(Double(applied) / 1e9))"
            + (interval < timings.refreshMinimumInterval ? " (asked \(seconds(interval)); refresh-minimum-interval)" : "")
            + ", next in \(seconds(Double(schedule.due - now) / 1e9))")
        return schedule
    }

    /// No more refresh wakes for the app.
    public func cancelRefresh(_ id: String) throws(ProtocolError) {
        guard try record(id).refresh != nil else { return }
        update(id) { $0.refresh = nil }
        unjournaledChanges &+= 1
        decide(id, .refresh, "refresh cancelled by the app")
    }

    /// The app reports how its refresh went: the stretch follows (reset by new
    /// data, doubled by none, kept on failure), the next refresh is one
    /// stretched interval from now, and the processing window ends as with
    /// `finishedProcessing`. Returns the new schedule.
    @discardableResult
    public func completeRefresh(_ id: String, result: RefreshResult, now: UInt64) throws(ProtocolError) -> RefreshSchedule {
        guard var schedule = try record(id).refresh else {
            throw ProtocolError(.invalidState, "\(id) has no refresh scheduled")
        }
        switch result {
        case .newData: schedule.noDataStreak = 0
        case .noData: schedule.noDataStreak = min(schedule.noDataStreak + 1, 64)
        case .failed: break
        }
        schedule.due = now + schedule.stretchedInterval
        update(id) { $0.refresh = schedule }
        unjournaledChanges &+= 1
        decide(id, .refresh, "refresh completed (\(result.rawValue)); next in \(seconds(Double(schedule.stretchedInterval) / 1e9))"
            + (schedule.stretch > 1 ? " (interval stretched \(schedule.stretch)x: \(schedule.noDataStreak) refresh(es) in a row without new data)" : ""))
        finishedProcessing(id, now: now)
        return schedule
    }

    /// When the app's next refresh goes out at the latest: due plus the window.
    func refreshDeadline(of app: AppRecord) -> UInt64? {
        guard let refresh = app.refresh else { return nil }
        return refresh.due + nanoseconds(timings.refreshCoalescing)
    }

    /// Sends every refresh due by `now`: the batch one deadline stands for.
    func fireDueRefreshes(now: UInt64) {
        for id in refreshDue.filter({ $0.value <= now }).keys.sorted() {
            guard let app = records[id], var schedule = app.refresh else { continue }
            // The next comes one interval on even if the app never reports.
            schedule.due = now + schedule.stretchedInterval
            update(id) { $0.refresh = schedule }
            unjournaledChanges &+= 1
            let pending = app.queue.events.contains { $0.kind == RefreshEventKind.refresh }
            if pending || app.forceQuit {
                decide(id, .refresh, pending
                    ? "refresh due; the last one is not acknowledged yet, so none is added"
                    : "refresh due; not sent: the user force-quit the app")
                continue
            }
            let event = QueuedEvent(
                kind: RefreshEventKind.refresh,
                attributes: ["interval": .number(Double(schedule.stretchedInterval) / 1e9), "stretch": .number(Double(schedule.stretch))],
                wakeMode: .fetch)
            do {
                try deliver(event, to: id, now: now)
            } catch {
                decide(id, .refresh, "refresh due; not queued: \(error.message)")
            }
        }
    }
}

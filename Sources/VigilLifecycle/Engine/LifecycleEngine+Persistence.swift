import VigilProtocol

/// The part of an app's record that must survive a daemon restart: the events
/// it has not acknowledged, and the user's force-quit. The state file holds a
/// snapshot of it; the event journal the changes since (`JournalRecord`).
public struct SavedApp: Sendable, Codable, Equatable {
    public var forceQuit: Bool
    public var queue: SavedQueue
    /// Its background refresh schedule (absent in files of daemons before
    /// refresh). Saved with the snapshot, not journaled: a schedule changed
    /// in the half second before a crash is the one before.
    public var refresh: RefreshSchedule?
}

extension LifecycleEngine {
    /// What to write to the state file.
    public func savedState() -> [String: SavedApp] {
        apps.mapValues { SavedApp(forceQuit: $0.forceQuit, queue: $0.queue.saved, refresh: $0.refresh) }
    }

    /// Moves every queue change and force-quit change since the last call into
    /// `journal`, as records. The daemon calls it, and writes the bytes, before
    /// it relies on the changes (before an event goes to an app, before the
    /// next read of a port); changes accumulate until then.
    public func journalChanges(into journal: inout JournalEncoder) {
        guard !changedSinceJournal.isEmpty else { return }
        // Sorted: the journal's order must not depend on a Set's (one app,
        // as in a wake, needs no sort).
        let changed = changedSinceJournal.count == 1 ? Array(changedSinceJournal) : changedSinceJournal.sorted()
        changedSinceJournal.removeAll(keepingCapacity: true)
        for id in changed {
            // In place: taking the changes must not copy the record or its queue.
            guard let (changes, forceQuit) = withRecord(id, { ($0.queue.takeChanges(), $0.forceQuit) }) else { continue }
            for change in changes { journal.append(change.record(app: id)) }
            if forceQuit != (journal.forceQuit[id] ?? false) {
                journal.append(.forceQuit(app: id, forceQuit))
                journal.forceQuit[id] = forceQuit
            }
        }
    }

    /// Takes back what an earlier daemon saved, for apps that still have a
    /// manifest. Call before adopting survivors and before any event arrives.
    /// A refresh schedule comes back at most one interval from `now`: its
    /// instants are CLOCK_MONOTONIC, which starts again at boot.
    public func restore(_ saved: [String: SavedApp], now: UInt64) {
        for (id, app) in saved where apps[id] != nil {
            let fetch = apps[id]!.manifest.backgroundModes.contains(.fetch)
            update(id) {
                $0.forceQuit = app.forceQuit
                $0.queue = EventQueue(limit: queueLimit, restoring: app.queue)
                if fetch, var refresh = app.refresh {
                    refresh.due = min(refresh.due, now + refresh.stretchedInterval)
                    $0.refresh = refresh
                }
            }
            unjournaledChanges &+= 1
        }
    }
}

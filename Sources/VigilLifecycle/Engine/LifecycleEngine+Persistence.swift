import VigilProtocol

/// The part of an app's record that must survive a daemon restart: the events
/// it has not acknowledged, and the user's force-quit. The state file holds a
/// snapshot of it; the event journal the changes since (`JournalRecord`).
public struct SavedApp: Sendable, Codable, Equatable {
    public var forceQuit: Bool
    public var queue: SavedQueue
}

extension LifecycleEngine {
    /// What to write to the state file.
    public func savedState() -> [String: SavedApp] {
        apps.mapValues { SavedApp(forceQuit: $0.forceQuit, queue: $0.queue.saved) }
    }

    /// Moves every queue change and force-quit change since the last call into
    /// `journal`, as records. The daemon calls it, and writes the bytes, before
    /// it relies on the changes (before an event goes to an app, before the
    /// next read of a port); changes accumulate until then.
    public func journalChanges(into journal: inout JournalEncoder) {
        var changed: [String] = []
        for (id, app) in apps where !app.queue.changes.isEmpty || app.forceQuit != (journal.forceQuit[id] ?? false) {
            changed.append(id)
        }
        for id in changed {
            // In place: taking the changes must not copy the queue.
            for change in records[id]!.queue.takeChanges() { journal.append(change.record(app: id)) }
            let forceQuit = apps[id]!.forceQuit
            if forceQuit != (journal.forceQuit[id] ?? false) {
                journal.append(.forceQuit(app: id, forceQuit))
                journal.forceQuit[id] = forceQuit
            }
        }
    }

    /// Takes back what an earlier daemon saved, for apps that still have a
    /// manifest. Call before adopting survivors and before any event arrives.
    public func restore(_ saved: [String: SavedApp]) {
        for (id, app) in saved where apps[id] != nil {
            update(id) {
                $0.forceQuit = app.forceQuit
                $0.queue = EventQueue(limit: queueLimit, restoring: app.queue)
            }
        }
    }
}

import VigilProtocol

/// The part of an app's record that must survive a daemon restart: the events
/// it has not acknowledged, and the user's force-quit.
public struct SavedApp: Sendable, Codable, Equatable {
    public var forceQuit: Bool
    public var queue: SavedQueue
}

extension LifecycleEngine {
    /// What to write to the state file.
    public func savedState() -> [String: SavedApp] {
        apps.mapValues { SavedApp(forceQuit: $0.forceQuit, queue: $0.queue.saved) }
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

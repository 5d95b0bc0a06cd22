import VigilLifecycle

/// The write-ahead event journal's hooks (see `StateStore`).
extension DaemonCore {
    /// Makes the engine's queue changes durable: after every engine call
    /// (so bytes read from a port are journaled in the same loop turn, before
    /// the next read) and before any event is sent. Compacts a long journal.
    func commitJournal(compactIfDue: Bool = true) {
        guard let engine else { return }
        if stateStore.commit(engine, logger: logger), compactIfDue {
            saveState()
        }
    }
}

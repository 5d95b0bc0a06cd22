import VigilProtocol

/// What event sources (accessories, Bluetooth) need beyond `deliver`.
extension LifecycleEngine {
    /// Adds `bytes` to the app's last unsent event when `matches` accepts it,
    /// so a burst of data wakes the app once and arrives as one event. Returns
    /// the merged event's seq, or nil when a new event must be delivered.
    ///
    /// Merged bytes are new work, routed like a new event: they wake a
    /// suspended app (its earlier event may be waiting behind one in flight)
    /// and extend a background app's window.
    public func merge(_ bytes: [UInt8], into id: String, if matches: (QueuedEvent) -> Bool, now: UInt64) -> UInt64? {
        guard apps[id] != nil, let seq = apps[id]!.queue.mergeIntoLastUnsent(bytes, if: matches) else { return nil }
        guard let app = apps[id], let event = app.queue.events.last else { return seq }
        // Only where routing changes something: the event's own delivery already
        // logged why it waits, and a log line per read would drown the log.
        switch app.state {
        case .notRunning: break
        case .suspended where !app.manifest.mayBeWoken(for: event.wakeMode) || blockingHead(of: app) != nil: break
        case .background where !app.mayReceive(event): break
        default: _ = route(event, to: id, now: now)
        }
        return seq
    }

    /// Withdraws unsent events that `matches` accepts (coalescing), recording why.
    @discardableResult
    public func withdraw(from id: String, reason: String, where matches: (QueuedEvent) -> Bool) -> [QueuedEvent] {
        guard apps[id] != nil else { return [] }
        let withdrawn = apps[id]!.queue.withdrawUnsent(where: matches)
        if !withdrawn.isEmpty {
            decide(id, .queue, "\(withdrawn.count) queued event(s) withdrawn: \(reason)")
        }
        return withdrawn
    }

    /// Events still in the app's queue (sent or not), for sources that bound
    /// what they let pile up, e.g. bytes of one session.
    public func queuedEvents(of id: String) -> [QueuedEvent] {
        apps[id]?.queue.events ?? []
    }
}

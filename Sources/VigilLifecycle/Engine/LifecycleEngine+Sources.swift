import VigilProtocol

/// What event sources (accessories, Bluetooth) need beyond `deliver`.
extension LifecycleEngine {
    /// Adds `bytes` to the app's last unsent event when `matches` accepts it,
    /// so a burst of data wakes the app once and arrives as one event. Returns
    /// the merged event's seq, or nil when a new event must be delivered.
    public func merge(_ bytes: [UInt8], into id: String, if matches: (QueuedEvent) -> Bool) -> UInt64? {
        guard apps[id] != nil else { return nil }
        return apps[id]!.queue.mergeIntoLastUnsent(bytes, if: matches)
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

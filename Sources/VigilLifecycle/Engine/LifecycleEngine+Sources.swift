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
        // In place (`withRecord`): copies of the record cost more than the merge.
        guard let merged = withRecord(id, { $0.queue.mergeIntoLastUnsent(bytes, if: matches) }), let seq = merged else { return nil }
        changedSinceJournal.insert(id)
        // Only where routing changes something: the event's own delivery already
        // logged why it waits, and a log line per read would drown the log.
        let routed = withRecord(id) { app -> QueuedEvent? in
            guard let event = app.queue.events.last else { return nil }
            switch app.state {
            case .notRunning: return nil
            case .suspended where !app.manifest.mayBeWoken(for: event.wakeMode) || heldAhead(of: event, in: app) != nil: return nil
            case .background where !app.mayReceive(event): return nil
            default: return event
            }
        }
        if let routed, let event = routed { _ = route(event, to: id, now: now) }
        return seq
    }

    /// Queues `bytes` of a data stream (e.g. one accessory session) so that no
    /// event's payload ever exceeds `maxEventBytes`: as much as fits tops up
    /// the app's last unsent event of the stream (a burst is one event and one
    /// wake), the rest goes in new events from `makeEvent`, each at most
    /// `maxEventBytes`. Bytes stay in order. A refusal (`queueFull`) can come
    /// only from a new event; the bytes before it are queued.
    public func deliverStream(
        _ bytes: [UInt8], to id: String, stream: String, maxEventBytes: Int, now: UInt64,
        makeEvent: ([UInt8]) -> QueuedEvent
    ) throws(ProtocolError) {
        precondition(maxEventBytes > 0, "a stream event holds at least one byte")
        var rest = bytes[...]
        if let room = withRecord(id, { app -> Int? in
            guard let last = app.queue.events.last, last.stream == stream, last.payload.count < maxEventBytes else { return nil }
            return maxEventBytes - last.payload.count
        }) ?? nil {
            let part = rest.prefix(room)
            if merge(Array(part), into: id, if: { $0.stream == stream }, now: now) != nil {
                rest = rest.dropFirst(part.count)
            }
        }
        while !rest.isEmpty {
            let part = rest.prefix(maxEventBytes)
            try deliver(makeEvent(Array(part)), to: id, canBeHeldBack: true, now: now)
            rest = rest.dropFirst(part.count)
        }
    }

    /// Withdraws unsent events that `matches` accepts (coalescing), recording why.
    @discardableResult
    public func withdraw(from id: String, reason: String, where matches: (QueuedEvent) -> Bool) -> [QueuedEvent] {
        guard let withdrawn = withRecord(id, { $0.queue.withdrawUnsent(where: matches) }) else { return [] }
        changedSinceJournal.insert(id)
        if !withdrawn.isEmpty {
            decide(id, .queue, "\(withdrawn.count) queued event(s) withdrawn: \(reason)")
        }
        return withdrawn
    }

    /// Events still in the app's queue (sent or not), for sources that bound
    /// what they let pile up, e.g. bytes of one session.
    public func queuedEvents(of id: String) -> [QueuedEvent] {
        withRecord(id) { $0.queue.events } ?? []
    }
}

/// Identifies one scheduled timer; never reused.
public struct TimerID: Hashable, Sendable {
    public let rawValue: UInt64
}

extension EventLoop {
    /// Runs `handler` once on the loop thread at `deadline` (at once if past).
    /// Timers due together run in deadline order, ties in scheduling order.
    @discardableResult
    public func schedule(at deadline: MonotonicInstant, _ handler: @escaping @Sendable () -> Void) -> TimerID {
        registry.withLock { registry in
            let id = registry.makeID()
            registry.timers.insert(id: id, deadline: deadline, handler: handler)
            rearmTimer(&registry)
            return TimerID(rawValue: id)
        }
    }

    @discardableResult
    public func schedule(after delay: Duration, _ handler: @escaping @Sendable () -> Void) -> TimerID {
        schedule(at: MonotonicInstant.now().advanced(by: delay), handler)
    }

    /// Cancels a pending timer; a timer that already ran or was cancelled is
    /// ignored. Once this returns on the loop thread the handler will not run,
    /// even if it was due in the batch being processed.
    public func cancelTimer(_ id: TimerID) {
        registry.withLock { registry in
            guard registry.timers.cancel(id: id.rawValue) else { return }
            // Re-arm only if the cancelled timer was the armed one: no spurious wake-up.
            rearmTimer(&registry)
        }
    }

    func fireDueTimers() {
        timerFD.drain()
        let now = MonotonicInstant.now()
        let newestID = registry.withLock { $0.lastID }
        // One at a time, so a handler can cancel a later timer of the same batch.
        while let handler = registry.withLock({ $0.timers.popDue(at: now, scheduledThrough: newestID) }) {
            handler()
        }
        registry.withLock { registry in
            registry.armedDeadline = nil  // it just expired
            rearmTimer(&registry)
        }
    }

    private func rearmTimer(_ registry: inout Registry) {
        let earliest = registry.timers.earliestDeadline()
        guard earliest != registry.armedDeadline else { return }
        timerFD.arm(earliest)
        registry.armedDeadline = earliest
    }
}

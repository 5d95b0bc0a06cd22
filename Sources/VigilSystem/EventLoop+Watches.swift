/// Identifies one fd registration; never reused, so a stale id is harmless.
public struct WatchID: Hashable, Sendable {
    public let rawValue: UInt64
}

extension EventLoop {
    /// Calls `handler` on the loop thread while `fd` is ready for any of
    /// `events` (level-triggered: until the condition is consumed).
    /// `.error` and `.hangup` are reported even when not asked for.
    ///
    /// One watch per fd (epoll refuses a second with EEXIST): change the
    /// events with `updateWatch`. Call `removeWatch` before closing `fd`:
    /// epoll keeps a registration for as long as any duplicate of it lives.
    public func watch(
        _ fd: Int32,
        for events: IOEvents,
        _ handler: @escaping @Sendable (IOEvents) -> Void
    ) throws -> WatchID {
        try registry.withLock { registry throws(SystemError) in
            let id = registry.makeID()
            try epoll.add(fd, mask: events.epollMask, token: id)
            registry.watches[id] = Watch(fd: fd, handler: handler)
            return WatchID(rawValue: id)
        }
    }

    /// Changes the events a watch waits for (empty: pause it, keep it
    /// registered). Unknown ids are ignored.
    public func updateWatch(_ id: WatchID, for events: IOEvents) throws {
        try registry.withLock { registry throws(SystemError) in
            guard let watch = registry.watches[id.rawValue] else { return }
            try epoll.modify(watch.fd, mask: events.epollMask, token: id.rawValue)
        }
    }

    /// Unregisters a watch; unknown ids are ignored.
    ///
    /// Once this returns on the loop thread (from any handler, even the
    /// watch's own), the handler is never called again, not even for an event
    /// already collected in the current batch. From another thread, a call
    /// already under way on the loop thread may still finish.
    public func removeWatch(_ id: WatchID) {
        registry.withLock { registry in
            guard let watch = registry.watches.removeValue(forKey: id.rawValue) else { return }
            epoll.remove(watch.fd)
        }
    }

    func dispatch(_ token: UInt64, _ events: IOEvents) {
        guard let handler = registry.withLock({ $0.watches[token]?.handler }) else { return }
        handler(events)
    }
}

import CDBus
import VigilSystem

/// libdbus's main-loop integration, mapped onto the `EventLoop`.
///
/// libdbus asks for "watches" (an fd plus readable/writable, each enabled or
/// not) and "timeouts" (an interval, re-armed after each expiry) and expects
/// to be told when they fire; it reports "data remains to dispatch" through
/// a status callback. All of these callbacks run on the loop thread, because
/// every libdbus call that can trigger them is made there.
extension DBusConnection {
    /// The loop watch for one fd. libdbus gives its socket two watches (one
    /// to read, one to write), while the loop allows one registration per fd.
    struct FDWatch {
        var id: WatchID
        var watches: [LibDBusHandle]
    }

    /// Installs the callbacks. Each registration retains the actor until
    /// libdbus frees its data (when the connection is finalised).
    func attachToLoop(_ raw: OpaquePointer) {
        dbus_connection_set_watch_functions(raw, cAddWatch, cRemoveWatch, cToggleWatch, retainedSelf(), cRelease)
        dbus_connection_set_timeout_functions(
            raw, cAddTimeout, cRemoveTimeout, cToggleTimeout, retainedSelf(), cRelease)
        dbus_connection_set_dispatch_status_function(raw, cDispatchStatus, retainedSelf(), cRelease)
        dbus_connection_add_filter(raw, cFilter, retainedSelf(), cRelease)
    }

    private func retainedSelf() -> UnsafeMutableRawPointer {
        Unmanaged.passRetained(self).toOpaque()
    }

    // MARK: Watches

    func addWatch(_ handle: LibDBusHandle) -> Bool {
        guard let watch = handle.pointer else { return false }
        let fd = dbus_watch_get_unix_fd(watch)
        guard fd >= 0 else { return false }
        if fdWatches[fd] != nil {
            fdWatches[fd]?.watches.append(handle)
        } else {
            let handler: @Sendable (IOEvents) -> Void = { [self] events in
                assumeIsolated { $0.handleIO(fd: fd, events: events) }
            }
            guard let id = try? loop.watch(fd, for: [], handler) else { return false }
            fdWatches[fd] = FDWatch(id: id, watches: [handle])
        }
        updateEvents(fd: fd)
        return true
    }

    func removeWatch(_ handle: LibDBusHandle) {
        guard let fd = fdWatches.first(where: { $0.value.watches.contains(handle) })?.key,
              var entry = fdWatches[fd] else { return }
        entry.watches.removeAll { $0 == handle }
        if entry.watches.isEmpty {
            fdWatches[fd] = nil
            loop.removeWatch(entry.id)
        } else {
            fdWatches[fd] = entry
            updateEvents(fd: fd)
        }
    }

    func toggleWatch(_ handle: LibDBusHandle) {
        guard let watch = handle.pointer else { return }
        let fd = dbus_watch_get_unix_fd(watch)
        if fdWatches[fd] != nil { updateEvents(fd: fd) }
    }

    /// Waits for the union of what the enabled watches of `fd` want.
    private func updateEvents(fd: Int32) {
        guard let entry = fdWatches[fd] else { return }
        var events: IOEvents = []
        for handle in entry.watches {
            guard let watch = handle.pointer, dbus_watch_get_enabled(watch) != 0 else { continue }
            let flags = dbus_watch_get_flags(watch)
            if flags & CDBUS_WATCH_READABLE != 0 { events.insert(.readable) }
            if flags & CDBUS_WATCH_WRITABLE != 0 { events.insert(.writable) }
        }
        try? loop.updateWatch(entry.id, for: events)
    }

    private func handleIO(fd: Int32, events: IOEvents) {
        guard let entry = fdWatches[fd] else { return }
        for handle in entry.watches {
            // An earlier watch's handling may have removed this one (a hangup does).
            guard fdWatches[fd]?.watches.contains(handle) == true, let watch = handle.pointer else { continue }
            let flags = dbus_watch_get_flags(watch)
            let enabled = dbus_watch_get_enabled(watch) != 0
            var condition: UInt32 = 0
            if enabled, flags & CDBUS_WATCH_READABLE != 0, events.contains(.readable) { condition |= CDBUS_WATCH_READABLE }
            if enabled, flags & CDBUS_WATCH_WRITABLE != 0, events.contains(.writable) { condition |= CDBUS_WATCH_WRITABLE }
            // Errors and hangups go to every watch, enabled or not: epoll keeps
            // reporting them, so libdbus must hear of them to stop the spin.
            if events.contains(.error) { condition |= CDBUS_WATCH_ERROR }
            if events.contains(.hangup) { condition |= CDBUS_WATCH_HANGUP }
            if condition != 0 { dbus_watch_handle(watch, condition) }
        }
        dispatchPending()
    }

    // MARK: Timeouts

    func addTimeout(_ handle: LibDBusHandle) -> Bool {
        timeouts[handle] = .some(nil)
        arm(handle)
        return true
    }

    func removeTimeout(_ handle: LibDBusHandle) {
        guard let timer = timeouts.removeValue(forKey: handle) else { return }
        if let timer { loop.cancelTimer(timer) }
    }

    /// (Re)arms a known timeout for its full interval if it is enabled.
    func arm(_ handle: LibDBusHandle) {
        guard let armed = timeouts[handle], let timeout = handle.pointer else { return }
        if let armed { loop.cancelTimer(armed) }
        guard dbus_timeout_get_enabled(timeout) != 0 else {
            timeouts[handle] = .some(nil)
            return
        }
        let interval = Duration.milliseconds(Int64(dbus_timeout_get_interval(timeout)))
        let timer = loop.schedule(after: interval) { [self] in
            assumeIsolated { $0.fire(handle) }
        }
        timeouts[handle] = timer
    }

    private func fire(_ handle: LibDBusHandle) {
        guard timeouts[handle] != nil, let timeout = handle.pointer else { return }
        timeouts[handle] = .some(nil)
        dbus_timeout_handle(timeout)
        // libdbus timeouts repeat until removed or disabled.
        if case .some(.none) = timeouts[handle] { arm(handle) }
        dispatchPending()
    }

    // MARK: Dispatching

    /// libdbus must not be re-entered from the status callback, so dispatching
    /// is queued as loop work.
    func dispatchStatusChanged(_ status: DBusDispatchStatus) {
        guard status == DBUS_DISPATCH_DATA_REMAINS, !dispatchScheduled else { return }
        dispatchScheduled = true
        loop.execute { [self] in assumeIsolated { $0.dispatchPending() } }
    }

    /// Hands every queued incoming message to the filter.
    func dispatchPending() {
        dispatchScheduled = false
        while let raw, dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
    }
}

// The C callbacks: plain global functions, so they carry no actor isolation
// of their own; each one enters the actor with `assumeIsolated`, which holds
// because libdbus calls them on the loop thread.

private func connection(_ data: UnsafeMutableRawPointer?) -> DBusConnection? {
    data.map { Unmanaged<DBusConnection>.fromOpaque($0).takeUnretainedValue() }
}

private func cRelease(_ data: UnsafeMutableRawPointer?) {
    guard let data else { return }
    Unmanaged<DBusConnection>.fromOpaque(data).release()
}

private func cAddWatch(_ watch: OpaquePointer?, _ data: UnsafeMutableRawPointer?) -> dbus_bool_t {
    guard let watch, let connection = connection(data) else { return 0 }
    let handle = LibDBusHandle(watch)
    return connection.assumeIsolated { $0.addWatch(handle) } ? 1 : 0
}

private func cRemoveWatch(_ watch: OpaquePointer?, _ data: UnsafeMutableRawPointer?) {
    guard let watch, let connection = connection(data) else { return }
    let handle = LibDBusHandle(watch)
    connection.assumeIsolated { $0.removeWatch(handle) }
}

private func cToggleWatch(_ watch: OpaquePointer?, _ data: UnsafeMutableRawPointer?) {
    guard let watch, let connection = connection(data) else { return }
    let handle = LibDBusHandle(watch)
    connection.assumeIsolated { $0.toggleWatch(handle) }
}

private func cAddTimeout(_ timeout: OpaquePointer?, _ data: UnsafeMutableRawPointer?) -> dbus_bool_t {
    guard let timeout, let connection = connection(data) else { return 0 }
    let handle = LibDBusHandle(timeout)
    return connection.assumeIsolated { $0.addTimeout(handle) } ? 1 : 0
}

private func cRemoveTimeout(_ timeout: OpaquePointer?, _ data: UnsafeMutableRawPointer?) {
    guard let timeout, let connection = connection(data) else { return }
    let handle = LibDBusHandle(timeout)
    connection.assumeIsolated { $0.removeTimeout(handle) }
}

private func cToggleTimeout(_ timeout: OpaquePointer?, _ data: UnsafeMutableRawPointer?) {
    guard let timeout, let connection = connection(data) else { return }
    let handle = LibDBusHandle(timeout)
    connection.assumeIsolated { $0.arm(handle) }
}

private func cDispatchStatus(_: OpaquePointer?, _ status: DBusDispatchStatus, _ data: UnsafeMutableRawPointer?) {
    guard let connection = connection(data) else { return }
    connection.assumeIsolated { $0.dispatchStatusChanged(status) }
}

private func cFilter(
    _: OpaquePointer?, _ message: OpaquePointer?, _ data: UnsafeMutableRawPointer?
) -> DBusHandlerResult {
    guard let message, let connection = connection(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    let handle = LibDBusHandle(message)
    return connection.assumeIsolated { $0.filter(handle) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
}

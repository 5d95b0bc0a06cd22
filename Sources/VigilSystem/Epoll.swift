import CVigilShim
import Glibc

/// An epoll instance whose registrations carry a 64-bit token instead of the fd,
/// so an event for a registration that was removed can be recognised and dropped.
struct Epoll: Sendable {
    let fd: Int32

    init() throws(SystemError) {
        fd = try check("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
    }

    func add(_ target: Int32, mask: UInt32, token: UInt64) throws(SystemError) {
        try control(EPOLL_CTL_ADD, target, mask: mask, token: token)
    }

    func modify(_ target: Int32, mask: UInt32, token: UInt64) throws(SystemError) {
        try control(EPOLL_CTL_MOD, target, mask: mask, token: token)
    }

    /// Errors are ignored: the fd may already be closed, which removed it.
    func remove(_ target: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(fd, EPOLL_CTL_DEL, target, &event)
    }

    private func control(_ operation: Int32, _ target: Int32, mask: UInt32, token: UInt64) throws(SystemError) {
        var event = epoll_event()
        event.events = mask
        event.data.u64 = token
        try check("epoll_ctl") { epoll_ctl(fd, operation, target, &event) }
    }

    /// Blocks until at least one event; returns how many were stored (0 on EINTR).
    func wait(into events: UnsafeMutableBufferPointer<epoll_event>) -> Int {
        let count = epoll_wait(fd, events.baseAddress, Int32(events.count), -1)
        if count < 0 {
            precondition(errno == EINTR, "epoll_wait: \(SystemError.current("epoll_wait"))")
            return 0
        }
        return Int(count)
    }

    func close() {
        _ = Glibc.close(fd)
    }
}

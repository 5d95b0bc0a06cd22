import CVigilShim
import Glibc

/// An eventfd that other threads poke to wake the loop out of epoll_wait.
struct WakeupFD: Sendable {
    let fd: Int32

    init() throws(SystemError) {
        fd = try check("eventfd") { eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) }
    }

    func signal() {
        var one: UInt64 = 1
        // EAGAIN means the counter is saturated, so a wake-up is pending anyway.
        _ = Glibc.write(fd, &one, MemoryLayout<UInt64>.size)
    }

    /// Resets the counter so the level-triggered registration goes quiet.
    func drain() {
        var count: UInt64 = 0
        _ = Glibc.read(fd, &count, MemoryLayout<UInt64>.size)
    }

    func close() {
        _ = Glibc.close(fd)
    }
}

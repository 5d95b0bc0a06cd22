import CVigilShim
import Glibc

/// One absolute CLOCK_MONOTONIC timerfd, re-armed to the earliest deadline,
/// so any number of timers cost one fd and no periodic wake-ups.
struct TimerFD: Sendable {
    let fd: Int32

    init() throws(SystemError) {
        fd = try check("timerfd_create") {
            timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC | TFD_NONBLOCK))
        }
    }

    /// Arms for `deadline`, or disarms when nil. A deadline in the past fires at once.
    func arm(_ deadline: MonotonicInstant?) {
        var spec = itimerspec()
        if let deadline {
            // An all-zero it_value would disarm instead of firing.
            spec.it_value = MonotonicInstant(nanoseconds: max(deadline.nanoseconds, 1)).asTimespec
        }
        let result = timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil)
        precondition(result == 0, "timerfd_settime: \(SystemError.current("timerfd_settime"))")
    }

    /// Consumes the expiration count so the level-triggered registration goes quiet.
    func drain() {
        var expirations: UInt64 = 0
        _ = Glibc.read(fd, &expirations, MemoryLayout<UInt64>.size)
    }

    func close() {
        _ = Glibc.close(fd)
    }
}

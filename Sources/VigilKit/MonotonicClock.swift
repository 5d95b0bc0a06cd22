import Glibc

/// `CLOCK_MONOTONIC`, the system-wide clock of the daemon's deadlines: a client
/// compares a deadline with it locally instead of asking the daemon.
public enum MonotonicClock {
    /// Nanoseconds since an arbitrary point (boot), never going back.
    public static var now: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

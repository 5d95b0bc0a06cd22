import Glibc

/// A point on CLOCK_MONOTONIC, in nanoseconds since boot.
///
/// The clock is system-wide and never jumps, so the daemon can hand these
/// values to its clients as deadlines and arm timerfds with them directly.
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    public static func now() -> MonotonicInstant {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return MonotonicInstant(time)
    }

    init(_ time: timespec) {
        nanoseconds = UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    var asTimespec: timespec {
        timespec(
            tv_sec: Int(nanoseconds / 1_000_000_000),
            tv_nsec: Int(nanoseconds % 1_000_000_000)
        )
    }

    /// Saturates at zero and at `UInt64.max` rather than trapping.
    public func advanced(by duration: Duration) -> MonotonicInstant {
        let delta = duration.totalNanoseconds
        if delta >= 0 {
            let (sum, overflow) = nanoseconds.addingReportingOverflow(UInt64(delta))
            return MonotonicInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = delta.magnitude
        return MonotonicInstant(nanoseconds: nanoseconds > magnitude ? nanoseconds - magnitude : 0)
    }

    public static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Duration {
        lhs >= rhs
            ? .nanoseconds(Int64(clamping: lhs.nanoseconds - rhs.nanoseconds))
            : .nanoseconds(-Int64(clamping: rhs.nanoseconds - lhs.nanoseconds))
    }

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    public var description: String { "\(nanoseconds)ns" }
}

extension Duration {
    /// Whole nanoseconds, saturating at `Int64`'s range (about 292 years).
    var totalNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow2 ? (seconds < 0 ? .min : .max) : total
    }
}

import Glibc

/// A pthread mutex with a condition variable on CLOCK_MONOTONIC: what
/// Foundation's `NSCondition` gave, without linking Foundation (issue 12:
/// vigild uses FoundationEssentials only, docs/performance.md).
///
/// pthread rather than `Synchronization.Mutex` for the reason `Locked` gives
/// (ThreadSanitizer sees pthread calls). Deadlines are monotonic, so a clock
/// step does not stretch or cut a wait.
public final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }

    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Wakes one thread waiting in `wait(until:)`; call with the lock held.
    public func signal() { pthread_cond_signal(condition) }

    /// Releases the lock, sleeps until signalled (or woken spuriously) or
    /// until `deadline`, and takes the lock again. Call with the lock held and
    /// check the guarded state in a loop. False once the deadline has passed.
    public func wait(until deadline: MonotonicInstant) -> Bool {
        var time = deadline.asTimespec
        return pthread_cond_timedwait(condition, mutex, &time) != ETIMEDOUT
    }
}

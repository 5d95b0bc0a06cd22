import Glibc

/// A value guarded by a pthread mutex.
///
/// Used instead of `Synchronization.Mutex`, whose futex-based Linux
/// implementation ThreadSanitizer cannot see: every contended `Mutex` shows
/// up as a false data race, which would hide real ones. pthread mutexes are
/// intercepted by TSan, so code built on this stays checkable.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access. Do not call out to unknown code
    /// (handlers, continuations) inside: the lock is not recursive.
    public func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

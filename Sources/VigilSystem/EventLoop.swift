import CVigilShim
import Glibc
import Synchronization

/// One thread blocked in epoll_wait, running fd handlers, timers and submitted
/// work in order.
///
/// The loop sleeps until something happens: there are no periodic wake-ups,
/// timers share one timerfd armed to the earliest deadline, and `execute`
/// wakes the thread through an eventfd only when its queue was empty.
///
/// Every method is thread-safe. Handlers always run on the loop thread.
/// The running thread keeps the loop alive until `stop()`; a stopped loop
/// cannot be started again.
public final class EventLoop: Sendable {
    public let name: String

    let epoll: Epoll
    private let wakeup: WakeupFD
    let timerFD: TimerFD

    /// Watches and timers. Handlers are looked up here for every event, so
    /// whatever was removed under this lock is never called again.
    let registry = Locked(Registry())
    private let queue = Locked(WorkQueue())
    private let thread = Locked(ThreadState.notStarted)
    private let stopRequested = Atomic(false)
    private let loopThread = Atomic<UInt>(0)
    private let loopThreadID = Atomic<Int32>(0)

    struct Registry: Sendable {
        var lastID: UInt64 = Token.firstUserID - 1
        var watches: [UInt64: Watch] = [:]
        var timers = TimerQueue()
        /// What the timerfd is armed for, to skip redundant timerfd_settime calls.
        var armedDeadline: MonotonicInstant?

        mutating func makeID() -> UInt64 {
            lastID += 1
            return lastID
        }
    }

    struct Watch: Sendable {
        var fd: Int32
        var handler: @Sendable (IOEvents) -> Void
    }

    private struct WorkQueue: Sendable {
        var work: [@Sendable () -> Void] = []
        var wakeupPending = false
    }

    private enum ThreadState: Sendable {
        case notStarted, running(pthread_t), joined
    }

    /// epoll tokens of the loop's own fds; watches and timers count up from `firstUserID`.
    enum Token {
        static let wakeup: UInt64 = 0
        static let timer: UInt64 = 1
        static let firstUserID: UInt64 = 2
    }

    public init(name: String) throws {
        self.name = name
        epoll = try Epoll()
        wakeup = try WakeupFD()
        timerFD = try TimerFD()
        try epoll.add(wakeup.fd, mask: EPOLLIN.rawValue, token: Token.wakeup)
        try epoll.add(timerFD.fd, mask: EPOLLIN.rawValue, token: Token.timer)
    }

    deinit {
        epoll.close()
        wakeup.close()
        timerFD.close()
    }

    // MARK: Thread

    /// Spawns the loop thread. Calling it again has no effect.
    public func start() {
        thread.withLock { state in
            guard case .notStarted = state else { return }
            let context = Unmanaged.passRetained(self).toOpaque()
            var handle = pthread_t()
            let result = pthread_create(&handle, nil, { context in
                Unmanaged<EventLoop>.fromOpaque(context!).takeRetainedValue().runThread()
                return nil
            }, context)
            precondition(result == 0, "pthread_create: \(result)")
            state = .running(handle)
        }
    }

    /// Asks the loop to exit after its current iteration. Idempotent, callable
    /// from any thread, including from a handler. Work still queued is dropped.
    public func stop() {
        guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wakeup.signal()
    }

    /// Blocks until the loop thread has exited. Must not be called on the loop thread.
    public func waitUntilStopped() {
        precondition(!isInLoopThread, "waitUntilStopped() on the loop thread would deadlock")
        thread.withLock { state in
            guard case .running(let handle) = state else { return }
            pthread_join(handle, nil)
            state = .joined
        }
    }

    public var isInLoopThread: Bool {
        pthread_equal(pthread_self(), loopThread.load(ordering: .acquiring)) != 0
    }

    /// The loop thread's kernel id (for /proc/self/task/TID), nil until it runs.
    public var threadID: pid_t? {
        let tid = loopThreadID.load(ordering: .acquiring)
        return tid == 0 ? nil : tid
    }

    public func preconditionInLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(isInLoopThread, "not on event loop '\(name)'", file: file, line: line)
    }

    // MARK: Work

    /// Runs `work` on the loop thread, after work submitted before it.
    /// Work submitted once `stop()` was called is dropped.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        guard !stopRequested.load(ordering: .acquiring) else { return }
        let mustWake = queue.withLock { queue in
            queue.work.append(work)
            defer { queue.wakeupPending = true }
            return !queue.wakeupPending
        }
        if mustWake { wakeup.signal() }
    }

    private func runQueuedWork() {
        wakeup.drain()
        let batch = queue.withLock { queue in
            queue.wakeupPending = false
            defer { queue.work = [] }
            return queue.work
        }
        for work in batch { work() }
    }

    // MARK: Loop

    private func runThread() {
        loopThread.store(pthread_self(), ordering: .releasing)
        loopThreadID.store(vigil_gettid(), ordering: .releasing)
        vigil_set_thread_name(name)

        let capacity = 64
        let events = UnsafeMutableBufferPointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while !stopRequested.load(ordering: .acquiring) {
            let count = epoll.wait(into: events)
            for event in events[..<count] {
                switch event.data.u64 {
                case Token.wakeup: runQueuedWork()
                case Token.timer: fireDueTimers()
                case let token: dispatch(token, IOEvents(epoll: event.events))
                }
            }
        }
        // Handlers often capture the loop; dropping them here breaks those cycles.
        registry.withLock { $0.watches = [:]; $0.timers = TimerQueue() }
        queue.withLock { $0.work = [] }
        // glibc reuses pthread_t values: a later thread must not pass for this one.
        loopThread.store(0, ordering: .releasing)
    }
}

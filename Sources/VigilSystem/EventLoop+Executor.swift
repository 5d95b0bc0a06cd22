/// Lets an actor live on the loop:
/// `nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }`.
/// Its methods then run on the loop thread, and fd or timer handlers (which
/// also run there) may enter it synchronously with `actor.assumeIsolated { }`.
///
/// The loop is also a `TaskExecutor`: a task started with `loop.task { }`
/// runs its nonisolated async code (static async functions, async closures)
/// on the loop too, instead of Swift's global concurrent executor. On Linux
/// that executor is libdispatch's thread pool, and once the pool exists its
/// manager thread re-arms a 1 s monitoring timer for the life of the process:
/// a daemon that must sleep while idle never touches it.
extension EventLoop: SerialExecutor, TaskExecutor {
    /// Jobs run in submission order with other `execute` work. A job enqueued
    /// after `stop()` never runs, so its task stays suspended.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        execute {
            // One thread serves both roles, so a job is always isolated to the
            // loop and prefers it: hops between the loop's actors stay on it.
            job.runSynchronously(isolatedTo: self.asUnownedSerialExecutor(), taskExecutor: self.asUnownedTaskExecutor())
        }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Answers the runtime's "are we isolated?" when no job of this executor
    /// is running, e.g. inside a watch handler: being on the thread is enough.
    public func isIsolatingCurrentContext() -> Bool? {
        isInLoopThread
    }

    public func checkIsolated() {
        preconditionInLoop()
    }

    /// Starts an unstructured task that prefers this loop: it and all of its
    /// nonisolated async code run on the loop thread, and awaiting an actor
    /// of the loop never leaves it. Use it instead of `Task { }` in code that
    /// runs on the loop: a plain task would run nonisolated code (and a plain
    /// task started outside an actor, all of its code) on the global executor.
    @discardableResult
    public func task(_ operation: sending @escaping () async -> Void) -> Task<Void, Never> {
        Task(executorPreference: self, operation: operation)
    }
}

/// Lets an actor live on the loop:
/// `nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }`.
/// Its methods then run on the loop thread, and fd or timer handlers (which
/// also run there) may enter it synchronously with `actor.assumeIsolated { }`.
extension EventLoop: SerialExecutor {
    /// Jobs run in submission order with other `execute` work. A job enqueued
    /// after `stop()` never runs, so its task stays suspended.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        execute { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
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
}

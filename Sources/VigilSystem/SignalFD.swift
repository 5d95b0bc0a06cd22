import CVigilShim
import Glibc

/// Signals read as data on a file descriptor (signalfd), for an event loop to
/// watch, instead of a handler that interrupts whichever thread runs.
///
/// Creating one blocks its signals in the calling thread, and threads inherit
/// the mask of the thread that starts them: create it on the main thread
/// before any other thread exists (the event loop's, the Swift runtime's), or
/// some thread may still take a signal the default way. Processes started
/// with `ProcessSpawner` begin with an empty mask.
public struct SignalFD: Sendable {
    public let fd: Int32

    public init(signals: [Int32]) throws(SystemError) {
        let fd = signals.withUnsafeBufferPointer { buffer in
            vigil_signalfd(buffer.baseAddress, Int32(buffer.count))
        }
        guard fd >= 0 else { throw SystemError.current("signalfd") }
        self.fd = fd
    }

    /// The signals pending now, in arrival order (each standard signal at
    /// most once: the kernel merges repeats). Empty when none is pending.
    public func read() -> [Int32] {
        var signals: [Int32] = []
        while true {
            let signal = vigil_signalfd_read(fd)
            guard signal > 0 else { break }
            signals.append(signal)
        }
        return signals
    }

    public func close() {
        _ = Glibc.close(fd)
    }
}

import VigilSerial
import VigilStreams

/// A serial port as a stream endpoint: read straight into the session's
/// log, loss from the UART's counters (TIOCGICOUNT).
final class SerialEndpoint: StreamEndpoint {
    let port: SerialPort
    /// Counters at open, so loss is reported as it grows.
    private let baseline: LineCounters?
    private var reported: LineCounters?
    /// Told once the port is closed (the port keeper lets go of its copy).
    private let closed: () -> Void

    init(port: SerialPort, closed: @escaping () -> Void) {
        self.port = port
        self.closed = closed
        baseline = port.lineCounters()
        reported = baseline
    }

    var descriptor: Int32 { port.fd }

    /// A tty discards its input at a hang-up: nothing is left to read later.
    var discardsInputAtHangup: Bool { true }

    func read(into log: SessionLog) throws -> StreamRead {
        var outcome = SerialRead.wouldBlock
        _ = try log.fill { buffer in
            outcome = try port.read(into: buffer)
            if case let .bytes(count) = outcome { return count }
            return nil
        }
        switch outcome {
        case .wouldBlock: return .wouldBlock
        // EOF or EIO: the device is gone; udev's remove follows and tells the apps.
        case .hangup: return .ended("the device hung up")
        case let .bytes(count): return .bytes(count)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        try port.write(bytes)
    }

    func newLoss() -> StreamLoss? {
        // A port without counters at open (a pty, some USB adapters) never has
        // them: no ioctl per readiness for it.
        guard let last = reported, let now = port.lineCounters(), now != last else { return nil }
        reported = now
        return Self.loss(from: last, to: now)
    }

    var lossSinceOpen: StreamLoss {
        guard let now = port.lineCounters(), let baseline else { return StreamLoss() }
        return Self.loss(from: baseline, to: now)
    }

    private static func loss(from old: LineCounters, to new: LineCounters) -> StreamLoss {
        StreamLoss(
            overruns: new.overrun - old.overrun + new.bufferOverrun - old.bufferOverrun,
            parityErrors: new.parity - old.parity, frameErrors: new.frame - old.frame)
    }

    func close() {
        port.close()
        closed()
    }
}

import VigilHID
import VigilSystem
import VigilStreams

/// A hidraw node as a stream endpoint of a record session: each read(2)
/// gives one whole input report, appended to the session's log as one
/// record (`SessionLog.appendRecord`); each write of the session is one
/// output report.
///
/// A report is read into `scratch` first (it must fit whole or not at all);
/// one that finds no room waits there (`held`) and goes in first once the
/// holder acknowledged enough, with the log's read mark set meanwhile, so a
/// daemon killed before it is stored reports the possible loss.
///
/// Back-pressure: HID has none. While vigild does not read, hidraw queues
/// up to 64 reports per open file and then drops new ones; the device
/// goes on sending (the host polls its interrupt endpoint regardless). A
/// session's buffer (`session-buffer-limit`) is what absorbs a suspended
/// app's backlog; a full one is logged when reading pauses.
final class HIDEndpoint: StreamEndpoint {
    let device: HIDDevice
    /// Told once the node is closed.
    private let closed: () -> Void
    private var scratch = [UInt8](repeating: 0, count: HIDDevice.maxReportSize)
    /// The length of a report in `scratch` that did not fit yet.
    private var held: Int?

    init(device: HIDDevice, closed: @escaping () -> Void) {
        self.device = device
        self.closed = closed
    }

    var descriptor: Int32 { device.fd }

    /// hidraw's read fails with EIO once the device is gone, queued reports
    /// or not: nothing is left to read later.
    var discardsInputAtHangup: Bool { true }

    func read(into log: SessionLog) throws -> StreamRead {
        if let count = held {
            guard append(count, to: log) else { return .full }
            held = nil
            return .bytes(count)
        }
        log.markReadInProgress()
        let outcome: HIDRead
        do {
            outcome = try scratch.withUnsafeMutableBytes { buffer throws(SystemError) in try device.read(into: buffer) }
        } catch {
            log.clearInterruptedRead()
            throw error
        }
        switch outcome {
        case .wouldBlock:
            log.clearInterruptedRead()
            return .wouldBlock
        case .hangup:
            log.clearInterruptedRead()
            return .ended("the device hung up")
        case let .report(count):
            guard append(count, to: log) else {
                held = count  // the mark stays until it is stored
                return .full
            }
            return .bytes(count)
        }
    }

    private func append(_ count: Int, to log: SessionLog) -> Bool {
        let stored = scratch.withUnsafeBytes { log.appendRecord(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        if stored { log.clearInterruptedRead() }
        return stored
    }

    /// One output report: the write's bytes whole (report id first).
    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        try device.write(bytes)
    }

    func close() {
        device.close()
        closed()
    }
}

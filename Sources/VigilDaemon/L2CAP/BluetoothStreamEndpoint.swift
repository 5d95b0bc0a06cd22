import Logging
import VigilL2CAP
import VigilStreams

/// A Bluetooth channel's socket (L2CAP or RFCOMM) as a stream endpoint.
///
/// RFCOMM is a byte stream: read straight into the session's free log
/// space. L2CAP delivers SDUs whole: one is read into `scratch` (the part
/// that did not fit waits in `held` and goes in first once there is room),
/// and the holder's writes are cut into SDUs of the send MTU.
///
/// Back-pressure: while vigild does not read, the kernel's receive queue
/// fills and the peer gets no more credits. RFCOMM's credits always work
/// so. LE credits do on kernels that compute them from the room in the
/// queue (Linux 6.10, backported to Debian 12's 6.1.0-56 used by the lab:
/// `l2cap_chan_rx_avail`); older kernels give credits back regardless and
/// drop SDUs that find the queue full. The socket's SO_RXQ_OVFL counter
/// counts both (a held-back SDU counts too), so it cannot tell loss from
/// back-pressure: it is logged, and the lab test checks the bytes end to end.
final class BluetoothStreamEndpoint: StreamEndpoint {
    let socket: BluetoothSocket
    let session: Int
    /// The peer's MTU (L2CAP); nil for a byte stream.
    let sendMTU: Int?
    private let logger: Logger
    /// Told once the socket is closed (the channel is no longer open).
    private let closed: () -> Void
    /// One SDU as read (L2CAP); `held` is the part of it not yet in the log.
    private var scratch: [UInt8]
    private var held: ArraySlice<UInt8> = []
    /// The kernel's count of SDUs it discarded (SO_RXQ_OVFL), last reported.
    private var dropCounter: UInt32 = 0

    /// An L2CAP channel's: SDUs of up to `receiveMTU` in, writes cut at `sendMTU`.
    init(l2cap socket: BluetoothSocket, session: Int, sendMTU: Int, receiveMTU: Int, logger: Logger, closed: @escaping () -> Void) {
        self.socket = socket
        self.session = session
        self.sendMTU = max(sendMTU, 23)
        self.logger = logger
        self.closed = closed
        scratch = [UInt8](repeating: 0, count: max(receiveMTU, 23))
    }

    /// A byte stream's (RFCOMM).
    init(stream socket: BluetoothSocket, session: Int, logger: Logger, closed: @escaping () -> Void) {
        self.socket = socket
        self.session = session
        sendMTU = nil
        self.logger = logger
        self.closed = closed
        scratch = []
    }

    var descriptor: Int32 { socket.fd }
    var writeChunk: Int { sendMTU ?? .max }

    private var endReason: String { "the channel was closed (by the peer, or its link went)" }

    func read(into log: SessionLog) throws -> StreamRead {
        sendMTU == nil ? try readStream(into: log) : try readSDU(into: log)
    }

    private func readStream(into log: SessionLog) throws -> StreamRead {
        var outcome = BluetoothReceive.wouldBlock
        _ = try log.fill { buffer throws(BluetoothSocketError) in
            outcome = try socket.receive(into: buffer)
            if case let .data(count, _, _) = outcome { return count }
            return nil
        }
        switch outcome {
        case .wouldBlock: return .wouldBlock
        case .closed: return .ended(endReason)
        case let .data(count, _, _): return .bytes(count)
        }
    }

    private func readSDU(into log: SessionLog) throws -> StreamRead {
        if !held.isEmpty {
            let stored = held.withUnsafeBytes { Self.store($0, in: log) }
            held = held.dropFirst(stored)
            if !held.isEmpty { return .full }
        }
        let outcome = try scratch.withUnsafeMutableBytes { buffer throws(BluetoothSocketError) in try socket.receive(into: buffer) }
        switch outcome {
        case .wouldBlock:
            return .wouldBlock
        case .closed:
            return .ended(endReason)
        case let .data(count, truncated, dropCounter):
            if truncated {
                logger.error("l2cap: session \(session): an SDU longer than the receive MTU \(scratch.count) was cut")
            }
            if let dropCounter, dropCounter != self.dropCounter {
                logger.info("l2cap: session \(session): the kernel's receive queue was full \(dropCounter &- self.dropCounter) more time(s) (SO_RXQ_OVFL); with LE credit back-pressure those SDUs wait in the kernel, without it they are lost")
                self.dropCounter = dropCounter
            }
            let stored = scratch.withUnsafeBytes { Self.store(UnsafeRawBufferPointer(rebasing: $0[0..<count]), in: log) }
            if stored < count { held = scratch[stored..<count] }
            return .bytes(count)
        }
    }

    /// Copies `bytes` into the log's free space (two pieces where the ring
    /// wraps); returns how many fitted.
    private static func store(_ bytes: UnsafeRawBufferPointer, in log: SessionLog) -> Int {
        var stored = 0
        while stored < bytes.count {
            let count = log.fill { target in
                let count = min(target.count, bytes.count - stored)
                target.baseAddress!.copyMemory(from: bytes.baseAddress! + stored, byteCount: count)
                return count
            } ?? 0
            if count == 0 { break }
            stored += count
        }
        return stored
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        try socket.send(bytes)
    }

    func close() {
        socket.close()
        closed()
    }
}

import Logging
import VigilL2CAP
import VigilStreams

/// An L2CAP channel's socket as a stream endpoint: SDUs read into the
/// session's log (the part of one that did not fit waits in `held` and goes
/// in first once there is room), the holder's writes cut into SDUs of the
/// send MTU.
///
/// Back-pressure: while vigild does not read, the kernel's receive queue
/// fills, and a kernel that computes LE credits from the room in it (Linux
/// 6.10, backported to Debian 12's 6.1.0-56 used by the lab:
/// `l2cap_chan_rx_avail`) stops giving the peer credits: the peer waits,
/// nothing is lost. Older kernels give credits back regardless and drop SDUs
/// that find the queue full. The socket's SO_RXQ_OVFL counter counts both
/// (a held-back SDU counts too), so it cannot tell loss from back-pressure:
/// it is logged, and the lab test checks the bytes end to end.
final class L2CAPEndpoint: StreamEndpoint {
    let socket: L2CAPSocket
    let session: Int
    let sendMTU: Int
    let receiveMTU: Int
    private let logger: Logger
    /// Told once the socket is closed (the channel is no longer open).
    private let closed: () -> Void
    /// One SDU as read; `held` is the part of it not yet in the log.
    private var scratch: [UInt8]
    private var held: ArraySlice<UInt8> = []
    /// The kernel's count of SDUs it discarded (SO_RXQ_OVFL), last reported.
    private var dropCounter: UInt32 = 0

    init(socket: L2CAPSocket, session: Int, sendMTU: Int, receiveMTU: Int, logger: Logger, closed: @escaping () -> Void) {
        self.socket = socket
        self.session = session
        self.sendMTU = sendMTU
        self.receiveMTU = receiveMTU
        self.logger = logger
        self.closed = closed
        scratch = [UInt8](repeating: 0, count: max(receiveMTU, 23))
    }

    var descriptor: Int32 { socket.fd }
    var writeChunk: Int { max(sendMTU, 23) }

    func read(into log: SessionLog) throws -> StreamRead {
        if !held.isEmpty {
            let stored = held.withUnsafeBytes { Self.store($0, in: log) }
            held = held.dropFirst(stored)
            if !held.isEmpty { return .full }
        }
        let outcome = try scratch.withUnsafeMutableBytes { buffer throws(L2CAPError) in try socket.receive(into: buffer) }
        switch outcome {
        case .wouldBlock:
            return .wouldBlock
        case .closed:
            return .ended("the channel was closed (by the peer, or its link went)")
        case let .sdu(count, truncated, dropCounter):
            if truncated {
                logger.error("l2cap: session \(session): an SDU longer than the receive MTU \(receiveMTU) was cut")
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

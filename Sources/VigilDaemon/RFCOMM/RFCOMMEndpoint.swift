import VigilL2CAP
import VigilStreams

/// An RFCOMM channel's socket as a stream endpoint: a plain byte stream, read
/// straight into the session's free log space. Back-pressure is RFCOMM's own
/// credit flow control: while the log is full vigild stops reading, the
/// socket's receive queue fills, and the kernel gives the device no more
/// credits: it waits, nothing is lost.
final class RFCOMMEndpoint: StreamEndpoint {
    let socket: RFCOMMSocket
    /// Told once the socket is closed (the channel is no longer open).
    private let closed: () -> Void

    init(socket: RFCOMMSocket, closed: @escaping () -> Void) {
        self.socket = socket
        self.closed = closed
    }

    var descriptor: Int32 { socket.fd }

    func read(into log: SessionLog) throws -> StreamRead {
        var outcome = RFCOMMReceive.wouldBlock
        _ = try log.fill { buffer throws(L2CAPError) in
            outcome = try socket.receive(into: buffer)
            if case let .bytes(count) = outcome { return count }
            return nil
        }
        switch outcome {
        case .wouldBlock: return .wouldBlock
        case .closed: return .ended("the channel was closed (by the device, or its link went)")
        case let .bytes(count): return .bytes(count)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int? {
        try socket.send(bytes)
    }

    func close() {
        socket.close()
        closed()
    }
}

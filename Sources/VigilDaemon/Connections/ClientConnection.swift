import VigilProtocol
import VigilSystem

/// One client on the daemon's socket: its byte streams in both directions and
/// who it turned out to be. Owned and driven by `DaemonCore` on the loop.
final class ClientConnection {
    enum Phase {
        /// Waiting for `hello`.
        case handshake
        case app(String)
        case control
        /// A fatal error was sent: flush it, half-close, then drain until EOF.
        case closing
    }

    let id: Int
    let stream: UnixStream
    let credentials: PeerCredentials
    var phase = Phase.handshake
    /// A control client limited to read-only requests (`monitor-group`):
    /// why, for the refusal of the others. nil: every request.
    var readOnlyReason: String?
    var decoder: FrameDecoder
    /// Bytes not yet accepted by the socket, from `outputStart` on.
    private(set) var output: [UInt8] = []
    private var outputStart = 0
    var watch: WatchID?
    var wantsWritable = false
    var closeTimer: TimerID?

    /// The one buffer every client socket is read into (then only the bytes
    /// read are appended to the connection's `decoder`): the loop thread reads
    /// one socket at a time, and a fresh zero-filled 64 KiB per readable socket
    /// was a seventh of the daemon's instructions per wake.
    static let readBuffer = ReadBuffer(byteCount: 64 * 1024)

    final class ReadBuffer: @unchecked Sendable {
        /// Used on the loop thread only.
        let bytes: UnsafeMutableRawBufferPointer

        init(byteCount: Int) {
            bytes = .allocate(byteCount: byteCount, alignment: 16)
        }
    }

    /// A client that reads nothing while we keep writing is cut off here rather
    /// than letting daemon memory grow without bound (events stay queued).
    static let maxPendingOutput = 16 * 1024 * 1024

    init(id: Int, stream: UnixStream, credentials: PeerCredentials, limits: FrameLimits) {
        self.id = id
        self.stream = stream
        self.credentials = credentials
        self.decoder = FrameDecoder(limits: limits)
    }

    var appID: String? {
        if case let .app(id) = phase { return id }
        return nil
    }

    var isClosing: Bool {
        if case .closing = phase { return true }
        return false
    }

    var hasPendingOutput: Bool { outputStart < output.count }

    func enqueue(_ bytes: [UInt8]) {
        output.append(contentsOf: bytes)
    }

    /// Writes as much as the socket takes. Returns false if the peer is gone.
    func flushOutput() -> Bool {
        while hasPendingOutput {
            let written: Int?
            do {
                written = try output[outputStart...].withUnsafeBytes { try stream.write($0) }
            } catch {
                return false
            }
            guard let written else { break }  // socket buffer full: wait for writable
            outputStart += written
        }
        if outputStart == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 1 << 20)
            outputStart = 0
        } else if outputStart > 1 << 20 {
            output.removeFirst(outputStart)
            outputStart = 0
        }
        return true
    }

    var pendingOutputCount: Int { output.count - outputStart }
}

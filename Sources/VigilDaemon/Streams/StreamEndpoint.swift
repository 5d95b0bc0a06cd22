import VigilProtocol
import VigilStreams

/// One open byte stream behind a session: a serial port, an L2CAP channel's
/// socket, a test's socketpair. The stream layer (`StreamSessions`) watches
/// its descriptor, reads it into the session's log while the holder has
/// room, writes the holder's bytes to it and closes it; everything a
/// transport does not differ in (announcing, back-pressure, pending writes,
/// the end of a session) is the layer's, once.
///
/// What outlives an endpoint (a session waiting to reopen has none) is not
/// here: the wake mode and coalescing window are the session's, given by the
/// transport when it opens the session.
protocol StreamEndpoint: AnyObject {
    /// The descriptor the loop watches (readable, writable, hang-up).
    var descriptor: Int32 { get }

    /// Reads what is ready into the log's free space. Throws when the read
    /// failed (the session then ends: "read failed: ...").
    func read(into log: SessionLog) throws -> StreamRead

    /// Writes from `bytes` (at most `writeChunk` of them); the count taken,
    /// nil when the endpoint takes nothing now (the layer waits for writable).
    func write(_ bytes: UnsafeRawBufferPointer) throws -> Int?

    /// The most one write takes: an L2CAP channel's send MTU (a write is cut
    /// into SDUs), `Int.max` for a plain byte stream.
    var writeChunk: Int { get }

    /// A hang-up reported while reading is paused (the holder's buffer is
    /// full): true when the input is lost with it (a tty discards it: end the
    /// session now), false when what is buffered stays readable (a socket:
    /// the layer stops watching until there is room, then reads the rest).
    var discardsInputAtHangup: Bool { get }

    /// Loss the endpoint counted since it was last asked (overruns, parity and
    /// framing errors of a UART), reported to the holder as `session.loss`.
    func newLoss() -> StreamLoss?

    /// Loss counted since the endpoint opened (for `accessories`).
    var lossSinceOpen: StreamLoss { get }

    /// Closes the descriptor (the layer removed its watch first).
    func close()
}

extension StreamEndpoint {
    var writeChunk: Int { .max }
    var discardsInputAtHangup: Bool { false }
    func newLoss() -> StreamLoss? { nil }
    var lossSinceOpen: StreamLoss { StreamLoss() }
}

/// What one read of an endpoint gave.
enum StreamRead: Equatable {
    /// Bytes stored in the log (at least one).
    case bytes(Int)
    /// Nothing ready now.
    case wouldBlock
    /// The log had no room for what the endpoint holds: reading pauses.
    case full
    /// The stream ended (EOF, hang-up, the peer closed it): why.
    case ended(String)
}

/// Loss counters, as a UART counts them.
struct StreamLoss: Equatable {
    var overruns = 0
    var parityErrors = 0
    var frameErrors = 0

    var isEmpty: Bool { overruns + parityErrors + frameErrors == 0 }
}

/// A component whose endpoints the stream layer carries (accessories, L2CAP,
/// a test's transport). The layer calls it where transports differ: what an
/// endpoint's end means for the session, and what a session without one says.
protocol StreamTransport: DaemonComponent {
    /// The name its sessions carry in `sessions.json` (`"accessory"`, `"l2cap"`).
    var transportName: String { get }

    /// The session's endpoint ended by itself (hang-up, EOF, a failed read or
    /// write), after the layer announced what it had read: end the session
    /// (`StreamSessions.end`), or keep it waiting to reopen.
    func endpointEnded<S: DaemonServices>(_ session: Int, reason: String, services: isolated S)

    /// Why a session of this transport without an endpoint takes no write
    /// (e.g. "waiting for its accessory to return").
    func notOpenReason(_ session: Int) -> String

    /// The session left the table for good (ended by anyone: its holder, its
    /// app's end, the transport): what the transport keeps for it goes.
    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S)

    /// The accessory fields of its session object (`accessories`).
    func sessionFields(_ session: Int) -> (connectionID: UInt64, lineSettings: String)
}

extension StreamTransport {
    func sessionEnded<S: DaemonServices>(_ session: Int, services: isolated S) {}
    func sessionFields(_ session: Int) -> (connectionID: UInt64, lineSettings: String) { (0, "") }
}

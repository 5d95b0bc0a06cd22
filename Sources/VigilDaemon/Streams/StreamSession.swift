import VigilLifecycle
import VigilProtocol
import VigilStreams
import VigilSystem

/// One stream session: its holder, its log, and (while open) its endpoint
/// and traffic. Owned by `StreamSessions`; transports name sessions by id.
final class StreamSession {
    let id: Int
    let holder: SessionHolder
    /// What the session carries, for people and `accessories`: an accessory
    /// protocol, `l2cap:<peer>/<psm>`.
    let name: String
    /// The transport whose endpoints it carries (told when one ends).
    unowned let transport: any StreamTransport
    /// The background mode its events wake an app with.
    let wakeMode: BackgroundMode
    /// How long its new bytes may wait to share a data event (nil: announced at once).
    let coalescing: Duration?
    /// The transport's part of its record in `sessions.json`.
    var details: [String: JSONValue]
    /// A record session (`SessionRecords`): its endpoint appends whole
    /// records (a hidraw node's input reports) and events name whole records.
    let records: Bool

    // The log, and how much of it the holder has been told about.
    let log: SessionLog
    /// Stream offset after the last byte a data event (or frame) announced.
    var announced: UInt64
    /// `acknowledged` when the app was last woken for held-back data (see `wakeIfHeldBack`).
    var acknowledgedAtHeldBackWake: UInt64?
    /// Armed while pages of acknowledged bytes are resident (see `releaseWhenQuiet`).
    var releaseTimer: TimerID?
    /// `written` when `releaseTimer` was armed: more since means not quiet.
    var writtenAtReleaseArm: UInt64 = 0
    /// When the last data event was queued, and the timer that announces
    /// what a streaming session read since (see `holdsAnnouncement`).
    var lastAnnouncement: MonotonicInstant?
    var announceTimer: TimerID?

    // The endpoint and its traffic (reset at each attach).
    var endpoint: (any StreamEndpoint)?
    var watch: WatchID?
    var readingPaused = false
    var wantsWritable = false
    /// Writes waiting for the endpoint, each answered once all its bytes are taken.
    var pendingWrites: [PendingWrite] = []
    var bytesIn: UInt64 = 0
    var bytesOut: UInt64 = 0

    struct PendingWrite {
        var requestID: Int?
        var clientConnection: Int
        var bytes: [UInt8]
        var offset = 0
    }

    init(
        id: Int, holder: SessionHolder, name: String, transport: any StreamTransport, wakeMode: BackgroundMode,
        coalescing: Duration?, details: [String: JSONValue], records: Bool = false, log: SessionLog
    ) {
        self.records = records
        self.id = id
        self.holder = holder
        self.name = name
        self.transport = transport
        self.wakeMode = wakeMode
        self.coalescing = coalescing
        self.details = details
        self.log = log
        announced = log.acknowledged
    }

    /// The app holding it, if an app does.
    var app: String? {
        if case let .app(id) = holder { return id }
        return nil
    }
}

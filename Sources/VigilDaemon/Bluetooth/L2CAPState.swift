import VigilAccessories
import VigilBluetooth
import VigilL2CAP
import VigilProtocol
import VigilSystem

/// The daemon's L2CAP channels and published PSMs. A channel is a session of
/// the session table (its bytes go through the session's log and `session.*`
/// events, like an accessory's); this holds what is particular to it: the
/// socket and its traffic. Owned by `DaemonCore`.
struct L2CAPState {
    /// Open (or opening) channels, by session id.
    var channels: [Int: OpenChannel] = [:]
    /// Channels opened with `reopen` whose link went: they open again when it
    /// is back (same session), by session id.
    var waiting: [Int: ChannelRequest] = [:]
    /// Waiting channels whose holder is not told yet (`DaemonCore.decideReopen`): the reason.
    var undecided: [Int: String] = [:]
    /// The background mode a channel's session events wake its app with, by
    /// session id (kept until the session's last event is announced).
    var wakeModes: [Int: BackgroundMode] = [:]
    /// Listening PSMs, by PSM.
    var published: [UInt16: PublishedPSM] = [:]
    /// Why this kernel has no L2CAP sockets, once a call found out (for messages).
    var unavailable: L2CAPError?
    /// What the state file said, by app: from the daemon's start until the
    /// sessions and Bluetooth are restored (`DaemonCore+L2CAPRestore.swift`).
    var restoring: [String: SavedL2CAP] = [:]
}

/// What a channel was opened with, to open it again after its link returns.
struct ChannelRequest {
    var client: BluetoothClient
    var peer: String
    var psm: L2CAPPSM
    var options: L2CAPOptions
    var reopen: Bool
    /// How long its bytes may wait to share a data event (`announceCoalescing`; zero: never).
    var coalesce: Duration = DaemonCore.channelAnnounceWindow
}

/// One channel's socket and traffic.
final class OpenChannel {
    let socket: L2CAPSocket
    let request: ChannelRequest
    let wakeMode: BackgroundMode
    var watch: WatchID?
    /// Until the peripheral accepted: who waits for the reply (nil: a reopen).
    var opening: Opening?
    var readingPaused = false
    var wantsWritable = false
    var sendMTU = 0
    var receiveMTU = 0
    /// One SDU as read; `held` is the part of it not yet in the session's log
    /// (the log was full), which goes in before anything else is read.
    var scratch: [UInt8] = []
    var held: ArraySlice<UInt8> = []
    var pendingWrites: [OpenPort.PendingWrite] = []
    var bytesIn: UInt64 = 0
    var bytesOut: UInt64 = 0
    /// The kernel's count of SDUs it discarded (SO_RXQ_OVFL), last reported.
    var dropCounter: UInt32 = 0

    struct Opening {
        var requestID: Int?
        var connectionID: Int?
    }

    init(socket: L2CAPSocket, request: ChannelRequest, wakeMode: BackgroundMode, opening: Opening?) {
        self.socket = socket
        self.request = request
        self.wakeMode = wakeMode
        self.opening = opening
    }

    var info: (peer: String, psm: Int) { (request.peer, Int(request.psm.value)) }
}

/// A PSM a client listens on.
final class PublishedPSM {
    let client: BluetoothClient
    let listener: L2CAPSocket
    let options: L2CAPOptions
    /// The coalescing window of the channels it accepts (`ChannelRequest.coalesce`).
    var coalesce: Duration = DaemonCore.channelAnnounceWindow
    /// Asked for without a PSM: publishing again without one (and the same
    /// options) gets this one back, across relaunches and daemon restarts.
    let dynamic: Bool
    var watch: WatchID?

    init(client: BluetoothClient, listener: L2CAPSocket, options: L2CAPOptions, dynamic: Bool) {
        self.client = client
        self.listener = listener
        self.options = options
        self.dynamic = dynamic
    }
}

extension BluetoothClient {
    var sessionHolder: SessionHolder {
        switch self {
        case let .app(id): .app(id)
        case let .control(connection): .control(connection)
        }
    }
}

import VigilAccessories
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilSystem
import VigilUdev

/// The daemon's accessory side: udev, the registry of connected accessories,
/// open sessions and their serial ports. Owned by `DaemonCore`.
struct AccessoryState {
    var udev: Udev?
    var monitor: UdevMonitor?
    var monitorWatch: WatchID?
    /// Why udev could not be used, if it could not (for `status`).
    var udevProblem: String?
    var registry: AccessoryRegistry
    var sessions = SessionTable()
    var ports: [Int: OpenPort] = [:]
    /// Waiting `reopen` sessions whose open failed on the accessory's current
    /// connection, and when they try again (see `DaemonCore.reopen`).
    var reopenRetries: [Int: ReopenRetry] = [:]
    /// Apps that asked for connect/disconnect events (kept across their relaunches).
    var registeredApps: Set<String> = []
    /// Registered apps without `external-accessory` now in the background: they
    /// were told every accessory disconnected and hear nothing until they return.
    var mutedApps: Set<String> = []
    /// Control connections following `vigilctl accessories watch`.
    var watchers: Set<Int> = []
    /// Holds a duplicate of every open port, so a daemon's death does not close them.
    var portKeeper: FileDescriptorKeeper?
    /// When starting one last failed (CLOCK_MONOTONIC ns): not tried again for a while.
    var portKeeperFailedAt: UInt64?
    /// Ports an earlier daemon left with the keeper, by session, until restored.
    var keptPorts: [Int: Int32] = [:]
    /// Each session's log (the ring its bytes are read into), by session id;
    /// it outlives the port across unplugs and reopens.
    var logs: [Int: OpenLog] = [:]
    /// Ended sessions whose logs still back data events their app has not
    /// acknowledged (they go to its next process): session id -> app.
    var retiredLogs: [Int: String] = [:]
    let bufferLimit: Int

    init(rules: [AccessoryRule], bufferLimit: Int) {
        registry = AccessoryRegistry(rules: rules)
        self.bufferLimit = bufferLimit
    }
}

/// A session's log and how much of it the holder has been told about.
final class OpenLog {
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

    init(_ log: SessionLog) {
        self.log = log
        announced = log.acknowledged
    }
}

struct ReopenRetry {
    var connectionID: UInt64
    var backoff = ReopenBackoff()
    var timer: TimerID?
}

/// A session's open serial port and its traffic.
final class OpenPort {
    let port: SerialPort
    var watch: WatchID?
    var readingPaused = false
    var wantsWritable = false
    /// Writes waiting for the device, each answered once all its bytes are taken.
    var pendingWrites: [PendingWrite] = []
    var bytesIn: UInt64 = 0
    var bytesOut: UInt64 = 0
    /// Counters at open, so loss is reported as it grows.
    var baseline: LineCounters?
    var reported: LineCounters?

    struct PendingWrite {
        var requestID: Int?
        var clientConnection: Int
        var bytes: [UInt8]
        var offset = 0
    }

    init(port: SerialPort) {
        self.port = port
        baseline = port.lineCounters()
        reported = baseline
    }
}

import VigilProtocol

/// Everything the engine knows about one app. Owned by the engine; read-only outside.
public struct AppRecord: Sendable {
    public internal(set) var manifest: AppManifest
    public internal(set) var state: AppState = .notRunning
    public internal(set) var pid: Int32?
    public internal(set) var connected = false
    /// Set by a user force-quit; cleared when the user launches the app again.
    public internal(set) var forceQuit = false
    public internal(set) var launch: LaunchOptions?
    public internal(set) var tasks: [BackgroundTaskInfo] = []
    public internal(set) var queue: EventQueue

    // The current background stretch (entering the background, or a wake). All
    // instants are CLOCK_MONOTONIC nanoseconds.
    var backgroundSince: UInt64?
    /// The background time limit: tasks cannot hold the app past it.
    public internal(set) var limitAt: UInt64?
    /// End of the grace period or wake budget: suspend then if no task is held.
    var suspendAt: UInt64?
    /// The app said it finished processing; it is suspended once it has
    /// acknowledged what it was sent and holds no task.
    var finishRequested = false
    var expirationWarned = false
    /// Kill deadline of an app told `willTerminate`.
    var terminateAt: UInt64?
    /// Set while a process launched into the background has not said hello:
    /// it is ended if it has not by then (`launch-timeout`).
    var connectBy: UInt64?
    /// Set while an adopted process has not said hello to this daemon: a
    /// window begun for it (grace or wake budget) starts again at its hello,
    /// as a launched process's does, so its reconnect does not use it up.
    var awaitingAdoptedHello = false
    /// Why the engine itself ended the current process, to tell a crash apart.
    var pendingExit: ExitCause?
    /// Whether the current process was told `didFinishLaunching` (once per process).
    var launchNotified = false
    var crashTimes: [UInt64] = []
    /// Its background refresh schedule (the `fetch` mode); nil: none asked for.
    public internal(set) var refresh: RefreshSchedule?
    var nextTaskID = 1

    // Figures for `vigilctl apps`.
    public internal(set) var wakes = 0
    public internal(set) var launches = 0
    public internal(set) var backgroundNanosecondsUsed: UInt64 = 0
    public internal(set) var lastDecision: Decision?

    init(manifest: AppManifest, queueLimit: Int) {
        self.manifest = manifest
        self.queue = EventQueue(limit: queueLimit)
    }

    public var id: String { manifest.id }

    /// Whether `event` may be delivered now (events for a mode the app lacks wait
    /// for the foreground).
    func mayReceive(_ event: QueuedEvent) -> Bool {
        state.isForeground || manifest.mayBeWoken(for: event.wakeMode)
    }
}

/// An app's background refresh schedule. Instants are CLOCK_MONOTONIC nanoseconds.
public struct RefreshSchedule: Sendable, Codable, Equatable {
    /// The interval the app asked for, raised to `refresh-minimum-interval`.
    public var interval: UInt64
    /// The next refresh comes not before this instant (and at most
    /// `refresh-coalescing` after it, to share a wake-up with others).
    public var due: UInt64
    /// Refreshes in a row that found no new data: each doubles the interval,
    /// up to eight times, so an app that never finds anything is woken less.
    public var noDataStreak = 0

    /// The factor the interval is stretched by now: 1, 2, 4 or 8.
    public var stretch: UInt64 { 1 << UInt64(min(max(noDataStreak, 0), 3)) }
    /// The interval as stretched now.
    public var stretchedInterval: UInt64 {
        let (product, overflow) = interval.multipliedReportingOverflow(by: stretch)
        return overflow ? 1 << 62 : min(product, 1 << 62)
    }
}

/// Why a process of an app ended.
enum ExitCause: Equatable {
    /// The user force-quit it.
    case user
    /// The system ended it without notice (memory pressure, `vigilctl terminate`).
    case system
    /// A task was still held at the background time limit.
    case watchdog(tasks: [BackgroundTaskInfo])
    /// It was told `willTerminate` (exits-on-suspend).
    case notice
    /// Launched into the background, it did not connect within `launch-timeout`.
    case launchTimeout
}

/// Every duration of the background model, in seconds. Defaults are Vigil's
/// numbers from the background model; tests shorten them through the config file.
public struct Timings: Sendable, Equatable {
    /// Time between entering the background and suspension, unless a task is held.
    public var suspendGrace: Double = 5
    /// Processing time after a wake, unless a task is held.
    public var wakeBudget: Double = 10
    /// Maximum background time while holding tasks, per background stretch.
    public var backgroundTimeLimit: Double = 180
    /// How long before the limit expiration handlers are called.
    public var expirationWarning: Double = 5
    /// Time a process launched into the background has to connect (its hello);
    /// its processing window starts then. Ended if it has not (iOS's launch watchdog).
    public var launchTimeout: Double = 20
    /// Time an exits-on-suspend app has after `willTerminate`.
    public var exitGrace: Double = 5
    /// Crash-loop guard: at most `relaunchLimit` relaunches after crashes within this window.
    public var relaunchWindow: Double = 60
    public var relaunchLimit: Int = 3
    /// Background refresh: the shortest interval an app may ask for.
    public var refreshMinimumInterval: Double = 900
    /// Background refresh: how late a refresh may come so that it shares a
    /// daemon wake-up with others (it never comes early).
    public var refreshCoalescing: Double = 60

    public init() {}

    /// The timings as `vigilctl status` shows them.
    public var asDictionary: [String: Double] {
        [
            "suspend-grace": suspendGrace, "wake-budget": wakeBudget,
            "background-time-limit": backgroundTimeLimit, "expiration-warning": expirationWarning,
            "exit-grace": exitGrace, "launch-timeout": launchTimeout, "relaunch-window": relaunchWindow, "relaunch-limit": Double(relaunchLimit),
            "refresh-minimum-interval": refreshMinimumInterval, "refresh-coalescing": refreshCoalescing,
        ]
    }
}

import VigilProtocol
import VigilSystem

/// How the daemon confines, freezes and ends an app's processes.
///
/// Two implementations: the cgroup v2 freezer (the whole process tree,
/// atomically, visible in `cgroup.events`) and SIGSTOP/SIGCONT to the app's
/// session where no cgroup can be had.
protocol Suspender: AnyObject {
    var mechanism: SuspensionMechanism { get }
    /// Why this mechanism is in use, for `vigilctl status`.
    var detail: String { get }
    var cgroupRoot: String? { get }

    /// Where a new process of `app` must be placed before it runs any code.
    func prepareSpawn(for app: String) throws -> Cgroup?
    func freeze(_ app: String, pid: Int32) throws
    func thaw(_ app: String, pid: Int32) throws
    /// Ends every process of the app.
    func kill(_ app: String, pid: Int32) throws
    /// The app a peer process belongs to, given the main pid of every running app.
    func app(owning pid: Int32, running: [String: Int32]) -> String?
    /// Apps still alive from an earlier daemon, for adoption: each recorded
    /// process that still runs (`ProcessRecord.stillRunning`), and with the
    /// freezer any populated app cgroup left without a record. What cannot be
    /// adopted (an app without a manifest) is thawed and left alone; what is
    /// left of an app whose main process is gone is ended. `notes` says what
    /// was done, for the log.
    func survivors(recorded: [ProcessRecord], known: Set<String>, notes: inout [String]) -> [Survivor]
    /// After the app was ended for good (the daemon's stop): waits briefly for
    /// its last processes to go and removes what the daemon made for it.
    func ended(_ app: String)
}

struct Survivor {
    var app: String
    var pid: Int32
    var startTime: UInt64
    var frozen: Bool
    /// Where it was found, for the `adopt` decision.
    var how: String
}

import FoundationEssentials
import Glibc

/// The demo's behaviour, from environment variables so an app manifest (or a
/// test) can script it without code.
struct DemoConfiguration: Sendable {
    /// `VIGIL_DEMO_RECORD`: append one JSON object per handled item to this file.
    var recordPath: String?
    /// `VIGIL_DEMO_TASK_SECONDS`: hold a "demo-work" background task this long around each event.
    var taskSeconds: Double?
    /// `VIGIL_DEMO_TASK_FOREVER=1`: begin a "stuck-upload" task and never end it (watchdog test).
    var taskForever: Bool
    /// `VIGIL_DEMO_END_ON_EXPIRY=1`: the expiration handler ends its task, as a good app does.
    var endOnExpiry: Bool
    /// `VIGIL_DEMO_WORK_SECONDS`: sleep this long before acknowledging each event.
    var workSeconds: Double?
    /// `VIGIL_DEMO_CRASH_ON_SEQ`: abort on this event (first delivery only) before acknowledging it.
    var crashOnSeq: UInt64?
    /// `VIGIL_DEMO_NO_FINISH=1`: never call `finishedProcessing()`, using the whole wake budget.
    var noFinish: Bool
    /// `VIGIL_DEMO_TERMINATE_DELAY`: seconds to linger after `willTerminate` before exiting.
    var terminateDelay: Double
    /// `VIGIL_DEMO_ACK_SEPARATELY=1`: `ack` and `finishedProcessing` as two
    /// frames, as clients did before the finish could carry the ack (the
    /// wake benchmarks compare the two in one run).
    var acknowledgesSeparately: Bool

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        func flag(_ name: String) -> Bool { ["1", "true", "yes"].contains(environment[name]?.lowercased() ?? "") }
        recordPath = environment["VIGIL_DEMO_RECORD"].flatMap { $0.isEmpty ? nil : $0 }
        taskSeconds = environment["VIGIL_DEMO_TASK_SECONDS"].flatMap(Double.init)
        taskForever = flag("VIGIL_DEMO_TASK_FOREVER")
        endOnExpiry = flag("VIGIL_DEMO_END_ON_EXPIRY")
        workSeconds = environment["VIGIL_DEMO_WORK_SECONDS"].flatMap(Double.init)
        crashOnSeq = environment["VIGIL_DEMO_CRASH_ON_SEQ"].flatMap(UInt64.init)
        noFinish = flag("VIGIL_DEMO_NO_FINISH")
        terminateDelay = environment["VIGIL_DEMO_TERMINATE_DELAY"].flatMap(Double.init) ?? 0
        acknowledgesSeparately = flag("VIGIL_DEMO_ACK_SEPARATELY")
    }
}

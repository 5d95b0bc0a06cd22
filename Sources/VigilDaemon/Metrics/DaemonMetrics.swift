import CoreMetrics
import Prometheus
import VigilLifecycle
import VigilProtocol

/// vigild's metrics: swift-metrics instruments, made by a Prometheus factory
/// on the daemon's own registry (no global bootstrap, so a process may hold
/// several daemons, as the in-process tests do), served by the metrics
/// endpoint (`DaemonCore+Metrics`). Only made when the endpoint is configured:
/// without it the daemon counts nothing. Series: docs/observability.md.
final class DaemonMetrics {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private var counters: [String: CoreMetrics.Counter] = [:]
    private var timers: [String: CoreMetrics.Timer] = [:]
    private var gauges: [String: CoreMetrics.Gauge] = [:]
    /// When each app's current processing window began (a wake or a launch into the background).
    private var windowStart: [String: UInt64] = [:]
    /// Wakes not yet followed by an acknowledgement from the app.
    private var wakeAwaitingAck: [String: UInt64] = [:]
    /// Session counters as last reported, so counters grow by the difference.
    private var sessionTotals: [String: UInt64] = [:]
    /// Gauge series set at the last scrape, so series that went away are zeroed.
    private var gaugesSet: Set<String> = []

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        let buckets: [Duration] = [.milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(250),
                                   .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(180)]
        factory.defaultDurationHistogramBuckets = buckets
        self.factory = factory
    }

    // MARK: Instruments

    func count(_ name: String, _ dimensions: [(String, String)] = [], by amount: Int64 = 1) {
        let key = Self.key(name, dimensions)
        let counter = counters[key] ?? {
            let made = Counter(label: name, dimensions: dimensions, factory: factory)
            counters[key] = made
            return made
        }()
        counter.increment(by: amount)
    }

    func time(_ name: String, _ dimensions: [(String, String)], nanoseconds: UInt64) {
        let key = Self.key(name, dimensions)
        let timer = timers[key] ?? {
            let made = Timer(label: name, dimensions: dimensions, factory: factory)
            timers[key] = made
            return made
        }()
        timer.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    func gauge(_ name: String, _ dimensions: [(String, String)], _ value: Double) {
        let key = Self.key(name, dimensions)
        let gauge = gauges[key] ?? {
            let made = Gauge(label: name, dimensions: dimensions, factory: factory)
            gauges[key] = made
            return made
        }()
        gauge.record(value)
        gaugesSet.insert(key)
    }

    private static func key(_ name: String, _ dimensions: [(String, String)]) -> String {
        name + dimensions.map { "|\($0.0)=\($0.1)" }.joined()
    }

    // MARK: What the daemon reports

    /// Every decision: counted by action, and the wakes, windows and terminations it implies.
    func decided(_ record: DecisionRecord, now: UInt64) {
        count("vigil_decisions_total", [("action", record.action)])
        let app = [("app", record.app)]
        switch record.action {
        case "wake", "relaunch":
            count("vigil_wakes_total", app)
            if record.action == "relaunch" { count("vigil_relaunches_total", app) }
            windowStart[record.app] = now
            wakeAwaitingAck[record.app] = now
        case "terminate":
            count("vigil_terminations_total", app)
        case "extend":
            count("vigil_background_tasks_total", app)
        case "expire":
            count("vigil_task_expirations_total", app)
        case "drop":
            count("vigil_dropped_events_total", app)
        case "crash":
            count("vigil_crashes_total", app)
        default:
            break
        }
        if ["suspend", "terminate", "exit", "crash", "forceQuit"].contains(record.action) || record.state.isForeground,
           let start = windowStart.removeValue(forKey: record.app) {
            time("vigil_processing_window_seconds", app, nanoseconds: now - min(start, now))
        }
        if record.state == .notRunning { wakeAwaitingAck[record.app] = nil }
    }

    /// A device came or went; a Bluetooth link that comes back is a reconnection.
    func deviceChanged(_ record: DeviceRecord, reconnect: Bool) {
        count("vigil_device_changes_total", [("kind", record.kind), ("change", record.change)])
        if reconnect && record.kind == "bluetooth" { count("vigil_bluetooth_reconnects_total") }
    }

    /// The app acknowledged events: the first acknowledgement after a wake
    /// measures how long the wake took to be handled.
    func acknowledged(by app: String, now: UInt64) {
        guard let woken = wakeAwaitingAck.removeValue(forKey: app) else { return }
        time("vigil_wake_to_ack_seconds", [("app", app)], nanoseconds: now - min(woken, now))
    }

    /// A counter that mirrors a total the daemon keeps (bytes of a session):
    /// it grows by what the total grew since the last scrape.
    func total(_ name: String, _ dimensions: [(String, String)], _ value: UInt64) {
        let key = Self.key(name, dimensions)
        let last = sessionTotals[key] ?? 0
        if value > last { count(name, dimensions, by: Int64(clamping: value - last)) }
        sessionTotals[key] = value
    }

    /// Gauges are set afresh for each scrape: call before setting them, then
    /// `endGauges` zeroes the series nothing set this time (an app removed).
    func beginGauges() -> Set<String> {
        defer { gaugesSet = [] }
        return gaugesSet
    }

    func endGauges(previous: Set<String>) {
        for key in previous.subtracting(gaugesSet) { gauges[key]?.record(0) }
    }

    func page() -> [UInt8] {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}

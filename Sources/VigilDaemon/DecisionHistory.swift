import FoundationEssentials
import Glibc
import Logging
import VigilLifecycle
import VigilProtocol

/// The decisions the daemon made, newest last, bounded; each one logged with
/// its reason through swift-log, appended to the decision log file (so the
/// log lasts across restarts: `JSONLinesLog`) and pushed to the control
/// clients that follow it. Beside them, the devices that came and went
/// (`DeviceRecord`), kept the same way, for the timeline.
struct DecisionHistory {
    /// Oldest first; up to twice `capacity` (trimmed by half at a time, so
    /// an append costs O(1) amortised), of which the last `capacity` count.
    private var stored: [DecisionRecord] = []
    let capacity: Int
    let logger: Logger
    private(set) var file: JSONLinesLog<DecisionRecord>?
    private var storedDevices: [DeviceRecord] = []
    private(set) var deviceFile: JSONLinesLog<DeviceRecord>?
    /// Control connections following the log, with the app they asked for (nil: all).
    var followers: [Int: String?] = [:]

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    var records: ArraySlice<DecisionRecord> { stored.suffix(capacity) }

    /// Takes back what an earlier daemon wrote and appends from now on.
    mutating func attach(_ file: JSONLinesLog<DecisionRecord>, devices: JSONLinesLog<DeviceRecord>) {
        stored = load(file) + stored
        storedDevices = load(devices) + storedDevices
        self.file = file
        deviceFile = devices
    }

    private func load<Record>(_ file: JSONLinesLog<Record>) -> [Record] {
        let (earlier, unreadable) = file.load()
        if unreadable > 0 {
            logger.warning("\(file.path): \(unreadable) unreadable line(s) skipped (a torn last line after a crash, or damage)")
        }
        if let failure = file.failure { logger.error("\(failure); kept in memory only") }
        return earlier
    }

    /// A device came or went. A change repeated for the same device (a link
    /// event reaches every app that uses the peripheral) is kept once.
    /// Returns the record kept, or nil for a repeat.
    @discardableResult
    mutating func appendDevice(_ record: DeviceRecord) -> DeviceRecord? {
        if let last = storedDevices.last(where: { $0.kind == record.kind && $0.device == record.device }), last.change == record.change {
            return nil
        }
        storedDevices.append(record)
        if storedDevices.count > 2 * capacity { storedDevices.removeFirst(storedDevices.count - capacity) }
        deviceFile?.append(record)
        return record
    }

    /// Whether the device of `record` was seen going away before it (so its
    /// connection now is a reconnection).
    func hasSeenLeave(of record: DeviceRecord) -> Bool {
        storedDevices.dropLast().contains { $0.kind == record.kind && $0.device == record.device && $0.change == "disconnected" }
    }

    func devices(since: Double?) -> [DeviceRecord] {
        storedDevices.suffix(capacity).filter { since == nil || $0.time >= since! }
    }

    @discardableResult
    mutating func append(_ decision: Decision) -> DecisionRecord {
        let record = DecisionRecord(
            time: Date().timeIntervalSince1970, app: decision.app, action: decision.action.rawValue,
            reason: decision.reason, state: decision.state)
        stored.append(record)
        if stored.count > 2 * capacity { stored.removeFirst(stored.count - capacity) }
        if let file {
            let failed = file.failure
            file.append(record)
            if let failure = file.failure, failure != failed { logger.error("\(failure)") }
        }
        let level: Logger.Level = switch decision.action {
        case .crash, .drop, .refuse: .warning
        case .terminate: .notice
        default: .info
        }
        logger.log(
            level: level, "\(decision.action.rawValue) \(decision.app): \(decision.reason)",
            metadata: ["app": "\(decision.app)", "state": "\(decision.state.rawValue)"])
        return record
    }

    func recent(app: String?, limit: Int?, since: Double? = nil) -> [DecisionRecord] {
        let matching = records.filter { (app == nil || $0.app == app) && (since == nil || $0.time >= since!) }
        guard let limit else { return matching }
        return Array(matching.suffix(max(limit, 0)))  // the request's range check refuses negatives; never trap here
    }
}

import Foundation
import Logging
import VigilLifecycle
import VigilProtocol

/// The decisions the daemon made, newest last, bounded; each one logged with
/// its reason through swift-log, appended to the decision log file (so the
/// log lasts across restarts: `DecisionLogFile`) and pushed to the control
/// clients that follow it.
struct DecisionHistory {
    /// Oldest first; up to twice `capacity` (trimmed by half at a time, so
    /// an append costs O(1) amortised), of which the last `capacity` count.
    private var stored: [DecisionRecord] = []
    let capacity: Int
    let logger: Logger
    private(set) var file: DecisionLogFile?
    /// Control connections following the log, with the app they asked for (nil: all).
    var followers: [Int: String?] = [:]

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    var records: ArraySlice<DecisionRecord> { stored.suffix(capacity) }

    /// Takes back what an earlier daemon wrote and appends from now on.
    mutating func attach(_ file: DecisionLogFile) {
        let (earlier, unreadable) = file.load()
        if unreadable > 0 {
            logger.warning("decision log \(file.path): \(unreadable) unreadable line(s) skipped (a torn last line after a crash, or damage)")
        }
        stored = earlier + stored
        if let failure = file.failure { logger.error("\(failure); decisions are kept in memory only") }
        self.file = file
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

import Foundation
import Logging
import VigilLifecycle
import VigilProtocol

/// The decisions the daemon made, newest last, bounded; and each one logged
/// with its reason through swift-log.
struct DecisionHistory {
    private(set) var records: [DecisionRecord] = []
    let capacity: Int
    let logger: Logger

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    mutating func append(_ decision: Decision) {
        let record = DecisionRecord(
            time: Date().timeIntervalSince1970, app: decision.app, action: decision.action.rawValue,
            reason: decision.reason, state: decision.state)
        records.append(record)
        if records.count > capacity { records.removeFirst(records.count - capacity) }
        let level: Logger.Level = switch decision.action {
        case .crash, .drop, .refuse: .warning
        case .terminate: .notice
        default: .info
        }
        logger.log(
            level: level, "\(decision.action.rawValue) \(decision.app): \(decision.reason)",
            metadata: ["app": "\(decision.app)", "state": "\(decision.state.rawValue)"])
    }

    func recent(app: String?, limit: Int?) -> [DecisionRecord] {
        let matching = app.map { id in records.filter { $0.app == id } } ?? records
        guard let limit else { return matching }
        return Array(matching.suffix(max(limit, 0)))  // the request's range check refuses negatives; never trap here
    }
}

import VigilLifecycle
import VigilProtocol

/// The decision log: kept (`DecisionHistory`), on disk (`DecisionLogFile`),
/// and pushed to control clients that follow it (`log` with `follow`).
extension DaemonCore {
    /// Called once the state directory exists: earlier runs' decisions come back.
    func attachDecisionLog() {
        decisions.attach(DecisionLogFile(directory: config.stateDirectory, capacity: config.decisionLogSize))
    }

    func recordDecision(_ decision: Decision) {
        let record = decisions.append(decision)
        metricsEndpoint?.metrics.decided(record, now: now)
        guard !decisions.followers.isEmpty else { return }
        for (id, app) in decisions.followers.sorted(by: { $0.key < $1.key }) {
            guard let connection = connections[id] else {
                decisions.followers[id] = nil  // closed
                continue
            }
            if let app, app != record.app { continue }
            send(DecisionPushed(decision: record), to: connection)
        }
    }

    /// `log`: the decisions kept, filtered; with `follow`, new ones follow as pushes.
    func answerLog(_ request: LogRequest, id: Int?, connection: ClientConnection) {
        send(DecisionLog(decisions: decisions.recent(app: request.app, limit: request.limit, since: request.since)), id: id, to: connection)
        if request.follow == true { decisions.followers[connection.id] = .some(request.app) }
    }
}

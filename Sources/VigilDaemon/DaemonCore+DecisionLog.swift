import FoundationEssentials
import Glibc
import VigilLifecycle
import VigilProtocol

/// The decision log: kept (`DecisionHistory`), on disk (`JSONLinesLog`),
/// and pushed to control clients that follow it (`log` with `follow`).
extension DaemonCore {
    /// Called once the state directory exists: earlier runs' decisions come back.
    func attachDecisionLog() {
        decisions.attach(
            JSONLinesLog<DecisionRecord>(directory: config.stateDirectory, name: "decisions", capacity: config.decisionLogSize) { $0.jsonLine },
            devices: JSONLinesLog<DeviceRecord>(directory: config.stateDirectory, name: "devices", capacity: config.decisionLogSize) { $0.jsonLine })
    }

    /// An accessory or a Bluetooth LE link came or went: kept for the timeline.
    func recordDevice(kind: String, device: String, change: String, detail: String) {
        guard let record = decisions.appendDevice(DeviceRecord(time: wallClock(), kind: kind, device: device, change: change, detail: detail))
        else { return }
        metrics?.deviceChanged(record, reconnect: record.change == "connected" && decisions.hasSeenLeave(of: record))
    }

    func recordDecision(_ decision: Decision) {
        let record = decisions.append(decision)
        metrics?.decided(record, now: now)
        guard !decisions.followers.isEmpty else { return }
        for (id, app) in decisions.followers.sorted(by: { $0.key < $1.key }) {
            guard let connection = clients.connection(id) else {
                decisions.followers[id] = nil  // closed
                continue
            }
            if let app, app != record.app { continue }
            send(DecisionPushed(decision: record), to: connection)
        }
    }

    /// `log`: the decisions kept, filtered; with `follow`, new ones follow as pushes.
    func answerLog(_ request: LogRequest, id: Int?, connection: ClientConnection) {
        send(DecisionLog(decisions: decisions.recent(app: request.app, limit: request.limit, since: request.since),
                         devices: request.app == nil ? decisions.devices(since: request.since) : nil), id: id, to: connection)
        if request.follow == true { decisions.followers[connection.id] = .some(request.app) }
    }
}

/// Seconds since the Unix epoch, as decision records have them.
func wallClock() -> Double { Date().timeIntervalSince1970 }

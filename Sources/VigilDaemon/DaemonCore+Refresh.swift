import VigilLifecycle
import VigilProtocol

/// Background refresh requests of the app role (docs/lifecycle.md,
/// "Background refresh"); the engine keeps the schedules and sends the wakes.
extension DaemonCore {
    /// Handles `refresh.*`; false for any other message.
    func handleRefreshRequest(_ message: IncomingMessage, app: String, connection: ClientConnection) throws(ProtocolError) -> Bool {
        switch message.type {
        case ScheduleRefresh.type:
            let request: ScheduleRefresh = try message.decode()
            let (schedule, now) = try withEngine { engine, now throws(ProtocolError) in
                (try engine.scheduleRefresh(app, interval: request.interval, earliestBegin: request.earliestBegin, now: now), now)
            }
            send(RefreshScheduled(next: Double(schedule.due - min(schedule.due, now)) / 1e9, interval: Double(schedule.interval) / 1e9),
                 id: message.id, to: connection)
        case CancelRefresh.type:
            try withEngine { engine, _ throws(ProtocolError) in try engine.cancelRefresh(app) }
            send(Done(), id: message.id, to: connection)
        case CompleteRefresh.type:
            let request: CompleteRefresh = try message.decode()
            guard engine.apps[app]?.refresh != nil else {
                throw ProtocolError(.invalidState, "\(app) has no refresh scheduled", id: message.id)
            }
            // Reply before the engine may suspend the app (as for finishedProcessing).
            send(Done(), id: message.id, to: connection)
            try withEngine { engine, now throws(ProtocolError) in try engine.completeRefresh(app, result: request.result, now: now) }
        default:
            return false
        }
        return true
    }
}

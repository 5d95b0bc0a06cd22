import VigilLifecycle
import VigilProtocol

/// Background refresh requests of the app role (docs/lifecycle.md,
/// "Background refresh"); the engine keeps the schedules and sends the wakes,
/// so this component has no state of its own.
final class RefreshComponent: DaemonComponent {
    let name = "refresh"
    let requestTypes: Set<String> = [ScheduleRefresh.type, CancelRefresh.type, CompleteRefresh.type]

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        let app = try requester.app(sending: message)
        switch message.type {
        case ScheduleRefresh.type:
            let request: ScheduleRefresh = try message.decode()
            let (schedule, now) = try services.withEngine { engine, now throws(ProtocolError) in
                (try engine.scheduleRefresh(app, interval: request.interval, earliestBegin: request.earliestBegin, now: now), now)
            }
            services.send(RefreshScheduled(next: Double(schedule.due - min(schedule.due, now)) / 1e9, interval: Double(schedule.interval) / 1e9),
                 id: message.id, to: connection)
        case CancelRefresh.type:
            _ = try services.withEngine { engine, _ throws(ProtocolError) in try engine.cancelRefresh(app) }
            services.send(Done(), id: message.id, to: connection)
        case CompleteRefresh.type:
            let request: CompleteRefresh = try message.decode()
            guard services.engine.apps[app]?.refresh != nil else {
                throw ProtocolError(.invalidState, "\(app) has no refresh scheduled", id: message.id)
            }
            // Reply before the engine may suspend the app (as for finishedProcessing).
            services.send(Done(), id: message.id, to: connection)
            _ = try services.withEngine { engine, now throws(ProtocolError) in try engine.completeRefresh(app, result: request.result, now: now) }
        default:
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)' for an app", id: message.id)
        }
    }
}

import FoundationEssentials
import Glibc
import VigilKit

/// Handles items one at a time, in delivery order, so a cumulative `ack`
/// never covers an event that is still being worked on.
struct DemoHandler {
    let app: Application
    let configuration: DemoConfiguration
    let recorder: Recorder

    func handle(_ notification: LifecycleNotification, at handled: UInt64) async {
        var record = Record(kind: "lifecycle", at: handled)
        record.event = notification.rawValue
        record.state = app.state.rawValue
        recorder.record(record, "\(notification.rawValue) -> \(app.state.rawValue)")
        guard notification == .willTerminate else { return }
        if configuration.terminateDelay > 0 { try? await Task.sleep(for: .seconds(configuration.terminateDelay)) }
        exit(0)
    }

    /// VigilKit connected again after the connection dropped (a daemon restart):
    /// unacknowledged events follow, redelivered.
    func reconnected(at handled: UInt64) {
        var record = Record(kind: "reconnected", at: handled)
        record.state = app.state.rawValue
        recorder.record(record, "reconnected to vigild, state \(app.state.rawValue)")
    }

    func handle(_ event: AppEvent, at handled: UInt64) async {
        recorder.record(record(of: event, at: handled), describe(event))
        if event.seq == configuration.crashOnSeq, !event.redelivered {
            recorder.say("crashing on event \(event.seq) as asked (VIGIL_DEMO_CRASH_ON_SEQ)")
            abort()
        }

        let work = ContinuousClock.now
        let task = await beginTaskIfAsked()
        if let seconds = configuration.workSeconds { try? await Task.sleep(for: .seconds(seconds)) }
        // With nothing between them, the ack rides in `finishedProcessing`.
        let acknowledgesInFinish = task == nil && !configuration.noFinish && !configuration.acknowledgesSeparately
        if !acknowledgesInFinish { app.acknowledge(event) }
        if let task, !configuration.taskForever, let seconds = configuration.taskSeconds {
            try? await Task.sleep(until: work + .seconds(seconds))
            await task.end()
        }

        guard !configuration.noFinish else { return }
        // Recorded first: with no task held the daemon freezes the app as soon as it replies.
        recorder.record(Record(kind: "finished"), "finished processing")
        if acknowledgesInFinish {
            await app.finishedProcessing(acknowledging: event)
        } else {
            await app.finishedProcessing()
        }
    }

    private func beginTaskIfAsked() async -> DemoTask? {
        if configuration.taskForever {
            return await DemoTask.begin("stuck-upload", in: app, endsOnExpiry: false, recorder: recorder)
        }
        guard configuration.taskSeconds != nil else { return nil }
        return await DemoTask.begin("demo-work", in: app, endsOnExpiry: configuration.endOnExpiry, recorder: recorder)
    }

    private func record(of event: AppEvent, at handled: UInt64) -> Record {
        var record = Record(kind: "event", at: handled)
        record.seq = event.seq
        record.eventKind = event.kind
        record.redelivered = event.redelivered
        record.payload = String(decoding: event.payload, as: UTF8.self)
        record.attributes = event.attributes
        if let sent = event.attributes["sent"]?.numberValue ?? event.attributes["sent"]?.stringValue.flatMap(Double.init),
           let sentNs = Int64(exactly: sent.rounded()) {
            record.latencyNs = Int64(handled) - sentNs
        }
        return record
    }

    private func describe(_ event: AppEvent) -> String {
        "event \(event.seq) \(event.kind)\(event.redelivered ? " (redelivered)" : ""), \(event.payload.count) byte(s)"
    }
}

import Synchronization
import VigilKit

/// A background task the demo holds, ended at most once whether by the work
/// finishing or by its expiration handler.
final class DemoTask: Sendable {
    let name: String
    private let app: Application
    private let recorder: Recorder
    private let endsOnExpiry: Bool
    private let progress = Mutex(Progress())

    private struct Progress {
        var identifier: BackgroundTaskIdentifier?
        var ended = false
        /// The warning came before `beginBackgroundTask` returned the identifier.
        var expiredEarly = false
    }

    private init(name: String, app: Application, recorder: Recorder, endsOnExpiry: Bool) {
        self.name = name
        self.app = app
        self.recorder = recorder
        self.endsOnExpiry = endsOnExpiry
    }

    static func begin(_ name: String, in app: Application, endsOnExpiry: Bool, recorder: Recorder) async -> DemoTask {
        let task = DemoTask(name: name, app: app, recorder: recorder, endsOnExpiry: endsOnExpiry)
        let identifier = await app.beginBackgroundTask(name: name) { task.expire() }
        let endNow = task.progress.withLock { progress in
            progress.identifier = identifier
            return progress.expiredEarly && endsOnExpiry
        }
        var record = Record(kind: "taskBegan")
        record.task = identifier.rawValue
        record.name = name
        recorder.record(record, "began background task \(name) \(identifier)")
        if endNow { await task.end() }
        return task
    }

    func end() async {
        let identifier = progress.withLock { progress -> BackgroundTaskIdentifier? in
            guard !progress.ended, let identifier = progress.identifier else { return nil }
            progress.ended = true
            return identifier
        }
        guard let identifier else { return }
        await app.endBackgroundTask(identifier)
        var record = Record(kind: "taskEnded")
        record.task = identifier.rawValue
        record.name = name
        recorder.record(record, "ended background task \(name) \(identifier)")
    }

    /// The expiration handler: record the warning and, if configured, end the task.
    private func expire() {
        let identifier = progress.withLock { progress in
            if progress.identifier == nil { progress.expiredEarly = true }
            return progress.identifier
        }
        var record = Record(kind: "expiring")
        record.task = identifier?.rawValue
        record.name = name
        record.remaining = app.backgroundTimeRemaining
        recorder.record(record, "background task \(name) expiring, \(record.remaining!)s left")
        if endsOnExpiry, identifier != nil { Task { await end() } }
    }
}

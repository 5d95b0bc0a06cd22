import VigilKit

/// A background task the demo holds, ended at most once whether by the work
/// finishing or by its expiration handler.
actor DemoTask {
    let name: String
    private let app: Application
    private let recorder: Recorder
    private let endsOnExpiry: Bool
    private var identifier: BackgroundTaskIdentifier?
    private var ended = false
    /// The warning came before `beginBackgroundTask` returned the identifier.
    private var expiredEarly = false

    private init(name: String, app: Application, recorder: Recorder, endsOnExpiry: Bool) {
        self.name = name
        self.app = app
        self.recorder = recorder
        self.endsOnExpiry = endsOnExpiry
    }

    static func begin(_ name: String, in app: Application, endsOnExpiry: Bool, recorder: Recorder) async -> DemoTask {
        let task = DemoTask(name: name, app: app, recorder: recorder, endsOnExpiry: endsOnExpiry)
        let identifier = await app.beginBackgroundTask(name: name) {
            Task { await task.expire() }
        }
        await task.began(identifier)
        return task
    }

    func end() async {
        guard !ended, let identifier else { return }
        ended = true
        // Recorded first: ending the last task may get the app frozen as soon as the daemon replies.
        recorder.record(record("taskEnded"), "ending background task \(name) \(identifier)")
        await app.endBackgroundTask(identifier)
    }

    private func began(_ identifier: BackgroundTaskIdentifier) async {
        self.identifier = identifier
        recorder.record(record("taskBegan"), "began background task \(name) \(identifier)")
        if expiredEarly, endsOnExpiry { await end() }
    }

    /// The expiration handler: record the warning and, if configured, end the task.
    private func expire() async {
        var warning = record("expiring")
        warning.remaining = app.backgroundTimeRemaining
        recorder.record(warning, "background task \(name) expiring, \(warning.remaining!)s left")
        guard identifier != nil else { return expiredEarly = true }
        if endsOnExpiry { await end() }
    }

    private func record(_ kind: String) -> Record {
        var record = Record(kind: kind)
        record.task = identifier?.rawValue
        record.name = name
        return record
    }
}

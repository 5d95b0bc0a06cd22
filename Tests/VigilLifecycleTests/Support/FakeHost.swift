import Testing
import VigilProtocol
@testable import VigilLifecycle

/// A `LifecycleHost` that records every call, in order.
final class FakeHost: LifecycleHost {
    enum Call: Equatable {
        case start(String, LaunchOptions, pid: Int32)
        case freeze(String)
        case thaw(String)
        case kill(String)
        case send(OutboundMessage, to: String)
        case record(Decision)
    }

    struct StartFailure: Error, CustomStringConvertible {
        var description: String { "exec failed: no such file" }
    }

    private(set) var calls: [Call] = []
    /// The pid the next successful `startProcess` returns.
    var nextPID: Int32 = 100
    /// When set, `startProcess` throws it.
    var startError: (any Error)?

    func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32 {
        if let startError { throw startError }
        let pid = nextPID
        nextPID += 1
        calls.append(.start(manifest.id, launch, pid: pid))
        return pid
    }
    func freeze(_ app: String) { calls.append(.freeze(app)) }
    func thaw(_ app: String) { calls.append(.thaw(app)) }
    func kill(_ app: String) { calls.append(.kill(app)) }
    func send(_ message: OutboundMessage, to app: String) { calls.append(.send(message, to: app)) }
    func record(_ decision: Decision) { calls.append(.record(decision)) }
    /// State changes are not recorded as calls (most tests count calls); kept apart.
    private(set) var stateChanges: [(app: String, from: AppState, to: AppState)] = []
    func stateChanged(_ app: String, from old: AppState, to new: AppState) { stateChanges.append((app, old, new)) }

    func clear() { calls = [] }

    // MARK: Views of the record

    var starts: [(app: String, launch: LaunchOptions, pid: Int32)] {
        calls.compactMap { if case let .start(app, launch, pid) = $0 { (app, launch, pid) } else { nil } }
    }
    func freezes(_ app: String) -> Int { calls.filter { $0 == .freeze(app) }.count }
    func thaws(_ app: String) -> Int { calls.filter { $0 == .thaw(app) }.count }
    func kills(_ app: String) -> Int { calls.filter { $0 == .kill(app) }.count }

    func messages(to app: String) -> [OutboundMessage] {
        calls.compactMap { if case let .send(message, to) = $0, to == app { message } else { nil } }
    }
    func lifecycle(to app: String) -> [LifecycleMessage] {
        messages(to: app).compactMap { if case let .lifecycle(message) = $0 { message } else { nil } }
    }
    func notifications(to app: String) -> [LifecycleNotification] { lifecycle(to: app).map(\.event) }
    func events(to app: String) -> [(seq: UInt64, kind: String, redelivered: Bool)] {
        messages(to: app).compactMap {
            if case let .event(event, redelivered) = $0 { (event.seq, event.kind, redelivered) } else { nil }
        }
    }
    func eventSeqs(to app: String) -> [UInt64] { events(to: app).map(\.seq) }
    func deadlines(to app: String) -> [UInt64?] {
        messages(to: app).compactMap { if case let .deadline(value) = $0 { .some(value) } else { nil } }
    }
    func expiring(to app: String) -> [TaskExpiring] {
        messages(to: app).compactMap { if case let .taskExpiring(value) = $0 { value } else { nil } }
    }
    var decisions: [Decision] {
        calls.compactMap { if case let .record(decision) = $0 { decision } else { nil } }
    }
    func decisions(_ action: Decision.Action, for app: String) -> [Decision] {
        decisions.filter { $0.action == action && $0.app == app }
    }
    /// Index of the first call matching `predicate` (for ordering checks).
    func index(of call: Call) -> Int? { calls.firstIndex(of: call) }
}

let second: UInt64 = 1_000_000_000

/// The engine, its fake host and a virtual CLOCK_MONOTONIC.
final class Harness {
    static let plain = "org.example.plain"
    static let accessory = "org.example.accessory"
    static let exits = "org.example.exits"

    let host = FakeHost()
    let engine: LifecycleEngine
    /// Virtual CLOCK_MONOTONIC nanoseconds; starts well away from zero.
    private(set) var now: UInt64 = 1_000 * second

    init(timings: Timings = Timings(), queueLimit: Int = 1000, manifests: [AppManifest]? = nil) {
        engine = LifecycleEngine(timings: timings, queueLimit: queueLimit, host: host)
        let all = manifests ?? [
            AppManifest(id: Self.plain, exec: ["/usr/bin/plain"]),
            AppManifest(id: Self.accessory, exec: ["/usr/bin/acc"], backgroundModes: [.externalAccessory]),
            AppManifest(id: Self.exits, exec: ["/usr/bin/exits"], exitsOnSuspend: true),
        ]
        engine.updateManifests(Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0) }))
    }

    /// Moves the virtual clock (without telling the engine).
    func tick(_ seconds: Double) { now += nanoseconds(seconds) }
    func tick(nanos: UInt64) { now += nanos }
    /// Moves the clock and lets the engine act on deadlines.
    func advance(_ seconds: Double) {
        tick(seconds)
        engine.advance(to: now)
    }
    func advance(to instant: UInt64) {
        precondition(instant >= now, "the monotonic clock never goes back")
        now = instant
        engine.advance(to: now)
    }

    func app(_ id: String) -> AppRecord { engine.apps[id]! }
    func state(_ id: String) -> AppState { engine.apps[id]!.state }
    func pid(_ id: String) -> Int32? { engine.apps[id]?.pid }

    // MARK: Scenarios

    /// Launched by the user and connected: active.
    func active(_ id: String = plain) throws {
        try engine.launch(id, now: now)
        _ = engine.connected(id, now: now)
    }

    /// Active, then sent to the background and left there past the grace period.
    func suspended(_ id: String = plain) throws {
        try active(id)
        try engine.moveToBackground(id, now: now)
        advance(engine.timings.suspendGrace)
    }

    @discardableResult
    func deliver(_ kind: String = "test", to id: String = plain, mode: BackgroundMode? = nil, canBeHeldBack: Bool = false) throws(ProtocolError) -> (seq: UInt64, disposition: Disposition) {
        try engine.deliver(QueuedEvent(kind: kind, wakeMode: mode), to: id, canBeHeldBack: canBeHeldBack, now: now)
    }
}

/// The code of the ProtocolError `body` throws, or nil if it does not throw.
func errorCode(_ body: () throws -> Void) -> ProtocolError.Code? {
    do {
        try body()
        return nil
    } catch let error as ProtocolError {
        return error.code
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

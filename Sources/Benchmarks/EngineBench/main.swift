// vigil-engine-bench: the lifecycle engine's own cost per wake cycle, with
// many apps, as the daemon drives it (the earliest deadline asked for after
// every call, for its one timer). Pure computation with a host that does
// nothing, so instruction counts are exact and repeatable:
//
//   swift build -c release --product vigil-engine-bench
//   .build/release/vigil-engine-bench [--apps N ...] [--rounds R]
//   valgrind --tool=callgrind .build/release/vigil-engine-bench --apps 1000 --rounds 1
//
// Prints, per number of apps: engine CPU per wake cycle (event delivered to a
// suspended app, which is woken; acknowledged; finished; suspended again) and
// per nextDeadline. Asserts nothing.
import Foundation
import VigilLifecycle
import VigilProtocol

final class SilentHost: LifecycleHost {
    var nextPID: Int32 = 1000
    func startProcess(of manifest: AppManifest, launch: LaunchOptions) throws -> Int32 {
        nextPID += 1
        return nextPID
    }
    func freeze(_ app: String) {}
    func thaw(_ app: String) {}
    func kill(_ app: String) {}
    func send(_ message: OutboundMessage, to app: String) {}
    func record(_ decision: Decision) {}
    func stateChanged(_ app: String, from old: AppState, to new: AppState) {}
}

func cpuNanoseconds() -> UInt64 {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return UInt64(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000_000
        + UInt64(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1_000
}

var counts: [Int] = []
var rounds = 3
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--apps": if let n = arguments.popFirst().flatMap(Int.init) { counts.append(n) }
    case "--rounds": rounds = arguments.popFirst().flatMap(Int.init) ?? rounds
    default:
        FileHandle.standardError.write("usage: vigil-engine-bench [--apps N ...] [--rounds R]\n".data(using: .utf8)!)
        exit(64)
    }
}
if counts.isEmpty { counts = [1, 100, 1000] }

print("engine cost per wake cycle (deliver to a suspended app, acknowledge, finish; nextDeadline after each call)")
for count in counts {
    let host = SilentHost()
    let engine = LifecycleEngine(timings: Timings(), queueLimit: 1000, host: host)
    let ids = (0..<count).map { String(format: "org.example.app%05d", $0) }
    engine.updateManifests(Dictionary(uniqueKeysWithValues: ids.map {
        ($0, AppManifest(id: $0, exec: ["/bin/true"], backgroundModes: [.externalAccessory]))
    }))
    var now: UInt64 = 1_000_000_000_000
    for id in ids {
        try engine.launch(id, now: now)
        _ = engine.connected(id, now: now)
        try engine.moveToBackground(id, now: now)
    }
    now += 10_000_000_000
    engine.advance(to: now)  // every app suspended after its grace period
    var deadlineCalls = 0
    var sink: UInt64 = 0
    let started = cpuNanoseconds()
    for _ in 0..<rounds {
        for id in ids {
            now += 1_000
            let (seq, _) = try engine.deliver(QueuedEvent(kind: "test", wakeMode: .externalAccessory), to: id, now: now)
            sink &+= engine.nextDeadline ?? 0
            engine.acknowledge(id, upTo: seq, now: now)
            sink &+= engine.nextDeadline ?? 0
            engine.finishedProcessing(id, now: now)
            sink &+= engine.nextDeadline ?? 0
            deadlineCalls += 3
        }
    }
    let spent = cpuNanoseconds() - started
    let wakes = rounds * count
    let suspended = engine.apps.values.filter { $0.state == .suspended }.count
    print(String(format: "  %5d apps: %8.2f µs per wake cycle (%d wakes, %d nextDeadline calls, %.3f s CPU; %d of %d suspended after) %llu",
                 count, Double(spent) / Double(wakes) / 1000, wakes, deadlineCalls, Double(spent) / 1e9, suspended, count, sink % 10))
}

import Foundation
import Glibc
import VigilKit
import VigilSystem

// The scale phase: N apps under one vigild, all suspended; a round wakes each
// once (a `wake` request per app, sent back to back) and ends when every app
// is suspended again. vigild's CPU per round is the figure (issue 12: 1000
// apps woken and re-suspended in under 1 s of daemon CPU), with its CPU per
// wake beside the single-app figure to show whether a wake's cost depends on
// the number of apps.
//
// Suspension is read from outside (`cgroup.events`, or state `T` with
// signals), never by asking vigild, whose answers would count as its CPU.

struct ScaleResult {
    var apps: Int
    var mechanism: String
    /// Per round: vigild's CPU (ms), wall time (ms), and the wakes' dispositions.
    var rounds: [(cpuMs: Double, wallMs: Double, dispositions: [String: Int])]
}

func scaleRun(apps: Int, rounds: Int, vigild: String?) async throws -> ScaleResult {
    let mechanism = getuid() == 0 && Cgroup.unifiedMountPoint() != nil ? "cgroup" : "signal"
    let daemon = try await BenchDaemon(
        binaries: binaries, vigild: vigild, suspension: mechanism, bluetooth: false, bus: .absent, label: "scale-\(apps)",
        apps: apps, timings: "suspend-grace = 0.5")
    defer { daemon.stop() }
    let timeout = Duration.seconds(30 + apps / 10)
    // Not `apps` (one reply for 1000 apps exceeds the 64 KiB header limit):
    // each action's reply names the app's pid, and the apps' record files say
    // when each has connected.
    var pids: [String: Int32] = [:]
    for id in daemon.appIDs {
        let pid = try await daemon.control.perform(.launch, app: id).pid ?? 0
        guard pid > 0 else { throw BenchError("\(id) has no process after its launch") }
        daemon.track(pid: pid)
        pids[id] = pid
    }
    try await waitFor("\(apps) apps to connect", timeout: timeout) {
        launches(in: daemon.recordPath) + launches(in: daemon.scaleRecordPath) >= apps
    }
    for id in daemon.appIDs { _ = try await daemon.control.perform(.background, app: id) }
    try await waitForAll(daemon, pids: pids, timeout: timeout)
    var results: [(cpuMs: Double, wallMs: Double, dispositions: [String: Int])] = []
    for round in 1...rounds {
        let cpuBefore = cpuNanoseconds(of: daemon.pid)
        let start = MonotonicInstant.now()
        var dispositions: [String: Int] = [:]
        for id in daemon.appIDs {
            let accepted = try await daemon.control.wake(app: id, kind: "bench", attributes: ["round": .number(Double(round))], payload: [])
            dispositions[accepted.disposition, default: 0] += 1
        }
        try await waitForAll(daemon, pids: pids, timeout: timeout)
        let wall = Double(MonotonicInstant.now().nanoseconds - start.nanoseconds) / 1_000_000
        usleep(50_000)  // vigild notes the last freeze (cgroup.events) after the kernel does
        let cpu = Double(cpuNanoseconds(of: daemon.pid) - cpuBefore) / 1_000_000
        let summary = dispositions.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        print(String(format: "    round %d: vigild CPU %.1f ms (%.1f µs per wake), %.0f ms wall", round, cpu, cpu * 1000 / Double(apps), wall)
            + " (\(summary))")
        results.append((cpu, wall, dispositions))
    }
    daemon.succeeded()
    return ScaleResult(apps: apps, mechanism: mechanism, rounds: results)
}

/// How many apps have recorded their launch (connected) in a record file.
private func launches(in path: String) -> Int {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
    return text.split(separator: "\n").filter { $0.contains(#""kind":"launch""#) }.count
}

/// Waits until every app's process is suspended, seen from outside.
private func waitForAll(_ daemon: BenchDaemon, pids: [String: Int32], timeout: Duration) async throws {
    let root = daemon.cgroupRoot.map { Cgroup(path: $0) }
    var pending = Array(pids)
    let deadline = MonotonicInstant.now().advanced(by: timeout)
    while !pending.isEmpty {
        pending.removeAll { id, pid in
            if let root { return (try? root.child(id).isFrozen()) ?? false }
            return ProcessControl.processState(pid) == "T"
        }
        guard !pending.isEmpty else { return }
        guard MonotonicInstant.now() < deadline else {
            throw BenchError("timed out waiting for \(pending.count) of \(pids.count) apps to be suspended (e.g. \(pending[0].key))")
        }
        usleep(5_000)
    }
}

func scaleReport(_ results: [ScaleResult]) -> String {
    var lines = ["scale: every app woken once per round and suspended again (vigild CPU, all threads):",
                 "  apps  mechanism  rounds  CPU per round ms (min-max)  CPU per wake µs (min-max)  wall per round ms (min-max)"]
    for result in results {
        let cpu = result.rounds.map(\.cpuMs)
        let wall = result.rounds.map(\.wallMs)
        let perWake = cpu.map { $0 * 1000 / Double(result.apps) }
        lines.append(String(format: "  %4d  ", result.apps) + result.mechanism.padding(toLength: 9, withPad: " ", startingAt: 0) + String(
            format: "  %6d  %10.1f (%.1f-%.1f)  %12.1f (%.1f-%.1f)  %12.0f (%.0f-%.0f)",
            result.rounds.count, median(cpu), cpu.min() ?? .nan, cpu.max() ?? .nan, median(perWake), perWake.min() ?? .nan,
            perWake.max() ?? .nan, median(wall), wall.min() ?? .nan, wall.max() ?? .nan))
    }
    return lines.joined(separator: "\n")
}

private func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[sorted.count / 2]
}

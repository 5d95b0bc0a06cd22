import Foundation
import Glibc
import VigilKit
import VigilProtocol
import VigilSystem

// Wake latency and idle cost of vigild, measured against a real daemon and the
// real sample app. Prints figures; asserts nothing. See docs/performance.md.
//
//   swift build -c release && sudo .build/release/vigil-bench [--wakes N] [--idle-seconds S]
//       [--settle-seconds S] [--vigild PATH] [--phases baseline,cgroup,signal,floor] [--apps N ...] [--rounds R]
//       [--floor-writes WAKE,ACK] [--floor-threads N] [--floor-driver PATH]
//
// --wakes 0 skips the latency runs, --idle-seconds 0 the idle ones; --vigild
// measures another build of vigild (e.g. an older one) with this benchmark;
// --phases picks latency phases (callgrind runs one at a time); --apps N runs
// the scale phase with N apps (each woken once per round, R rounds); the
// floor phase runs `vigil-wake-floor` (a wake's system calls and nothing else:
// WakeFloor.swift) with WAKE journal appends in the wake's turn and ACK at the
// app's ack (default 1,0) and a responder of N threads (default 6, as the
// demo app), --floor-driver another driver (e.g. under strace).

struct Options {
    var wakes = 1000
    var idleSeconds = 30
    var settleSeconds = 10
    var vigild: String?
    var phases: Set<String> = ["baseline", "cgroup", "signal"]
    var floorWrites = WakeFloor.Writes(wake: 1, ack: 0)
    var floorThreads = 6
    var floorDriver: String?
    var scaleApps: [Int] = []
    var rounds = 3

    static let usageText = "usage: vigil-bench [--wakes N] [--idle-seconds S] [--settle-seconds S] [--vigild PATH]"
        + " [--phases baseline,cgroup,signal,floor] [--apps N ...] [--rounds R] [--floor-writes WAKE,ACK] [--floor-threads N] [--floor-driver PATH]\n"

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var arguments = arguments[...]
        while let argument = arguments.popFirst() {
            switch argument {
            case "--wakes": options.wakes = Int(arguments.popFirst() ?? "") ?? options.wakes
            case "--idle-seconds": options.idleSeconds = Int(arguments.popFirst() ?? "") ?? options.idleSeconds
            case "--settle-seconds": options.settleSeconds = Int(arguments.popFirst() ?? "") ?? options.settleSeconds
            case "--vigild": options.vigild = arguments.popFirst()
            case "--phases":
                options.phases = Set((arguments.popFirst() ?? "").split(separator: ",").map(String.init))
                guard options.phases.isSubset(of: ["baseline", "cgroup", "signal", "floor"]) else { usage() }
            case "--floor-writes":
                let counts = (arguments.popFirst() ?? "").split(separator: ",").compactMap { Int($0) }
                guard counts.count == 2, counts[0] >= 1, counts[1] >= 0 else { usage() }
                options.floorWrites = WakeFloor.Writes(wake: counts[0], ack: counts[1])
            case "--floor-threads":
                guard let threads = arguments.popFirst().flatMap(Int.init), threads > 0 else { usage() }
                options.floorThreads = threads
            case "--floor-driver": options.floorDriver = arguments.popFirst()
            case "--apps":
                guard let count = arguments.popFirst().flatMap(Int.init), count > 0 else { usage() }
                options.scaleApps.append(count)
            case "--rounds":
                guard let rounds = arguments.popFirst().flatMap(Int.init), rounds > 0 else { usage() }
                options.rounds = rounds
            default: usage()
            }
        }
        return options
    }

    static func usage() -> Never {
        FileHandle.standardError.write(usageText.data(using: .utf8)!)
        exit(2)
    }
}
let binaries = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path

struct Figures {
    var name: String
    var samples: [Double]  // microseconds
    /// vigild's CPU time (every thread, user + system) per event of the phase, µs.
    var daemonCPUPerEvent: Double = .nan

    func percentile(_ p: Double) -> Double {
        let sorted = samples.sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
    }
}

/// Is the app's process stopped from running (frozen cgroup, or SIGSTOP's `T`)?
func isSuspended(_ daemon: BenchDaemon, pid: Int32) -> Bool {
    if let root = daemon.cgroupRoot {
        return (try? Cgroup(path: root).child(BenchDaemon.appID).isFrozen()) ?? false
    }
    return ProcessControl.processState(pid) == "T"
}

func waitFor(_ what: String, timeout: Duration = .seconds(20), _ condition: () async throws -> Bool) async throws {
    let deadline = MonotonicInstant.now().advanced(by: timeout)
    while try await !condition() {
        guard MonotonicInstant.now() < deadline else { throw BenchError("timed out waiting for \(what)") }
        usleep(200)
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Sends `count` test events, one at a time, each stamped with the send time;
/// `suspended` waits for re-suspension between events so every one is a wake.
func measure(_ name: String, daemon: BenchDaemon, count: Int, suspended: Bool) async throws -> Figures {
    let reader = RecordReader(path: daemon.recordPath)
    _ = reader.newRecords()
    let pid = try await daemon.appPID()
    var samples: [Double] = []
    var dispositions: [String: Int] = [:]
    if suspended { try await waitFor("suspension") { isSuspended(daemon, pid: pid) } }
    let cpuBefore = cpuNanoseconds(of: daemon.pid)
    let ticksBefore = cpuTicks(of: daemon.pid)
    for _ in 0..<count {
        if suspended { try await waitFor("suspension") { isSuspended(daemon, pid: pid) } }
        let sent = MonotonicInstant.now().nanoseconds
        let accepted = try await daemon.control.wake(app: BenchDaemon.appID, kind: "bench", attributes: ["sent": .number(Double(sent))], payload: [])
        dispositions[accepted.disposition, default: 0] += 1
        var latency: Double?
        try await waitFor("event \(accepted.seq)") {
            for record in reader.newRecords() where (record["seq"] as? Int).map(UInt64.init) == accepted.seq {
                latency = (record["latencyNs"] as? Double ?? (record["latencyNs"] as? Int).map(Double.init)).map { $0 / 1000 }
            }
            return latency != nil
        }
        samples.append(latency!)
    }
    // The last event's cycle ends with the app suspended again (or, awake, its ack handled).
    if suspended { try await waitFor("suspension") { isSuspended(daemon, pid: pid) } } else { usleep(20_000) }
    let cpu = Double(cpuNanoseconds(of: daemon.pid) - cpuBefore) / 1000 / Double(count)
    let split = userShare(ticksBefore, cpuTicks(of: daemon.pid))
    let summary = dispositions.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    print("  \(name): \(count) events (\(summary)), vigild CPU \(String(format: "%.1f", cpu)) µs per event\(split)")
    return Figures(name: name, samples: samples, daemonCPUPerEvent: cpu)
}

/// User and system CPU time of every thread of `pid` so far, in clock ticks
/// (`/proc/PID/task/TID/stat`, fields 14 and 15): coarse (10 ms), so only
/// the split of a long phase's `cpuNanoseconds` between user space and the
/// kernel is read from it.
func cpuTicks(of pid: Int32) -> (user: UInt64, system: UInt64) {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    var total: (user: UInt64, system: UInt64) = (0, 0)
    for tid in tasks {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/stat", encoding: .utf8),
              let end = text.lastIndex(of: ")") else { continue }
        // Fields after the name (which may hold spaces): state is field 3, utime 14, stime 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { continue }
        total.user += user
        total.system += system
    }
    return total
}

/// The share of user space in the CPU time between two `cpuTicks` readings, as text.
func userShare(_ before: (user: UInt64, system: UInt64), _ after: (user: UInt64, system: UInt64)) -> String {
    let user = after.user - before.user, system = after.system - before.system
    guard user + system > 0 else { return "" }
    return String(format: " (%.0f%% user, %.0f%% kernel: %llu ticks)", 100 * Double(user) / Double(user + system),
                  100 * Double(system) / Double(user + system), user + system)
}

/// CPU time of every thread of `pid` so far (user + system, ns), from the
/// scheduler's own accounting (`/proc/PID/task/TID/schedstat`, nanoseconds),
/// not the 10 ms ticks of `/proc/PID/stat`.
func cpuNanoseconds(of pid: Int32) -> UInt64 {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    var total: UInt64 = 0
    for tid in tasks {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/schedstat", encoding: .utf8) else { continue }
        total += text.split(separator: " ").first.flatMap { UInt64($0) } ?? 0
    }
    return total
}

/// Context switches (voluntary + involuntary) per thread of `pid`, keyed by "name/tid".
func contextSwitches(of pid: Int32) -> [String: Int] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    var result: [String: Int] = [:]
    for tid in tasks {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8) else { continue }
        var name = tid
        var switches = 0
        for line in status.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count == 2 else { continue }
            if fields[0] == "Name" { name = fields[1] }
            if fields[0].hasSuffix("ctxt_switches") { switches += Int(fields[1]) ?? 0 }
        }
        result["\(name)/\(tid)"] = switches
    }
    return result
}

/// One idle configuration: Bluetooth on or off, a system bus or none.
struct IdleConfiguration {
    var bluetooth: Bool
    var bus: BenchDaemon.Bus

    var name: String {
        "Bluetooth \(bluetooth ? "on" : "off"), " + (bus == .present ? "system bus (no bluetoothd)" : "no system bus")
    }

    static let all = [
        IdleConfiguration(bluetooth: false, bus: .absent), IdleConfiguration(bluetooth: false, bus: .present),
        IdleConfiguration(bluetooth: true, bus: .absent), IdleConfiguration(bluetooth: true, bus: .present),
    ]
}

struct IdleResult {
    var configuration: IdleConfiguration
    var seconds: Int
    /// Context switches per thread ("name/tid"), with a note for threads that came or went.
    var threads: [(thread: String, switches: Int, note: String)]
    var total: Int { threads.reduce(0) { $0 + $1.switches } }
}

/// Idle cost: a fresh daemon in `configuration`, the app launched, sent to the
/// background and suspended; after `settle` seconds, the context switches of
/// every daemon thread over `seconds` with nothing to do. Threads that exist
/// at only one end (Dispatch retiring idle workers) count from 0 or up to
/// their last reading.
func idleRun(_ configuration: IdleConfiguration, seconds: Int, settle: Int, vigild: String?) async throws -> IdleResult {
    let mechanism = getuid() == 0 && Cgroup.unifiedMountPoint() != nil ? "cgroup" : "signal"
    let daemon = try await BenchDaemon(
        binaries: binaries, vigild: vigild, suspension: mechanism, bluetooth: configuration.bluetooth, bus: configuration.bus,
        label: "idle-\(configuration.bluetooth ? "bt" : "nobt")-\(configuration.bus.rawValue)")
    defer { daemon.stop() }
    _ = try await daemon.control.perform(.launch, app: BenchDaemon.appID)
    try await waitFor("the app to become active") {
        try await daemon.control.apps().first { $0.id == BenchDaemon.appID }?.state == .active
    }
    _ = try await daemon.control.perform(.background, app: BenchDaemon.appID)
    let pid = try await daemon.appPID()
    try await waitFor("suspension") { isSuspended(daemon, pid: pid) }
    // Past the start: the state file's coalesced write, retired workers.
    try await Task.sleep(for: .seconds(settle))
    let before = contextSwitches(of: daemon.pid)
    try await Task.sleep(for: .seconds(seconds))
    let after = contextSwitches(of: daemon.pid)
    var threads: [(thread: String, switches: Int, note: String)] = []
    for thread in Set(before.keys).union(after.keys).sorted() {
        let delta = (after[thread] ?? before[thread] ?? 0) - (before[thread] ?? 0)
        let note = after[thread] == nil ? " (thread exited)" : before[thread] == nil ? " (new thread)" : ""
        threads.append((thread, delta, note))
    }
    daemon.succeeded()
    return IdleResult(configuration: configuration, seconds: seconds, threads: threads)
}

func idleReport(_ results: [IdleResult]) -> String {
    guard let seconds = results.first?.seconds else { return "" }
    var lines = ["idle wake-ups over \(seconds) s, app suspended (context switches of every vigild thread):",
                 "  configuration                                  threads  switches  per second"]
    for result in results {
        lines.append("  " + result.configuration.name.padding(toLength: 46, withPad: " ", startingAt: 0)
            + String(format: " %7d  %8d  %10.2f", result.threads.count, result.total, Double(result.total) / Double(seconds)))
        for thread in result.threads {
            lines.append("      \(thread.thread.padding(toLength: 28, withPad: " ", startingAt: 0)) \(thread.switches)\(thread.note)")
        }
    }
    return lines.joined(separator: "\n")
}

func run(_ options: Options) async throws {
    let wakes = options.wakes
    print("vigil-bench: \(wakes) wakes per mechanism, \(options.idleSeconds) s idle per configuration; binaries in \(binaries)"
        + (options.vigild.map { "; vigild: \($0)" } ?? ""))
    var figures: [Figures] = []
    let phases = options.phases
    for mechanism in ["cgroup", "signal"] where wakes > 0 && (phases.contains(mechanism) || (mechanism == "cgroup" && phases.contains("baseline"))) {
        let daemon = try await BenchDaemon(binaries: binaries, vigild: options.vigild, suspension: mechanism)
        defer { daemon.stop() }  // also on errors; Teardown runs it on a signal
        let status = try await daemon.control.status()
        guard status.suspension.rawValue == mechanism else {
            throw BenchError("asked for \(mechanism) suspension, the daemon uses \(status.suspension.rawValue): \(status.suspensionDetail)")
        }
        _ = try await daemon.control.perform(.launch, app: BenchDaemon.appID)
        try await waitFor("the app to become active") {
            try await daemon.control.apps().first { $0.id == BenchDaemon.appID }?.state == .active
        }
        _ = try await daemon.appPID()
        if mechanism == "cgroup" && phases.contains("baseline") {
            figures.append(try await measure("baseline: app active (no wake)", daemon: daemon, count: wakes, suspended: false))
        }
        if phases.contains(mechanism) {
            _ = try await daemon.control.perform(.background, app: BenchDaemon.appID)
            figures.append(try await measure(
                "wake from \(mechanism == "cgroup" ? "cgroup freezer" : "SIGSTOP fallback")", daemon: daemon, count: wakes, suspended: true))
        }
        daemon.succeeded()
    }
    if wakes > 0 && phases.contains("floor") {
        figures += try await measureFloor(binaries: binaries, driver: options.floorDriver, writes: options.floorWrites, threads: options.floorThreads, count: wakes)
    }
    var scale: [ScaleResult] = []
    for apps in options.scaleApps {
        print("  scale: \(apps) apps, \(options.rounds) rounds")
        scale.append(try await scaleRun(apps: apps, rounds: options.rounds, vigild: options.vigild))
    }
    var idle: [IdleResult] = []
    for configuration in IdleConfiguration.all where options.idleSeconds > 0 {
        print("  idle: \(configuration.name)")
        idle.append(try await idleRun(configuration, seconds: options.idleSeconds, settle: options.settleSeconds, vigild: options.vigild))
    }
    print("")
    if !figures.isEmpty {
        print("wake latency, from the event's send to the app's handler (µs), and vigild's (the floor's driver's) CPU per event:")
        print("  scenario                              p50       p99       max    p50 vs baseline  vigild CPU µs")
        let baseline = figures.first { $0.name.hasPrefix("baseline") }?.percentile(0.5) ?? .nan
        for figure in figures {
            let numbers = String(
                format: "%8.0f  %8.0f  %8.0f    %.2fx            %7.1f", figure.percentile(0.5), figure.percentile(0.99),
                figure.samples.max() ?? .nan, figure.percentile(0.5) / baseline, figure.daemonCPUPerEvent)
            print("  " + figure.name.padding(toLength: 34, withPad: " ", startingAt: 0) + " " + numbers)
        }
        print(floorReport(figures))
    }
    if !scale.isEmpty { print(scaleReport(scale)) }
    if !idle.isEmpty { print(idleReport(idle)) }
}

/// Ends what the run left behind (normally nothing: each daemon's stop ends
/// vigild and its app) and says so if it found anything.
func sweep() {
    let leftovers = Teardown.finish()
    if !leftovers.isEmpty {
        FileHandle.standardError.write("vigil-bench: killed leftover processes: \(leftovers.joined(separator: ", "))\n".data(using: .utf8)!)
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
Teardown.install()
do {
    try await run(options)
    sweep()
} catch {
    // A Ctrl-C reaches vigild too, which may end the measurement before the
    // signal handler runs: give it a moment. After a signal, the error is the
    // interrupted measurement's; the handler cleans up and exits.
    usleep(200_000)
    while Teardown.interruptedBy != nil { sleep(60) }
    sweep()
    FileHandle.standardError.write("vigil-bench: \(error)\n".data(using: .utf8)!)
    exit(1)
}

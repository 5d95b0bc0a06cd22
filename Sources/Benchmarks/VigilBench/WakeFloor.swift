import Foundation
import Glibc
import VigilSystem

/// The floor of a wake: `vigil-wake-floor` (C, `Sources/Benchmarks/WakeFloor`),
/// which does a wake cycle's system calls and nothing else, driven as the
/// other phases drive vigild. Its driver's CPU per cycle is what no daemon
/// could go below on this machine; vigild's CPU per wake minus it is
/// vigild's own cost.
///
/// Like `BenchDaemon`, everything it starts ends with `stop()`, which
/// `Teardown` also runs on an error or a signal: the driver is killed, the
/// responder's cgroup killed and removed, the scratch directory removed.
final class WakeFloor: @unchecked Sendable {
    let directory: String
    let recordPath: String
    /// The responder's cgroup (the driver creates it below `cgroupRoot`).
    let cgroup: String
    private let cgroupRoot: String
    private let process: SpawnedProcess
    private var socket: Int32 = -1
    private var nextSeq: UInt64 = 1
    private var teardownID = 0
    private let stopped = Locked(false)

    /// Journal appends per cycle: in the wake's turn, and at the app's ack.
    struct Writes: CustomStringConvertible {
        var wake: Int
        var ack: Int
        var description: String { "\(wake) journal append\(wake == 1 ? "" : "s") at the wake, \(ack) at the ack" }
    }

    init(binaries: String, driver: String?, writes: Writes, threads: Int) async throws {
        guard let mount = Cgroup.unifiedMountPoint(), getuid() == 0 else {
            throw BenchError("the floor phase needs root and a cgroup v2 tree (it freezes a cgroup)")
        }
        let name = "vigil-bench-\(getpid())-floor"
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
        recordPath = directory + "/record.jsonl"
        cgroupRoot = mount + "/" + name
        cgroup = cgroupRoot + "/responder"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/state", withIntermediateDirectories: true)
        _ = try Cgroup.create(cgroupRoot)
        let log = open(directory + "/floor.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw BenchError("cannot create \(directory)/floor.log") }
        defer { close(log) }
        let control = directory + "/floor.sock"
        process = try ProcessSpawner.spawn(SpawnRequest(
            executable: driver ?? binaries + "/vigil-wake-floor",
            arguments: ["driver", control, cgroup, directory + "/state", recordPath, "\(writes.wake)", "\(writes.ack)", "\(threads)"],
            output: log))
        teardownID = Teardown.add { [self] in stop() }
        socket = try await Self.connect(control, driver: process, log: directory + "/floor.log")
    }

    private static func connect(_ path: String, driver: SpawnedProcess, log: String) async throws -> Int32 {
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while true {
            let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                Array(path.utf8.prefix(raw.count - 1)).withUnsafeBytes { raw.copyMemory(from: $0) }
            }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if connected == 0 { return fd }
            close(fd)
            if let status = try? ProcessControl.reap(driver) {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                throw BenchError("vigil-wake-floor ended before it listened (\(status)): \(text)")
            }
            guard MonotonicInstant.now() < deadline else { throw BenchError("vigil-wake-floor did not listen on \(path) within 10 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    var pid: Int32 { process.pid }

    func isFrozen() -> Bool { (try? Cgroup(path: cgroup).isFrozen()) ?? false }

    /// Sends one request (a wake, or with `awake` an event to the running
    /// responder) stamped `sent`, and reads the driver's reply. Returns the seq.
    func request(sent: UInt64, awake: Bool) throws -> UInt64 {
        let seq = nextSeq
        nextSeq += 1
        // A frame: length (UInt32 LE), then kind, seq, sent (packed, LE), padded to 70 bytes like vigild's `wake` request.
        var frame = [UInt8](repeating: 0, count: 70)
        withUnsafeBytes(of: UInt32(66).littleEndian) { frame.replaceSubrange(0..<4, with: $0) }
        frame[4] = awake ? UInt8(ascii: "A") : UInt8(ascii: "W")
        withUnsafeBytes(of: seq.littleEndian) { frame.replaceSubrange(5..<13, with: $0) }
        withUnsafeBytes(of: sent.littleEndian) { frame.replaceSubrange(13..<21, with: $0) }
        guard frame.withUnsafeBytes({ Glibc.write(socket, $0.baseAddress, $0.count) }) == frame.count else {
            throw BenchError("cannot write to vigil-wake-floor: \(String(cString: strerror(errno)))")
        }
        // The reply: one 70-byte frame; read it whole.
        var reply = [UInt8](repeating: 0, count: 70)
        var got = 0
        while got < reply.count {
            let n = reply.withUnsafeMutableBytes { Glibc.read(socket, $0.baseAddress! + got, $0.count - got) }
            guard n > 0 else { throw BenchError("vigil-wake-floor closed its socket (see \(directory)/floor.log)") }
            got += n
        }
        return seq
    }

    /// Ends the driver (closing its socket ends it; SIGKILL after 5 s), kills
    /// and removes the responder's cgroup, removes the scratch directory.
    func stop() {
        guard stopped.withLock({ state in defer { state = true }; return !state }) else { return }
        Teardown.remove(teardownID)
        if socket >= 0 { close(socket) }
        let deadline = MonotonicInstant.now().advanced(by: .seconds(5))
        while (try? ProcessControl.reap(process)) == nil {
            if MonotonicInstant.now() > deadline { _ = try? ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd) }
            usleep(10_000)
        }
        close(process.pidfd)
        Cgroup(path: cgroupRoot).removeWithChildren()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// The floor phase: `count` cycles with the responder awake (the floor of the
/// no-wake baseline), then `count` wakes from the freezer, measured as
/// `measure` measures vigild (latency to the responder's handler, the
/// driver's CPU per cycle, each wake started once `frozen 1` is seen), with
/// a responder of `threads` threads.
func measureFloor(binaries: String, driver: String?, writes: WakeFloor.Writes, threads: Int, count: Int) async throws -> [Figures] {
    let floor = try await WakeFloor(binaries: binaries, driver: driver, writes: writes, threads: threads)
    defer { floor.stop() }
    var figures: [Figures] = []
    for awake in [true, false] {
        let reader = RecordReader(path: floor.recordPath)
        _ = reader.newRecords()
        var samples: [Double] = []
        if !awake {
            // One cycle unmeasured: the responder runs until a wake's end freezes it.
            let seq = try floor.request(sent: MonotonicInstant.now().nanoseconds, awake: false)
            try await waitFor("the floor's event \(seq)") { reader.newRecords().contains { ($0["seq"] as? Int) == Int(seq) } }
            try await waitFor("the floor's responder frozen") { floor.isFrozen() }
        }
        let cpuBefore = cpuNanoseconds(of: floor.pid)
        let ticksBefore = cpuTicks(of: floor.pid)
        for _ in 0..<count {
            if !awake { try await waitFor("the floor's responder frozen") { floor.isFrozen() } }
            let seq = try floor.request(sent: MonotonicInstant.now().nanoseconds, awake: awake)
            var latency: Double?
            try await waitFor("the floor's event \(seq)") {
                for record in reader.newRecords() where (record["seq"] as? Int).map(UInt64.init) == seq {
                    latency = (record["latencyNs"] as? Int).map { Double($0) / 1000 }
                }
                return latency != nil
            }
            samples.append(latency!)
        }
        if awake { usleep(20_000) } else { try await waitFor("the floor's responder frozen") { floor.isFrozen() } }
        let cpu = Double(cpuNanoseconds(of: floor.pid) - cpuBefore) / 1000 / Double(count)
        let split = userShare(ticksBefore, cpuTicks(of: floor.pid))
        let name = awake ? "floor: awake (no wake)" : "floor: wake from cgroup freezer"
        print("  \(name): \(count) events (\(writes), \(threads) responder thread\(threads == 1 ? "" : "s")), driver CPU \(String(format: "%.1f", cpu)) µs per event\(split)")
        figures.append(Figures(name: name, samples: samples, daemonCPUPerEvent: cpu))
    }
    return figures
}

/// vigild against the floor of the same run: the floor's own wake/awake
/// latency ratio (the least a wake can cost in latency here) and vigild's CPU
/// per event above the floor's. Empty without both.
func floorReport(_ figures: [Figures]) -> String {
    func named(_ prefix: String) -> Figures? { figures.first { $0.name.hasPrefix(prefix) } }
    guard let floorAwake = named("floor: awake"), let floorWake = named("floor: wake") else { return "" }
    var lines = [String(
        format: "  the floor's wake p50 is %.2fx its awake p50; a wake's least CPU here: %.1f µs (awake: %.1f µs)",
        floorWake.percentile(0.5) / floorAwake.percentile(0.5), floorWake.daemonCPUPerEvent, floorAwake.daemonCPUPerEvent)]
    if let wake = named("wake from cgroup") {
        lines.append(String(
            format: "  vigild above the floor, cgroup wake: %.1f µs of CPU (%.2fx the floor), p50 +%.0f µs",
            wake.daemonCPUPerEvent - floorWake.daemonCPUPerEvent, wake.daemonCPUPerEvent / floorWake.daemonCPUPerEvent,
            wake.percentile(0.5) - floorWake.percentile(0.5)))
    }
    if let baseline = named("baseline") {
        lines.append(String(
            format: "  vigild above the floor, no wake: %.1f µs of CPU (%.2fx the floor), p50 +%.0f µs",
            baseline.daemonCPUPerEvent - floorAwake.daemonCPUPerEvent, baseline.daemonCPUPerEvent / floorAwake.daemonCPUPerEvent,
            baseline.percentile(0.5) - floorAwake.percentile(0.5)))
    }
    return lines.joined(separator: "\n")
}

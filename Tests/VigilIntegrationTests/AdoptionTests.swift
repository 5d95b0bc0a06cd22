import Foundation
import Glibc
import Testing
import VigilKit
import VigilSystem

/// A daemon that dies or stops leaves its apps behind: the next one adopts
/// them (or relaunches them for what they had not acknowledged), and a stop
/// with `on-stop = "terminate"` leaves nothing running. Each test runs with the
/// cgroup freezer and with the signal fallback.
extension Integration {
    @Suite("adoption after a daemon crash or stop, in both suspension modes")
    struct Adoption {
        static let modes = ["cgroup", "signal"]

        /// The demo app works `work` seconds before acknowledging an event: long
        /// enough to be suspended holding it after the 0.5 s grace.
        static func options(_ mode: String) -> DaemonOptions {
            DaemonOptions(suspension: mode).with(["suspend-grace": 0.5, "wake-budget": 6])
        }

        static let work = "2"

        /// 1. SIGKILL of vigild while an app is suspended with an unacknowledged
        /// event: the next daemon adopts the same process, wakes it, and the
        /// event reaches it once more, redelivered; nothing is left stopped.
        @Test(arguments: modes) func sigkillWhileSuspendedWithPendingEvents(mode: String) async {
            guard mode == "signal" || Environment.canUseCgroups else { return }
            let id = "org.vigil.test.adopt-\(mode)"
            await DaemonHarness.run(Self.options(mode), apps: [AppSpec(id, ["VIGIL_DEMO_WORK_SECONDS": Self.work])]) { h in
                let (pid, seq) = try await h.suspendHoldingAnEvent(id, mark: "pending-\(mode)")

                let killed = MonotonicClock.now
                try await h.killDaemon()
                await h.expect(h.isAlive(pid) && h.isStoppedFromOutside(id, pid: pid),
                               "\(id) (pid \(pid)) should be alive and stopped after the SIGKILL: /proc state \(h.processState(pid).map(String.init) ?? "gone"), cgroup.events \(h.cgroupEvents(id))")

                try await h.startDaemon()
                let adopted = try await h.info(id)
                await h.expect(adopted.pid == pid && adopted.launchReason == .adopted,
                               "not adopted: pid \(adopted.pid.map(String.init) ?? "nil") (expected \(pid)), launchReason \(adopted.launchReason.map(\.rawValue) ?? "nil")")
                let log = try await h.decisions(id)
                let adopt = log.firstIndex { $0.action == "adopt" }
                let wake = log.firstIndex { $0.action == "wake" && $0.reason.contains("restored") }
                await h.expect(adopt != nil && wake != nil && adopt! < wake!,
                               "expected `adopt` then a `wake` for the restored event: \(log.map { "\($0.action): \($0.reason)" })")

                try await h.waitUntilDelivered(id, seq: seq)
                print("adoption (\(mode)): restored event \(seq) handled again \(String(format: "%.2f", seconds(since: killed))) s after the SIGKILL of vigild")
                let copies = h.records(id).events.filter { $0.seq == seq }
                await h.expect(copies.count == 2 && copies.filter { $0.redelivered == true }.count == 1 && copies.allSatisfy { $0.pid == pid },
                               "event \(seq) should reach pid \(pid) once before and once after the restart (redelivered): \(copies)")
                await h.expect(!h.records(id).of(pid: pid).kind("reconnected").isEmpty, "\(id) never reconnected")

                // A graceful stop (on-stop = leave) leaves it running, not stopped.
                h.stopDaemon()
                await h.expect(h.isAlive(pid) && !h.isStoppedFromOutside(id, pid: pid),
                               "after the graceful stop pid \(pid) is \(h.processState(pid).map(String.init) ?? "gone"), cgroup.events \(h.cgroupEvents(id))")
            }
        }

        /// 2. The app's process died while no daemon ran: the next daemon sees
        /// the recorded process gone and launches the app for its event.
        @Test(arguments: modes) func goneWhileDaemonDownIsRelaunched(mode: String) async {
            guard mode == "signal" || Environment.canUseCgroups else { return }
            let id = "org.vigil.test.gone-\(mode)"
            await DaemonHarness.run(Self.options(mode), apps: [AppSpec(id, ["VIGIL_DEMO_WORK_SECONDS": Self.work])]) { h in
                let (pid, seq) = try await h.suspendHoldingAnEvent(id, mark: "gone-\(mode)")
                try await h.killDaemon()
                _ = kill(pid, SIGKILL)
                try await h.waitUntil("pid \(pid) is gone", timeout: 10) { !h.isAlive(pid) }

                try await h.startDaemon()
                let relaunch = try await h.decisions(id, action: "relaunch")
                await h.expect(relaunch.contains { $0.reason.contains("daemon restart") },
                               "no relaunch after the restart: \(relaunch.map(\.reason))")
                try await h.waitUntilDelivered(id, seq: seq)
                let info = try await h.info(id)
                let copies = h.records(id).events.filter { $0.seq == seq && $0.pid != pid }
                await h.expect(copies.count == 1 && copies.first?.redelivered == true && info.pid != pid,
                               "event \(seq) should reach a new process once, redelivered: \(copies), pid now \(info.pid.map(String.init) ?? "nil")")
                let launch = h.records(id).launches.last
                await h.expect(launch?.reason == "redelivery", "relaunched with reason \(launch?.reason ?? "nil")")
            }
        }

        /// 3. SIGTERM with the default `on-stop = "leave"`: apps are resumed and
        /// left running, and the next daemon adopts them.
        @Test(arguments: modes) func gracefulStopLeavesAppsForAdoption(mode: String) async {
            guard mode == "signal" || Environment.canUseCgroups else { return }
            let id = "org.vigil.test.leave-\(mode)"
            await DaemonHarness.run(Self.options(mode), apps: [AppSpec(id)]) { h in
                let pid = try await h.launchAndSuspend(id)
                let status = h.stopDaemon()
                await h.expect(status == .exited(0), "vigild's stop ended with \(status.map { "\($0)" } ?? "no exit")")
                await h.expect(h.isAlive(pid) && !h.isStoppedFromOutside(id, pid: pid),
                               "after the stop pid \(pid) is \(h.processState(pid).map(String.init) ?? "gone"), cgroup.events \(h.cgroupEvents(id))")

                try await h.startDaemon()
                let adopted = try await h.info(id)
                await h.expect(adopted.pid == pid && adopted.launchReason == .adopted,
                               "not adopted: pid \(adopted.pid.map(String.init) ?? "nil") (expected \(pid)), launchReason \(adopted.launchReason.map(\.rawValue) ?? "nil")")
                // Managed again: suspended after the grace (perhaps before VigilKit's
                // reconnection backoff came round: a wake lets it finish), then woken
                // through its new connection.
                try await h.waitUntilSuspended(id, timeout: 15)
                let accepted = try await h.wake(id, payload: "after-restart")
                let handled = try await h.waitForEvent(id, seq: accepted.seq)
                await h.expect(handled.pid == pid && handled.redelivered == false, "event after the restart handled as \(handled)")
                await h.expect(!h.records(id).of(pid: pid).kind("reconnected").isEmpty, "\(id) never recorded its reconnection")
            }
        }

        /// 4. SIGTERM with `on-stop = "terminate"`: a connected app hears
        /// willTerminate and exits; one that cannot hear it is killed with its
        /// children; nothing of either is left running.
        @Test(arguments: modes) func stopWithTerminateLeavesNothingRunning(mode: String) async {
            guard mode == "signal" || Environment.canUseCgroups else { return }
            let demo = "org.vigil.test.term-\(mode)"
            let shell = "org.vigil.test.termsh-\(mode)"
            let apps = [AppSpec(demo), AppSpec(shell, exec: ["/bin/sh", "-c", "sleep 600 & sleep 600"])]
            await DaemonHarness.run(Self.options(mode), apps: apps) { h in
                try await h.setConfig("on-stop = \"terminate\"")
                let demoPid = try await h.launchAndSuspend(demo)
                try await h.perform(.launch, shell)
                guard let shellPid = try await h.info(shell).pid else { try await h.fail("\(shell) has no pid") }
                try await h.perform(.background, shell)
                try await h.waitUntilSuspended(shell, timeout: 15)
                try await h.waitUntil("\(shell) started its child", timeout: 10) { h.processesOfTest().count >= 3 }

                let stopped = MonotonicClock.now
                let status = h.stopDaemon()
                print("on-stop terminate (\(mode)): vigild stopped in \(String(format: "%.2f", seconds(since: stopped))) s")
                await h.expect(status == .exited(0), "vigild's stop ended with \(status.map { "\($0)" } ?? "no exit")")
                try await h.waitUntil("no process of the test's apps is left", timeout: 5) { h.processesOfTest().isEmpty }
                await h.expect(!h.isAlive(demoPid) && !h.isAlive(shellPid), "pids \(demoPid), \(shellPid) survived")
                let told = h.records(demo).of(pid: demoPid).contains { $0.kind == "lifecycle" && $0.event == "willTerminate" }
                await h.expect(told, "\(demo) was not told willTerminate")
                for id in [demo, shell] where h.cgroupRoot != nil {
                    await h.expect(!h.isPopulated(id), "\(id)'s cgroup still holds processes: \(h.cgroupEvents(id))")
                }

                // The next daemon finds nothing to adopt.
                try await h.startDaemon()
                for id in [demo, shell] {
                    let state = try await h.state(id)
                    await h.expect(state == .notRunning, "\(id) is \(state) after the restart")
                }
            }
        }

        /// 5. A recorded pid now used by another process (another start time)
        /// is not the app: that process is neither continued nor killed, and
        /// the app is relaunched for its event.
        @Test func reusedPidIsNotAdopted() async {
            let id = "org.vigil.test.reused"
            await DaemonHarness.run(Self.options("signal"), apps: [AppSpec(id, ["VIGIL_DEMO_WORK_SECONDS": Self.work])]) { h in
                let (pid, seq) = try await h.suspendHoldingAnEvent(id, mark: "reused")
                try await h.killDaemon()
                _ = kill(pid, SIGKILL)
                try await h.waitUntil("pid \(pid) is gone", timeout: 10) { !h.isAlive(pid) }

                // A stopped stranger in its own session, written into the record in the
                // app's place with the app's start time: only the start time tells them apart.
                let stranger = try ProcessSpawner.spawn(SpawnRequest(
                    executable: "/bin/sleep", arguments: ["600"], environment: [:], newSession: true, name: "stranger"))
                defer {
                    _ = kill(stranger.pid, SIGKILL)
                    _ = kill(stranger.pid, SIGCONT)
                    _ = try? ProcessControl.reap(stranger)
                    close(stranger.pidfd)
                }
                _ = kill(stranger.pid, SIGSTOP)
                try await h.waitUntil("the stranger is stopped", timeout: 5) { h.processState(stranger.pid) == "T" }
                let path = h.directory + "/state/processes.json"
                let data = try Data(contentsOf: URL(fileURLWithPath: path))
                var file = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
                var records = try #require(file["processes"] as? [[String: Any]])
                try await h.require(records.count == 1 && records[0]["app"] as? String == id, "processes.json: \(records)")
                records[0]["pid"] = stranger.pid
                records[0]["session"] = stranger.pid
                file["processes"] = records
                try JSONSerialization.data(withJSONObject: file).write(to: URL(fileURLWithPath: path))

                try await h.startDaemon()
                try await h.waitUntilDelivered(id, seq: seq)
                let info = try await h.info(id)
                await h.expect(info.pid != stranger.pid && info.launchReason == .redelivery,
                               "\(id): pid \(info.pid.map(String.init) ?? "nil"), launchReason \(info.launchReason.map(\.rawValue) ?? "nil") (the stranger is \(stranger.pid))")
                await h.expect(h.processState(stranger.pid) == "T", "the stranger was touched: /proc state \(h.processState(stranger.pid).map(String.init) ?? "gone")")
                let adopt = try await h.decisions(id, action: "adopt")
                await h.expect(adopt.isEmpty, "adopted: \(adopt.map(\.reason))")
            }
        }
    }
}

extension DaemonHarness {
    /// Launches the app, delivers an event in the foreground, and sends it to
    /// the background while it works on it: it is suspended holding the event
    /// unacknowledged, and the event is durable in the state directory.
    func suspendHoldingAnEvent(_ id: String, mark: String) async throws -> (pid: Int32, seq: UInt64) {
        let pid = try await launchActive(id)
        let accepted = try await wake(id, attributes: ["mark": .string(mark)], payload: "pending")
        try await waitForEvent(id, seq: accepted.seq)
        try await perform(.background, id)
        try await waitUntilSuspended(id, timeout: 15)
        let info = try await info(id)
        try await require(info.unacknowledgedEvents == 1,
                          "\(id) should be suspended holding event \(accepted.seq) unacknowledged: \(info.unacknowledgedEvents) unacknowledged, \(info.queuedEvents) queued")
        try await waitUntil("event \(accepted.seq) is in the state directory", timeout: 10) { stateDirectoryContains(mark) }
        return (pid, accepted.seq)
    }

    /// SIGKILL of vigild, then its exit collected.
    func killDaemon() async throws {
        guard let pid = daemonPid else { try await fail("no daemon to kill") }
        _ = kill(pid, SIGKILL)
        let status = stopDaemon()
        try await require(status == .signaled(SIGKILL), "vigild ended with \(status.map { "\($0)" } ?? "no exit") after SIGKILL")
    }

    /// Waits until event `seq` was handled again after a restart and everything is acknowledged.
    ///
    /// Its first process may acknowledge it once the new daemon resumed it and
    /// then finish, being suspended before it reads the redelivered copy: a new
    /// event wakes it to go on, as any app would be woken.
    func waitUntilDelivered(_ id: String, seq: UInt64) async throws {
        try await waitUntil("\(id) has acknowledged everything and is suspended", timeout: 20, every: 0.05) {
            let info = try await info(id)
            return info.state == .suspended && info.queuedEvents == 0 && info.unacknowledgedEvents == 0
        }
        if !records(id).events.contains(where: { $0.seq == seq && $0.redelivered == true }) {
            let next = try await wake(id, payload: "next")
            try await waitForEvent(id, seq: next.seq)
        }
    }

    /// Frozen in its cgroup, or stopped (T) with the signal fallback.
    func isStoppedFromOutside(_ id: String, pid: Int32) -> Bool {
        cgroupRoot != nil ? isFrozen(id) : processState(pid) == "T"
    }

    func stateDirectoryContains(_ text: String) -> Bool {
        let folder = directory + "/state"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.contains { name in
            FileManager.default.contents(atPath: folder + "/" + name).map { $0.range(of: Data(text.utf8)) != nil } ?? false
        }
    }

    /// Every live process started by this test's daemons (their environment names its socket).
    func processesOfTest() -> [Int32] {
        let marker = Data(("VIGIL_SOCKET=" + socketPath).utf8)
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            guard isAlive(pid), let environ = FileManager.default.contents(atPath: "/proc/\(pid)/environ") else { return false }
            return environ.range(of: marker) != nil
        }
    }

    /// Puts a top-level key into vigild.toml (before any table) and restarts the daemon with it.
    func setConfig(_ line: String) async throws {
        let text = try String(contentsOfFile: configPath, encoding: .utf8)
        try (line + "\n" + text).write(toFile: configPath, atomically: true, encoding: .utf8)
        _ = try await restartDaemon()
    }
}

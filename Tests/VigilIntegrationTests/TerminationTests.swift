import Foundation
import Glibc
import Testing
import VigilKit
import VigilSystem

extension Integration {
    @Suite("termination and daemon restart", needsCgroups)
    struct Termination {
        /// 6. An app that exits on suspend gets willTerminate when it leaves the
        /// foreground; it exits, or is killed once the exit grace is over.
        @Test func exitsOnSuspendGetsWillTerminate() async {
            let grace = 1.5
            let polite = "org.vigil.test.exits"
            let lingering = "org.vigil.test.lingers"
            let apps = [
                AppSpec(polite, exitsOnSuspend: true),
                AppSpec(lingering, ["VIGIL_DEMO_TERMINATE_DELAY": "8"], exitsOnSuspend: true),
            ]
            await DaemonHarness.run(DaemonOptions().with(["exit-grace": grace]), apps: apps) { h in
                let politePid = try await h.launchActive(polite)
                let lingeringPid = try await h.launchActive(lingering)

                // Exits by itself right after willTerminate.
                try await h.perform(.background, polite)
                try await h.waitForRecord(polite, "willTerminate") { $0.kind == "lifecycle" && $0.event == "willTerminate" }
                try await h.waitUntilGone(polite, timeout: 10)
                await h.expect(!h.isAlive(politePid), "pid \(politePid) still alive")
                let exit = try await h.decisions(polite, action: "exit").last
                await h.expect(exit?.reason.contains("after willTerminate") == true, "exit decision: \(exit.map(\.reason) ?? "none")")
                let wake = try await h.wake(polite)
                await h.expect(wake.disposition == "queued", "an exits-on-suspend app was not queued for a wake but \(wake.disposition)")
                try await Task.sleep(for: .milliseconds(300))
                await h.expect(!h.isPopulated(polite), "a wake started an exits-on-suspend app")

                // Lingers 8 s after willTerminate: killed when the exit grace is over.
                let sent = MonotonicClock.now
                try await h.perform(.background, lingering)
                try await h.waitForRecord(lingering, "willTerminate") { $0.kind == "lifecycle" && $0.event == "willTerminate" }
                let stateDuringGrace = try await h.state(lingering)
                if seconds(since: sent) < grace - 0.3 {
                    await h.expect(stateDuringGrace == .background && h.isPopulated(lingering),
                                   "during the exit grace: state \(stateDuringGrace), cgroup.events \(h.cgroupEvents(lingering))")
                }
                try await h.waitUntilGone(lingering, timeout: grace + 15)
                let killedAfter = seconds(since: sent)
                await h.expect(killedAfter >= grace - 0.05, "killed \(killedAfter) s after willTerminate, before the \(grace) s exit grace")
                await h.expect(killedAfter < 8, "gone only after \(killedAfter) s: it exited on its own, it was not killed at the exit grace")
                await h.expect(!h.isAlive(lingeringPid), "pid \(lingeringPid) still alive")
                let terminate = try await h.decisions(lingering, action: "terminate").last
                await h.expect(terminate?.reason.contains("did not exit") == true, "terminate decision: \(terminate.map(\.reason) ?? "none")")
                let frozenEver = h.isFrozen(lingering)
                await h.expect(!frozenEver, "an exits-on-suspend app's cgroup is frozen")
            }
        }

        /// 13. A graceful stop thaws suspended apps; a new daemon adopts the app
        /// still running in its cgroup.
        @Test func gracefulStopThawsAndRestartAdopts() async {
            let demo = "org.vigil.test.demo"
            // Two kinds of survivor: the demo app (VigilKit reconnects by itself) and
            // an app that never talks to vigild.
            let sleeper = "org.vigil.test.sleeper"
            let apps = [AppSpec(demo), AppSpec(sleeper, exec: ["/bin/sleep", "600"])]
            await DaemonHarness.run(DaemonOptions().with(["suspend-grace": 0.5]), apps: apps) { h in
                let demoPid = try await h.launchActive(demo)
                try await h.perform(.launch, sleeper)
                let sleeperInfo = try await h.info(sleeper)
                guard let sleeperPid = sleeperInfo.pid else { try await h.fail("\(sleeper) has no pid after launch") }
                try await h.perform(.background, demo)
                try await h.perform(.background, sleeper)
                try await h.waitUntilSuspended(demo, timeout: 15)
                try await h.waitUntilSuspended(sleeper, timeout: 15)

                let status = h.stopDaemon()
                await h.expect(status == .exited(0), "vigild's graceful stop ended with \(status.map { "\($0)" } ?? "no exit")")
                for id in [demo, sleeper] {
                    await h.expect(h.cgroupEvents(id)["frozen"] == 0, "\(id) left frozen by the daemon's stop: cgroup.events \(h.cgroupEvents(id))")
                }
                await h.expect(h.isAlive(sleeperPid), "\(sleeper) (pid \(sleeperPid)) did not survive the daemon's stop")
                let sleeperState = h.processState(sleeperPid)
                await h.expect(sleeperState != "T", "\(sleeper) is stopped (T) after the daemon's stop")

                try await h.startDaemon()
                let adopted = try await h.info(sleeper)
                await h.expect(adopted.pid == sleeperPid, "adopted pid \(adopted.pid.map(String.init) ?? "nil"), expected \(sleeperPid)")
                await h.expect(adopted.state == .background || adopted.state == .suspended, "adopted app is \(adopted.state)")
                await h.expect(adopted.launchReason == .adopted, "adopted app's launchReason \(adopted.launchReason.map(\.rawValue) ?? "nil")")
                let adopt = try await h.decisions(sleeper, action: "adopt")
                await h.expect(!adopt.isEmpty, "no `adopt` decision for \(sleeper)")
                // It is managed again: suspended after the grace, and ended by `terminate`.
                try await h.waitUntilSuspended(sleeper, timeout: 15)
                try await h.perform(.terminate, sleeper)
                try await h.waitUntilGone(sleeper, timeout: 10)
                await h.expect(!h.isAlive(sleeperPid), "adopted pid \(sleeperPid) survived terminate")

                // The demo app: thawed at the stop, adopted, reconnected by VigilKit, and
                // woken through its new connection by the same process.
                await h.expect(h.isAlive(demoPid), "\(demo) (pid \(demoPid)) did not survive the daemon's stop")
                let demoInfo = try await h.info(demo)
                await h.expect(demoInfo.pid == demoPid && demoInfo.launchReason == .adopted,
                               "\(demo) not adopted: pid \(demoInfo.pid.map(String.init) ?? "nil"), launchReason \(demoInfo.launchReason.map(\.rawValue) ?? "nil")")
                try await h.waitUntil("\(demo) records its reconnection", timeout: 15) {
                    !h.records(demo).of(pid: demoPid).kind("reconnected").isEmpty
                }
                let accepted = try await h.wake(demo, payload: "after-restart")
                let handled = try await h.waitForEvent(demo, seq: accepted.seq)
                await h.expect(handled.pid == demoPid && handled.payload == "after-restart",
                               "event after the restart handled as \(handled), expected pid \(demoPid)")
            }
        }
    }
}

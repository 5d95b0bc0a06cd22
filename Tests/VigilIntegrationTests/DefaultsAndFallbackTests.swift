import Foundation
import Testing
import VigilKit

extension Integration {
    @Suite("the real default wake budget, and the signal fallback")
    struct DefaultsAndFallback {
        /// 11. With no override, a wake gives 10 s: not suspended at 8 s, suspended by ~12 s.
        @Test(needsCgroups) func defaultWakeBudgetIsTenSeconds() async {
            let id = "org.vigil.test.budget"
            // Only the grace is shortened; the wake budget is the daemon's default.
            let options = DaemonOptions(timings: ["suspend-grace": 0.5])
            await DaemonHarness.run(options, apps: [AppSpec(id, ["VIGIL_DEMO_NO_FINISH": "1"])]) { h in
                let status = try await h.status()
                await h.expect(status.timings["wake-budget"] == 10, "status reports wake-budget \(status.timings["wake-budget"].map { "\($0)" } ?? "nil")")
                try await h.launchAndSuspend(id)

                let sent = MonotonicClock.now
                let accepted = try await h.wake(id)
                await h.expect(accepted.disposition == "woke", "disposition \(accepted.disposition)")
                try await h.waitForEvent(id, seq: accepted.seq)

                try await h.waitUntil("8 s have passed since the wake", timeout: 20, every: 0.05) { seconds(since: sent) >= 8 }
                let frozenAt8 = h.isFrozen(id)
                let state = try await h.state(id)
                let checkedAt = seconds(since: sent)
                if checkedAt < 9.5 {
                    await h.expect(!frozenAt8 && state == .background, "\(checkedAt) s after the wake: frozen \(frozenAt8), state \(state)")
                }
                try await h.waitUntilSuspended(id, timeout: 20)
                let elapsed = seconds(since: sent)
                await h.expect(elapsed > 9 && elapsed < 20, "suspended \(elapsed) s after the wake (expected the 10 s default budget)")
                let suspend = try await h.decisions(id, action: "suspend").last
                await h.expect(suspend?.reason.contains("processing window over") == true, "suspend decision: \(suspend.map(\.reason) ?? "none")")
            }
        }

        /// 12. `suspension = "signal"`: SIGSTOP/SIGCONT, visible as state T in /proc.
        @Test func signalFallbackStopsWithSigstop() async {
            let id = "org.vigil.test.signal"
            let budget = 3.0
            let options = DaemonOptions(suspension: "signal").with(["suspend-grace": 0.5, "wake-budget": budget])
            await DaemonHarness.run(options, apps: [AppSpec(id, ["VIGIL_DEMO_NO_FINISH": "1"])]) { h in
                let status = try await h.status()
                await h.expect(status.suspension == .signals && status.cgroupRoot == nil,
                               "status: suspension \(status.suspension.rawValue), cgroupRoot \(status.cgroupRoot ?? "nil"), detail \(status.suspensionDetail)")
                let pid = try await h.launchActive(id)
                let running = h.processState(pid)
                await h.expect(running != nil && running != "T", "a foreground app's /proc state is \(running.map(String.init) ?? "gone")")

                let backgrounded = MonotonicClock.now
                try await h.perform(.background, id)
                try await h.waitUntilSuspended(id, timeout: 15)
                let stoppedAfter = seconds(since: backgrounded)
                await h.expect(stoppedAfter >= 0.45, "stopped \(stoppedAfter) s after leaving the foreground, before the 0.5 s grace")

                let sent = MonotonicClock.now
                let accepted = try await h.wake(id, payload: "continue")
                await h.expect(accepted.disposition == "woke", "disposition \(accepted.disposition)")
                let event = try await h.waitForEvent(id, seq: accepted.seq)
                await h.expect(event.pid == pid, "event handled by pid \(event.pid), not \(pid)")
                let afterWake = h.processState(pid)
                if seconds(since: sent) < budget - 0.5 {
                    await h.expect(afterWake != nil && afterWake != "T", "after the wake /proc state is \(afterWake.map(String.init) ?? "gone")")
                    let state = try await h.state(id)
                    await h.expect(state == .background, "after the wake vigild says \(state)")
                }
                try await h.waitUntilSuspended(id, timeout: budget + 15)
                await h.expect(seconds(since: sent) >= budget - 0.05, "stopped again \(seconds(since: sent)) s after the wake, before the \(budget) s budget")

                // Terminated while stopped: gone (SIGKILL must reach a stopped process).
                try await h.perform(.terminate, id)
                try await h.waitUntil("pid \(pid) is gone", timeout: 10) { !h.isAlive(pid) }
                try await h.waitUntilGone(id, timeout: 10)
            }
        }
    }
}

import Foundation
import Testing
import VigilKit

extension Integration {
    @Suite("suspension, wakes and background tasks", needsCgroups)
    struct Suspension {
        /// 1. Leaving the foreground: running during the grace period, frozen after it.
        @Test func suspendedAfterGracePeriod() async {
            let grace = 2.0
            let id = "org.vigil.test.grace"
            await DaemonHarness.run(DaemonOptions().with(["suspend-grace": grace]), apps: [AppSpec(id)]) { h in
                let pid = try await h.launchActive(id)
                await h.expect(!h.isFrozen(id) && h.isPopulated(id), "a foreground app must run: cgroup.events \(h.cgroupEvents(id))")
                await h.expect(h.cgroup(id).flatMap { try? $0.processes() }?.contains(pid) == true,
                               "pid \(pid) is not in its app cgroup")

                let sent = MonotonicClock.now
                let reply = try await h.perform(.background, id)
                await h.expect(reply.state == .background, "right after `background` the app is \(reply.state), not background")
                let early = h.isFrozen(id)
                if seconds(since: sent) < grace - 0.5 {
                    await h.expect(!early, "frozen within \(seconds(since: sent)) s, before the \(grace) s grace period")
                    let state = try await h.state(id)
                    if seconds(since: sent) < grace - 0.5 {
                        await h.expect(state == .background, "vigild says \(state) during the grace period")
                    }
                }
                try await h.waitUntilSuspended(id, timeout: grace + 15)
                let frozenAfter = seconds(since: sent)
                // Seen from outside no earlier than it happened, and it cannot happen before the grace ends.
                await h.expect(frozenAfter >= grace - 0.05, "frozen after \(frozenAfter) s, before the \(grace) s grace period ended")
                await h.expect(frozenAfter < grace + 10, "frozen only after \(frozenAfter) s (grace \(grace) s)")

                let info = try await h.info(id)
                await h.expect(info.state == .suspended && info.pid == pid, "apps says \(info.state), pid \(info.pid.map(String.init) ?? "nil") (expected suspended, \(pid))")
                await h.expect(h.isAlive(pid), "a suspended app stays in memory, but pid \(pid) is gone")
                let suspend = try await h.decisions(id, action: "suspend").last
                await h.expect(suspend?.reason.contains("grace period") == true, "suspend decision: \(suspend.map(\.reason) ?? "none")")
                let didEnterBackground = h.records(id).contains { $0.kind == "lifecycle" && $0.event == "didEnterBackground" }
                await h.expect(didEnterBackground, "the app never got didEnterBackground")
            }
        }

        /// 2. A wake thaws the app; it is suspended again after the wake budget if it
        /// never finishes, and at once when it says it finished.
        @Test func wakeThenSuspendAfterBudgetOrAtOnceWhenFinished() async {
            let budget = 4.0
            let slow = "org.vigil.test.nofinish"
            let quick = "org.vigil.test.finisher"
            let apps = [AppSpec(slow, ["VIGIL_DEMO_NO_FINISH": "1"]), AppSpec(quick)]
            await DaemonHarness.run(DaemonOptions().with(["suspend-grace": 0.5, "wake-budget": budget]), apps: apps) { h in
                try await h.launchAndSuspend(slow)
                try await h.launchAndSuspend(quick)

                // Never finishes: runs out the whole wake budget.
                var sent = MonotonicClock.now
                var accepted = try await h.wake(slow, payload: "hello")
                await h.expect(accepted.disposition == "woke", "wake of a suspended app: disposition \(accepted.disposition)")
                try await h.waitUntil("\(slow) is thawed (frozen 0)", timeout: 5) { !h.isFrozen(slow) }
                let event = try await h.waitForEvent(slow, seq: accepted.seq)
                await h.expect(event.payload == "hello" && event.redelivered == false, "event as handled: \(event)")
                let midState = try await h.state(slow)
                if seconds(since: sent) < budget - 0.5 {
                    await h.expect(midState == .background, "during the wake budget vigild says \(midState)")
                    await h.expect(!h.isFrozen(slow), "frozen during the wake budget")
                }
                try await h.waitUntilSuspended(slow, timeout: budget + 15)
                var elapsed = seconds(since: sent)
                await h.expect(elapsed >= budget - 0.05, "re-suspended \(elapsed) s after the wake, before the \(budget) s budget")
                await h.expect(elapsed < budget + 10, "re-suspended only \(elapsed) s after the wake")
                let slowSuspend = try await h.decisions(slow, action: "suspend").last
                await h.expect(slowSuspend?.reason.contains("processing window over") == true,
                               "suspend decision after the budget: \(slowSuspend.map(\.reason) ?? "none")")

                // Finishes early: suspended right away.
                sent = MonotonicClock.now
                accepted = try await h.wake(quick)
                await h.expect(accepted.disposition == "woke", "wake of a suspended app: disposition \(accepted.disposition)")
                try await h.waitForEvent(quick, seq: accepted.seq)
                try await h.waitUntilSuspended(quick, timeout: budget + 15)
                elapsed = seconds(since: sent)
                let quickSuspend = try await h.decisions(quick, action: "suspend").last
                await h.expect(quickSuspend?.reason.contains("finished processing early") == true,
                               "suspend decision after finishedProcessing: \(quickSuspend.map(\.reason) ?? "none")")
                await h.expect(elapsed < budget, "finished early but suspended only after \(elapsed) s (budget \(budget) s)")
                let info = try await h.info(quick)
                await h.expect(info.wakes >= 1 && info.unacknowledgedEvents == 0 && info.queuedEvents == 0,
                               "after the wake: wakes \(info.wakes), unacknowledged \(info.unacknowledgedEvents), queued \(info.queuedEvents)")
            }
        }

        /// 3. A background task holds the app out of suspension past the wake budget;
        /// it is suspended soon after the task ends.
        @Test func backgroundTaskExtendsPastWakeBudget() async {
            let budget = 1.0
            let taskSeconds = 4.0
            let id = "org.vigil.test.task"
            let app = AppSpec(id, ["VIGIL_DEMO_TASK_SECONDS": "\(taskSeconds)"])
            await DaemonHarness.run(DaemonOptions().with(["wake-budget": budget]), apps: [app]) { h in
                let sent = MonotonicClock.now
                let accepted = try await h.wake(id)
                await h.expect(accepted.disposition == "launched", "wake of a stopped app: disposition \(accepted.disposition)")
                let event = try await h.waitForEvent(id, seq: accepted.seq)
                try await h.waitForRecord(id, "taskBegan demo-work") { $0.kind == "taskBegan" && $0.name == "demo-work" }
                let held = try await h.info(id)
                if seconds(since: sent) < taskSeconds - 0.5 {
                    await h.expect(held.tasks.map(\.name) == ["demo-work"], "apps shows tasks \(held.tasks) while the task is held")
                }

                // Past the wake budget, with the task still held: running.
                try await h.waitUntil("the wake budget has passed", timeout: 30) { seconds(since: sent) > budget + 0.5 }
                let state = try await h.state(id)
                let frozen = h.isFrozen(id)
                if seconds(since: event.t) < taskSeconds - 0.5 {
                    await h.expect(!frozen && state == .background,
                                   "while the task is held, past the \(budget) s budget: frozen \(frozen), state \(state)")
                }

                try await h.waitUntilSuspended(id, timeout: taskSeconds + 20)
                let observed = MonotonicClock.now
                // The task ends no earlier than taskSeconds after the event was handled.
                let afterEvent = seconds(from: event.t, to: observed)
                await h.expect(afterEvent >= taskSeconds - 0.05,
                               "suspended \(afterEvent) s after the event, before the \(taskSeconds) s task ended")
                await h.expect(afterEvent < taskSeconds + 4,
                               "suspended \(afterEvent) s after the event: not soon after the \(taskSeconds) s task ended")
                let extend = try await h.decisions(id, action: "extend")
                await h.expect(extend.contains { $0.reason.contains("demo-work") }, "no `extend` decision naming demo-work")
                let suspend = try await h.decisions(id, action: "suspend").last
                await h.expect(suspend?.reason.contains("task ended") == true || suspend?.reason.contains("finished processing") == true,
                               "suspend decision after the task: \(suspend.map(\.reason) ?? "none")")
                let info = try await h.info(id)
                await h.expect(info.tasks.isEmpty, "tasks still listed after the task ended: \(info.tasks)")
            }
        }

        /// 4. Near the limit the expiration handler runs; a task still held at the
        /// limit gets the app terminated, with the task named.
        @Test func expirationHandlerThenWatchdogTermination() async {
            let limit = 5.0
            let warning = 2.0
            let id = "org.vigil.test.stuck"
            let app = AppSpec(id, ["VIGIL_DEMO_TASK_FOREVER": "1"])
            let options = DaemonOptions().with(["wake-budget": 1, "background-time-limit": limit, "expiration-warning": warning])
            await DaemonHarness.run(options, apps: [app]) { h in
                let sent = MonotonicClock.now
                let accepted = try await h.wake(id)
                await h.expect(accepted.disposition == "launched", "wake of a stopped app: disposition \(accepted.disposition)")
                try await h.waitForRecord(id, "taskBegan stuck-upload") { $0.kind == "taskBegan" && $0.name == "stuck-upload" }
                guard let pid = try await h.info(id).pid else { try await h.fail("no pid after launch") }

                let expiring = try await h.waitForRecord(id, "expiring", timeout: limit + 15) { $0.kind == "expiring" }
                await h.expect(expiring.name == "stuck-upload", "expiration handler ran for \(expiring.name ?? "nil")")
                let remaining = expiring.remaining ?? -1
                await h.expect(remaining > 0 && remaining <= warning + 0.05,
                               "expiration handler ran with \(remaining) s left (expected ≈ \(warning) s, and before the limit)")

                try await h.waitUntilGone(id, timeout: limit + 20)
                let gone = seconds(since: sent)
                await h.expect(gone >= limit - 0.05, "terminated \(gone) s after launch, before the \(limit) s limit")
                await h.expect(gone < limit + 15, "terminated only \(gone) s after launch (limit \(limit) s)")
                await h.expect(!h.isAlive(pid), "pid \(pid) still alive after the watchdog")

                let log = try await h.decisions(id)
                let expire = log.firstIndex { $0.action == "expire" && $0.reason.contains("stuck-upload") }
                let terminate = log.firstIndex { $0.action == "terminate" && $0.reason.contains("stuck-upload") }
                await h.expect(expire != nil, "no `expire` decision naming stuck-upload")
                await h.expect(terminate != nil, "no `terminate` decision naming stuck-upload")
                if let expire, let terminate {
                    await h.expect(expire < terminate, "`expire` logged after `terminate`")
                    await h.expect(log[terminate].state == .notRunning, "terminate decision state \(log[terminate].state)")
                }
                let info = try await h.info(id)
                await h.expect(info.state == .notRunning && info.pid == nil && info.tasks.isEmpty,
                               "after the watchdog: state \(info.state), pid \(info.pid.map(String.init) ?? "nil"), tasks \(info.tasks)")
            }
        }
    }
}

import Foundation
import Testing
import VigilKit

extension Integration {
    @Suite("relaunch, ordering and redelivery", needsCgroups)
    struct Events {
        /// 5. A system termination lets an event relaunch the app; a user force-quit does not,
        /// until the user launches it again.
        @Test func relaunchAfterTerminateButNotAfterQuit() async {
            let id = "org.vigil.test.relaunch"
            await DaemonHarness.run(apps: [AppSpec(id)]) { h in
                let first = try await h.launchActive(id)
                try await h.waitForRecord(id, "launch (user)") { $0.kind == "launch" && $0.reason == "user" }

                // Terminated by the system: ended without notice, relaunched by the next event.
                let terminated = try await h.perform(.terminate, id)
                await h.expect(terminated.state == .notRunning && !terminated.forceQuit,
                               "after terminate: state \(terminated.state), forceQuit \(terminated.forceQuit)")
                try await h.waitUntilGone(id, timeout: 10)
                await h.expect(!h.isAlive(first), "pid \(first) survived terminate")

                let relaunch = try await h.wake(id, payload: "after-terminate")
                await h.expect(relaunch.disposition == "launched", "wake after terminate: disposition \(relaunch.disposition)")
                let launch = try await h.waitForRecord(id, "launch (event)") { $0.kind == "launch" && $0.pid != first }
                await h.expect(launch.reason == "event" && launch.eventKind == "test",
                               "relaunch recorded reason \(launch.reason ?? "nil"), event kind \(launch.eventKind ?? "nil")")
                let event = try await h.waitForEvent(id, seq: relaunch.seq)
                await h.expect(event.pid == launch.pid && event.payload == "after-terminate", "relaunched process handled \(event)")
                let relaunched = try await h.info(id)
                await h.expect(relaunched.launchReason == .event && relaunched.pid == launch.pid,
                               "apps: launchReason \(relaunched.launchReason.map(\.rawValue) ?? "nil"), pid \(relaunched.pid.map(String.init) ?? "nil")")
                await h.expect(h.cgroup(id).flatMap { try? $0.processes() }?.contains(launch.pid) == true,
                               "relaunched pid \(launch.pid) is not in the app's cgroup")

                // Force-quit by the user: events queue, nothing starts.
                let quit = try await h.perform(.quit, id)
                await h.expect(quit.state == .notRunning && quit.forceQuit, "after quit: state \(quit.state), forceQuit \(quit.forceQuit)")
                try await h.waitUntilGone(id, timeout: 10)
                let launchesBefore = h.records(id).launches.count
                let queued = try await h.wake(id, payload: "while-quit")
                await h.expect(queued.disposition == "queued", "wake after quit: disposition \(queued.disposition)")
                let watchStart = MonotonicClock.now
                while seconds(since: watchStart) < 1.5 {
                    if h.isPopulated(id) || h.records(id).launches.count != launchesBefore {
                        try await h.fail("a wake relaunched a force-quit app")
                    }
                    try await Task.sleep(for: .milliseconds(50))
                }
                let waiting = try await h.info(id)
                await h.expect(waiting.state == .notRunning && waiting.queuedEvents + waiting.unacknowledgedEvents >= 1,
                               "force-quit app: state \(waiting.state), queued \(waiting.queuedEvents)")
                let queueDecision = try await h.decisions(id, action: "queue").last
                await h.expect(queueDecision?.reason.contains("force-quit") == true,
                               "queue decision: \(queueDecision.map(\.reason) ?? "none")")

                // The user launches it again: it starts, and gets the queued event.
                let third = try await h.launchActive(id)
                let userLaunch = try await h.waitForRecord(id, "launch (user) of pid \(third)") { $0.kind == "launch" && $0.pid == third }
                await h.expect(userLaunch.reason == "user", "launch by the user recorded reason \(userLaunch.reason ?? "nil")")
                let late = try await h.waitForEvent(id, seq: queued.seq)
                await h.expect(late.pid == third && late.payload == "while-quit", "queued event handled as \(late)")
                let relaunched2 = try await h.info(id)
                await h.expect(!relaunched2.forceQuit, "forceQuit still set after the user launched the app")
            }
        }

        /// 7. Wakes sent quickly, while the app is suspended and while it is busy, arrive
        /// in seq order, none missing, none duplicated (except redeliveries).
        @Test func quickWakesArriveInOrderWithoutLossOrDuplicates() async {
            let id = "org.vigil.test.order"
            let app = AppSpec(id, ["VIGIL_DEMO_WORK_SECONDS": "0.15"])
            await DaemonHarness.run(DaemonOptions().with(["suspend-grace": 0.5, "wake-budget": 3]), apps: [app]) { h in
                try await h.launchAndSuspend(id)
                var sent: [UInt64] = []
                var dispositions: [String] = []
                // A burst at a suspended app...
                for number in 1...5 {
                    let accepted = try await h.wake(id, payload: "burst-\(number)")
                    sent.append(accepted.seq)
                    dispositions.append(accepted.disposition)
                }
                // ...and another while it is busy with the first burst (each takes 0.15 s).
                for number in 6...10 {
                    let accepted = try await h.wake(id, payload: "busy-\(number)")
                    sent.append(accepted.seq)
                    dispositions.append(accepted.disposition)
                    try await Task.sleep(for: .milliseconds(40))
                }
                await h.expect(dispositions.first == "woke", "first wake of a suspended app: \(dispositions)")
                await h.expect(sent == Array(sent[0]...(sent[0] + 9)), "seqs handed out \(sent), not consecutive")

                let expected = Set(sent)
                try await h.waitUntil("all 10 events are handled (no further wake is sent)", timeout: 30) {
                    expected.isSubset(of: Set(h.records(id).events.compactMap(\.seq)))
                }
                let events = h.records(id).events
                let firstDeliveries = events.filter { $0.redelivered != true }.compactMap(\.seq)
                await h.expect(firstDeliveries == sent, "first deliveries in order \(firstDeliveries), sent \(sent)")
                let duplicates = Dictionary(grouping: events, by: { $0.seq ?? 0 }).filter { $0.value.count > 1 }
                for (seq, copies) in duplicates {
                    await h.expect(copies.dropFirst().allSatisfy { $0.redelivered == true },
                                   "event \(seq) delivered twice without redelivered: \(copies)")
                }
                let payloads = events.filter { $0.redelivered != true }.compactMap(\.payload)
                await h.expect(payloads == (1...5).map { "burst-\($0)" } + (6...10).map { "busy-\($0)" }, "payloads in order: \(payloads)")

                try await h.waitUntilSuspended(id, timeout: 20)
                let info = try await h.info(id)
                await h.expect(info.unacknowledgedEvents == 0 && info.queuedEvents == 0 && info.droppedEvents == 0,
                               "when done: unacknowledged \(info.unacknowledgedEvents), queued \(info.queuedEvents), dropped \(info.droppedEvents)")
            }
        }

        /// 8. A crash in the middle of an event: the app is relaunched and gets the
        /// unacknowledged events again; each is handled once by a process that did not crash.
        @Test func crashMidProcessingIsRedelivered() async {
            let id = "org.vigil.test.crash"
            let app = AppSpec(id, ["VIGIL_DEMO_CRASH_ON_SEQ": "2", "VIGIL_DEMO_NO_FINISH": "1", "VIGIL_DEMO_WORK_SECONDS": "0.2"])
            await DaemonHarness.run(DaemonOptions().with(["wake-budget": 4]), apps: [app]) { h in
                var sent: [UInt64] = []
                for number in 1...3 {
                    let accepted = try await h.wake(id, payload: "event-\(number)")
                    sent.append(accepted.seq)
                }
                try await h.require(sent == [1, 2, 3], "the first three events of a fresh daemon got seqs \(sent), not 1, 2, 3")

                let relaunch = try await h.waitForRecord(id, "a launch for redelivery", timeout: 30) {
                    $0.kind == "launch" && $0.reason == "redelivery"
                }
                try await h.waitUntil("the relaunched process handles event 3", timeout: 20) {
                    h.records(id).events.contains { $0.pid == relaunch.pid && $0.seq == 3 }
                }
                let records = h.records(id)
                guard let crashed = records.launches.first?.pid, crashed != relaunch.pid else {
                    try await h.fail("expected two processes, records:\n  \(records.summary)")
                }
                await h.expect(records.launches.first?.reason == "event", "first launch reason \(records.launches.first?.reason ?? "nil")")
                await h.expect(records.launches.count == 2, "launched \(records.launches.count) times:\n  \(records.summary)")

                let before = records.events.of(pid: crashed)
                let after = records.events.of(pid: relaunch.pid)
                await h.expect(before.map(\.seq) == [1, 2], "the crashing process handled \(before.map(\.seq))")
                await h.expect(after.map(\.seq) == [2, 3], "the relaunched process handled \(after.map(\.seq)) (event 1 was acknowledged)")
                await h.expect(after.first?.redelivered == true, "event 2 came again without redelivered: \(after.first.map(\.description) ?? "-")")
                await h.expect(after.map(\.payload) == ["event-2", "event-3"], "payloads after the crash: \(after.map(\.payload))")
                // Handled once by a process that did not crash: 1 by the first, 2 and 3 by the second.
                let completed = before.filter { $0.seq != 2 }.compactMap(\.seq) + after.compactMap(\.seq)
                await h.expect(completed.sorted() == [1, 2, 3], "events completed: \(completed)")

                let crash = try await h.decisions(id, action: "crash")
                await h.expect(crash.contains { $0.reason.contains("\(crashed)") }, "no crash decision for pid \(crashed)")
                try await h.waitUntil("every event is acknowledged", timeout: 10, every: 0.05) {
                    let info = try await h.info(id)
                    return info.unacknowledgedEvents == 0 && info.queuedEvents == 0
                }
                let info = try await h.info(id)
                await h.expect(info.launchReason == .redelivery && info.pid == relaunch.pid,
                               "apps: launchReason \(info.launchReason.map(\.rawValue) ?? "nil"), pid \(info.pid.map(String.init) ?? "nil")")
            }
        }
    }
}

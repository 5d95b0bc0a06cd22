import Foundation
import Glibc
import Testing
import VigilKit

/// The write-ahead event journal against the real daemon: a SIGKILL of vigild
/// right after events were queued, sent and acknowledged (well before its
/// debounced state save) loses nothing and reuses no sequence number.
extension Integration {
    @Suite("event journal: SIGKILL of vigild loses and reuses nothing")
    struct EventJournal {
        @Test func sigkillRightAfterEventsReusesNoSeqAndRedeliversWhatWasSent() async {
            let acker = "org.vigil.test.journal-acker"
            let holder = "org.vigil.test.journal-holder"
            // The holder works 4 s on each event before acknowledging it, so it
            // holds both of its events, sent and unacknowledged, at the kill.
            let apps = [AppSpec(acker), AppSpec(holder, ["VIGIL_DEMO_WORK_SECONDS": "4"])]
            await DaemonHarness.run(DaemonOptions(suspension: "signal").with(["suspend-grace": 30]), apps: apps) { h in
                _ = try await h.launchActive(acker)
                let holderPid = try await h.launchActive(holder)

                // From here to the SIGKILL is far less than the daemon's
                // debounced save: only the journal can hold what happens.
                var acknowledged: [UInt64] = []
                for number in 1...3 { acknowledged.append(try await h.wake(acker, payload: "acked-\(number)").seq) }
                var held: [UInt64] = []
                for number in 1...2 { held.append(try await h.wake(holder, payload: "held-\(number)").seq) }
                try await h.waitUntil("the acker acknowledged its events and the holder was sent both", timeout: 20, every: 0.005) {
                    let a = try await h.info(acker), b = try await h.info(holder)
                    return a.queuedEvents == 0 && a.unacknowledgedEvents == 0 && b.queuedEvents == 0 && b.unacknowledgedEvents == 2
                }
                try await h.killDaemon()
                // The holder's events go to a new process of it, so its record shows the redelivery.
                _ = kill(holderPid, SIGKILL)
                try await h.waitUntil("pid \(holderPid) is gone", timeout: 10) { !h.isAlive(holderPid) }
                try await h.startDaemon()

                // 1. Numbering goes on above every seq issued before the kill.
                let next = try await h.wake(acker, payload: "after")
                await h.expect(next.seq > acknowledged.max()!,
                               "seq \(next.seq) issued after the restart; \(acknowledged) were issued (and acknowledged) before it")
                _ = try await h.waitForEvent(acker, seq: next.seq)
                let firstDeliveries = h.records(acker).events.filter { $0.redelivered == false }.map { $0.seq! }
                await h.expect(Set(firstDeliveries).count == firstDeliveries.count,
                               "a seq reached the acker twice as new (redelivered: false): \(h.records(acker).events.summary)")

                // 2. What was sent and not acknowledged comes again, marked redelivered, bytes intact.
                if try await h.state(holder) != .active { _ = try await h.launchActive(holder) }
                for (index, seq) in held.enumerated() {
                    let again = try await h.waitForRecord(holder, "event \(seq) in a new process", timeout: 30, where: {
                        $0.kind == "event" && $0.seq == seq && $0.pid != holderPid
                    })
                    await h.expect(again.redelivered == true && again.payload == "held-\(index + 1)",
                                   "event \(seq) after the restart: redelivered \(again.redelivered.map(String.init) ?? "nil"), payload \(again.payload ?? "nil")")
                }
                let decisions = try await h.decisions(holder)
                print("event journal: seq after the restart \(next.seq) (issued before: \(acknowledged + held)); holder: \(decisions.filter { $0.action == "relaunch" || $0.action == "launch" }.map(\.reason))")
            }
        }
    }
}

"""Fault suite: SIGTERM and SIGKILL of vigild while an app is suspended with
events pending (host tier), with the cgroup freezer and with the signal fallback.

The app (fault_app.py --hold) takes some events without acknowledging them and
is suspended holding them (sent, unacknowledged); a few more events are sent
right before the daemon is stopped (SIGTERM: a graceful stop that leaves apps
for adoption, `on-stop = "leave"`) or killed (SIGKILL). A new daemon is started
on the same state folder. It must adopt the app (same process, an `adopt`
decision) and deliver each pending event once: an event the app had received
comes again once, flagged `redelivered`; an event it had not received comes
once; an event it had acknowledged does not come again unless its
acknowledgement may not have reached the old daemon (then flagged).

Figures per mode: rounds, events sent, pending at the stop, delivered by the
new daemon, lost, delivered more than once after the restart, unflagged copies,
adopted, app processes left stopped or frozen, sequence numbers the daemon
gave out twice. Fails on any of these being wrong.
"""

import os
import random
import shutil
import signal
import tempfile
import time
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, FaultDaemon, app_info, connect_control, decisions_in_log, freezer_available,
    kill_all, processes_with, read_jsonl, seed, stranded, wait_for,
)

APP = "org.vigil.test.faultstop"
ROUNDS = (signal.SIGTERM, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)
# Patience for one step on a busy 2-core machine; longer is a failure.
STEP = 10.0


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class DaemonStopTests(unittest.TestCase):
    def test_stop_and_kill_with_suspended_apps_with_the_cgroup_freezer(self):
        if not freezer_available():
            self.skipTest("no writable cgroup v2 tree (needs root)")
        self.run_mode("cgroup")

    def test_stop_and_kill_with_suspended_apps_with_the_signal_fallback(self):
        self.run_mode("signal")

    def run_mode(self, suspension):
        value = seed()
        rng = random.Random(value)
        root = tempfile.mkdtemp(prefix="vigil-fault-stop-")
        self.addCleanup(shutil.rmtree, root, True)
        # A held event keeps the app awake until its window ends: a short one keeps the test short.
        daemon = FaultDaemon(root, suspension, timings={"wake-budget": 2.0}, extra='on-stop = "leave"')
        record = os.path.join(root, "app.jsonl")
        daemon.add_app(APP, [PYTHON, FAULT_APP, "--record", record, "--hold"])
        self.addCleanup(daemon.remove_cgroups)
        self.addCleanup(lambda: kill_all(processes_with(record)))
        daemon.start()
        self.addCleanup(daemon.stop)
        records = lambda: read_jsonl(record)  # noqa: E731

        def context():
            brief = ("kind", "pid", "seq", "redelivered", "acked", "attributes", "event", "code", "error", "t")
            return (f"\n--- vigild\n{daemon.log_tail(50)}\n--- app records\n"
                    + "\n".join(str({k: r[k] for k in brief if k in r}) for r in records()[-25:]))

        def copies(since):
            """Every event copy as (seq, redelivered, new): new when it came on a connection made after `since`."""
            result, fresh = [], {}
            for r in records():
                if r["kind"] == "hello":
                    fresh[r["pid"]] = r["t"] > since
                elif r["kind"] == "event":
                    result.append((r["seq"], r["redelivered"], fresh.get(r["pid"], False)))
            return result

        sent = {}  # seq -> round
        figures = dict(reused=0, pending=0, delivered_after=0, lost=0, twice_after=0, unflagged=0, adopted=0,
                       not_adopted=0, left_stopped=0, left_frozen=0)
        failures = []
        control = connect_control(daemon.socket)
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in records()), STEP), "no app" + context())
        control.app_action("background", APP)
        for round, signum in enumerate(ROUNDS):
            name = signal.Signals(signum).name
            info = app_info(control, APP)
            if info["pid"] is None:  # not adopted last round: start over so that this round measures something
                control.app_action("launch", APP)
                control.app_action("background", APP)
            held = []
            for _ in range(rng.randint(1, 3)):
                seq = control.wake(APP, attributes={"round": round, "hold": True}, payload=b"held")["seq"]
                figures["reused"] += seq in sent  # a number the daemon had given out before
                sent[seq] = round
                held.append(seq)
            if not wait_for(lambda: set(held) <= {s for s, _, _ in copies(0)}
                            and app_info(control, APP)["state"] == "suspended", STEP):
                failures.append(f"round {round}: the app did not take its events and get suspended")
            late = []
            for _ in range(rng.randint(1, 2)):  # sent just before the stop: it may or may not reach the app
                seq = control.wake(APP, attributes={"round": round, "hold": False}, payload=b"late")["seq"]
                figures["reused"] += seq in sent  # a number the daemon had given out before
                sent[seq] = round
                late.append(seq)
            before = app_info(control, APP)
            control.close()
            received_before = {s for s, _, _ in copies(0)}
            adoptions = len(decisions_in_log(daemon.output, "adopt"))
            daemon.kill(signum)
            stopped_at = time.monotonic()
            daemon.start()
            control = connect_control(daemon.socket)
            pending = [s for s, r in sent.items() if r == round]
            figures["pending"] += len(pending)

            def settled():
                after = {s for s, _, new in copies(stopped_at) if new}
                return set(held) <= after and set(late) <= {s for s, _, _ in copies(0)} \
                    and app_info(control, APP)["unacknowledgedEvents"] == 0
            if not wait_for(settled, STEP):
                failures.append(f"round {round} ({name}): pending events not all delivered within {STEP} s")
            every = copies(stopped_at)
            for seq in pending:
                mine = [(redelivered, new) for s, redelivered, new in every if s == seq]
                after = [redelivered for redelivered, new in mine if new]
                if not mine:
                    figures["lost"] += 1
                figures["delivered_after"] += bool(after)
                if len(after) > 1:
                    figures["twice_after"] += 1
                if seq in received_before and not all(after):
                    figures["unflagged"] += 1
                if seq in held and not after:
                    failures.append(f"round {round} ({name}): held event {seq} not delivered after the restart")
            info = app_info(control, APP)
            adopted = info["pid"] == before["pid"] and len(decisions_in_log(daemon.output, "adopt")) > adoptions
            figures["adopted" if adopted else "not_adopted"] += 1
            if not adopted:
                failures.append(f"round {round} ({name}): not adopted (pid {before['pid']} -> {info['pid']})")
            stopped, frozen, _, _ = stranded(record, lambda: app_info(control, APP))
            figures["left_stopped"] += len(stopped)
            figures["left_frozen"] += len(frozen)
        control.close()

        print(f"\nvigild SIGTERM/SIGKILL with a suspended app, suspension = {suspension}: seed {value}, "
              f"rounds {', '.join(signal.Signals(s).name for s in ROUNDS)}")
        print(f"  sent {len(sent) + figures['reused']}, sequence numbers reused {figures['reused']}, "
              f"pending at the stop {figures['pending']}, delivered after the restart "
              f"{figures['delivered_after']}, lost {figures['lost']}, more than once after the restart "
              f"{figures['twice_after']}, unflagged {figures['unflagged']}")
        print(f"  adopted {figures['adopted']} of {len(ROUNDS)}, left stopped {figures['left_stopped']}, "
              f"left frozen {figures['left_frozen']}")
        for name in ("reused", "lost", "twice_after", "unflagged", "left_stopped", "left_frozen"):
            if figures[name]:
                failures.append(f"{name} {figures[name]}")
        self.assertFalse(failures, "; ".join(failures) + context())


if __name__ == "__main__":
    unittest.main()

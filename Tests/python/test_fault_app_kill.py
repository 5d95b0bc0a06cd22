"""Fault suite: SIGKILL of an app that holds unacknowledged events (host tier).

The app (fault_app.py --hold) records every event it receives, fsynced, and
acknowledges it, except the first copy of an event whose attribute `hold` is
true: those it keeps unacknowledged and says it has finished, so vigild may
suspend it holding them. Twenty times: a few events it acknowledges, then
some it holds; once vigild counts exactly the held ones as unacknowledged,
the app is SIGKILLed (at a random moment: running, or suspended), and vigild
must relaunch it and redeliver every held event, flagged `redelivered`.

Figures: events sent, held at the kills, redelivered, lost (sent, never
received), not redelivered (held, not received again by a later process),
unflagged (a later copy with `redelivered: false`), acknowledged events
delivered again, relaunches. Fails on loss, on a held event not redelivered,
on an unflagged copy.
"""

import os
import random
import shutil
import signal
import tempfile
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, FaultDaemon, app_info, connect_control, decisions_in_log,
    freezer_available, kill_all, processes_with, read_jsonl, seed, wait_for,
)

APP = "org.vigil.test.faultholder"
KILLS = 20
# Patience for a step (a relaunch on a busy 2-core machine); a step that takes longer is a failure.
STEP = 15.0


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class AppKillTests(unittest.TestCase):
    def test_sigkill_of_an_app_holding_unacknowledged_events(self):
        value = seed()
        rng = random.Random(value)
        suspension = "cgroup" if freezer_available() else "signal"
        root = tempfile.mkdtemp(prefix="vigil-fault-app-")
        self.addCleanup(shutil.rmtree, root, True)
        # A held event keeps the app awake until its window ends: a short one keeps the test short.
        daemon = FaultDaemon(root, suspension, timings={"wake-budget": 2.0})
        record = os.path.join(root, "app.jsonl")
        daemon.add_app(APP, [PYTHON, FAULT_APP, "--record", record, "--hold"])
        self.addCleanup(daemon.remove_cgroups)
        self.addCleanup(lambda: kill_all(processes_with(record)))
        daemon.start()
        self.addCleanup(daemon.stop)
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        records = lambda: read_jsonl(record)  # noqa: E731
        events = lambda: [r for r in records() if r["kind"] == "event"]  # noqa: E731

        def context():
            brief = ("kind", "pid", "seq", "redelivered", "acked", "attributes", "event", "code", "error", "t")
            return (f"\n--- vigild\n{daemon.log_tail(60)}\n--- app records\n"
                    + "\n".join(str({k: r[k] for k in brief if k in r}) for r in records()[-30:]))

        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in records()), STEP), "no app" + context())
        control.app_action("background", APP)

        sent = {}  # seq -> (round, hold)
        held_at_kill = []  # (seq, pid killed)
        moments = {"running": 0, "suspended": 0}
        stuck = None
        for round in range(KILLS):
            for hold in [False] * rng.randint(0, 3) + [True] * rng.randint(1, 4):
                accepted = control.wake(APP, attributes={"round": round, "hold": hold}, payload=f"{round}".encode())
                sent[accepted["seq"]] = (round, hold)
            mine = [seq for seq, (r, _) in sent.items() if r == round]
            held = [seq for seq in mine if sent[seq][1]]
            received = lambda: {e["seq"] for e in events()}  # noqa: E731
            # The app has all of them and vigild has its acknowledgements: exactly the held ones are open.
            if not wait_for(lambda: set(mine) <= received()
                            and app_info(control, APP)["unacknowledgedEvents"] == len(held), STEP):
                stuck = f"round {round}: the app did not take its events ({len(mine)} sent, {len(held)} to hold)"
                break
            if rng.random() < 0.3:  # suspended: once the window of the wake ends
                wait_for(lambda: app_info(control, APP)["state"] == "suspended", STEP)
            info = app_info(control, APP)
            moments["suspended" if info["state"] == "suspended" else "running"] += 1
            pid = info["pid"]
            os.kill(pid, signal.SIGKILL)
            held_at_kill += [(seq, pid) for seq in held]
            # Relaunched, every held event redelivered to a later process, and all acknowledged.
            again = lambda: {e["seq"] for e in events() if e["pid"] != pid and e["seq"] in held}  # noqa: E731
            if not wait_for(lambda: again() == set(held)
                                  and app_info(control, APP)["unacknowledgedEvents"] == 0, STEP):
                stuck = f"round {round}: after the kill of {pid}, {len(set(held) - again())} of {len(held)} " \
                        f"held events not redelivered"
                break

        copies = {}
        for event in events():
            copies.setdefault(event["seq"], []).append(event)
        lost = [seq for seq in sent if seq not in copies]
        not_redelivered = [seq for seq, pid in held_at_kill
                           if not any(c["pid"] != pid for c in copies.get(seq, []))]
        unflagged = [seq for seq, list_ in copies.items() if any(not c["redelivered"] for c in list_[1:])]
        redelivered = [seq for seq, pid in held_at_kill
                       if any(c["pid"] != pid and c["redelivered"] for c in copies.get(seq, []))]
        acked_again = [seq for seq, (_, hold) in sent.items() if not hold and len(copies.get(seq, [])) > 1]
        relaunches = len(decisions_in_log(daemon.output, "relaunch"))
        processes = len({r["pid"] for r in records() if r["kind"] == "hello"})

        print(f"\napp SIGKILL holding unacknowledged events, suspension = {suspension}: seed {value}, "
              f"{len({pid for _, pid in held_at_kill})} kills "
              f"(app running {moments['running']}, suspended {moments['suspended']})")
        print(f"  sent {len(sent)}, held at the kills {len(held_at_kill)}, redelivered {len(redelivered)}, "
              f"lost {len(lost)}, not redelivered {len(not_redelivered)}, unflagged copies {len(unflagged)}, "
              f"acknowledged events delivered again {len(acked_again)}; relaunches {relaunches}, "
              f"app processes {processes}")
        problems = [f"{name} {value}" for name, value in (
            ("lost", lost), ("not redelivered", not_redelivered), ("unflagged", unflagged)) if value]
        if stuck:
            problems.insert(0, stuck)
        self.assertFalse(problems, "; ".join(map(str, problems)) + context())


if __name__ == "__main__":
    unittest.main()

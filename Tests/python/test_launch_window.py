"""An app launched into the background for an event gets its processing
window from its hello, not from its spawn (host tier, the real vigild).

A process slow to start (an interpreter on a loaded machine) used to be
suspended at the end of a window that began when it was spawned, before it
had connected: frozen with the event it was launched for, it never took it.
Here the app sleeps longer than the wake budget before it connects. It must
receive its event and be suspended only after the budget that starts at its
hello. A process that never connects within `launch-timeout` is ended, and
its event waits for the next one.
"""

import os
import shutil
import tempfile
import time
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, FaultDaemon, app_info, connect_control, freezer_available, kill_all,
    processes_with, read_jsonl, wait_for,
)

APP = "org.vigil.test.slowstarter"
WAKE_BUDGET = 1.0


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class LaunchWindowTests(unittest.TestCase):
    def start_daemon(self, start_delay, launch_timeout=None):
        root = tempfile.mkdtemp(prefix="vigil-launch-window-")
        self.addCleanup(shutil.rmtree, root, True)
        suspension = "cgroup" if freezer_available() else "signal"
        timings = {"wake-budget": WAKE_BUDGET}
        if launch_timeout is not None:
            timings["launch-timeout"] = launch_timeout
        daemon = FaultDaemon(root, suspension, timings=timings)
        self.record = os.path.join(root, "app.jsonl")
        daemon.add_app(APP, [PYTHON, FAULT_APP, "--record", self.record, "--start-delay", str(start_delay)])
        self.addCleanup(daemon.remove_cgroups)
        self.addCleanup(lambda: kill_all(processes_with(self.record)))
        daemon.start()
        self.addCleanup(daemon.stop)
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        return daemon, control

    def records(self, kind):
        return [r for r in read_jsonl(self.record) if r["kind"] == kind]

    def test_an_app_slower_to_start_than_the_wake_budget_takes_its_event(self):
        delay = 3 * WAKE_BUDGET
        daemon, control = self.start_daemon(start_delay=delay)
        launched = time.monotonic()
        accepted = control.wake(APP, payload=b"first")
        self.assertEqual(accepted["disposition"], "launched")
        self.assertTrue(wait_for(lambda: self.records("started"), 10), "the app did not start\n" + daemon.log_tail())
        got = wait_for(lambda: [e for e in self.records("event") if e["seq"] == accepted["seq"]], delay + 10)
        states = [(round(time.monotonic() - launched, 1), app_info(control, APP)["state"])]
        hello = self.records("hello")
        after = f"{hello[0]['t'] - self.records('started')[0]['t']:.1f} s" if hello else "never"
        print(f"\nslow start: hello {after} after the process started (wake budget {WAKE_BUDGET} s); "
              f"event received: {bool(got)}")
        self.assertTrue(got, f"the event launched for never reached the app (states {states})\n" + daemon.log_tail(30))
        # Then suspended as after any wake, once it has finished.
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", WAKE_BUDGET + 10),
                        "not suspended after its window\n" + daemon.log_tail(30))

    def test_an_app_that_never_connects_is_ended_at_the_launch_timeout(self):
        daemon, control = self.start_daemon(start_delay=600, launch_timeout=2)
        accepted = control.wake(APP, payload=b"first")
        self.assertEqual(accepted["disposition"], "launched")
        self.assertTrue(wait_for(lambda: self.records("started"), 10), "the app did not start\n" + daemon.log_tail())
        pid = app_info(control, APP)["pid"]
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "notRunning", 15),
                        "not ended at its launch timeout\n" + daemon.log_tail(30))
        ended = [d for d in control.log(app=APP) if d["action"] == "terminate"]
        self.assertTrue(ended and "launch-timeout" in ended[-1]["reason"], f"decisions: {ended}")
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                                 open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z", 10),
                        f"process {pid} still runs")
        info = app_info(control, APP)
        self.assertEqual(info["queuedEvents"] + info["unacknowledgedEvents"], 1, f"its event must still wait: {info}")


if __name__ == "__main__":
    unittest.main()

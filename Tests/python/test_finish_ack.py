"""`finishedProcessing` carrying the acknowledgement (issue 31), against a
real vigild with real app processes: each wake ends with one frame, the app
is suspended with nothing unacknowledged, nothing comes again, and a bad
`ack` is refused with nothing done. The two-frame path (`ack`, then
`finishedProcessing`) is the fault suite's app's, run by every fault test.
"""

import os
import unittest

from fault_harness import PYTHON, VIGILD, app_info, daemon_with_app, read_jsonl, wait_for

APP = "org.vigil.test.finishack"
HERE = os.path.dirname(os.path.abspath(__file__))
FINISH_ACK_APP = os.path.join(HERE, "finish_ack_app.py")
WAKES = 3


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class FinishAckTests(unittest.TestCase):
    def run_wakes(self, mode):
        daemon, control, record = daemon_with_app(
            self, f"vigil-finishack-{mode}-", APP, [PYTHON, FINISH_ACK_APP, "--record", "{record}", "--mode", mode])
        context = lambda: "\n--- vigild ---\n" + daemon.log_tail()  # noqa: E731
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "active", 15), context())
        control.app_action("background", APP)
        for n in range(WAKES):
            self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), context())
            control.wake(APP, payload=b"x")
            self.assertTrue(wait_for(lambda: len([r for r in read_jsonl(record) if r["kind"] == "finished"]) > n, 15),
                            context())
        # Suspended by the finish, not by the end of the window: nothing was left unacknowledged.
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), context())
        info = app_info(control, APP)
        self.assertEqual((info["wakes"], info["unacknowledgedEvents"], info["queuedEvents"]), (WAKES, 0, 0), info)
        reasons = [d["reason"] for d in control.log(app=APP) if d["action"] == "suspend"]
        early = [r for r in reasons if "finished processing early, nothing left to handle" in r]
        self.assertEqual(len(early), WAKES, reasons)
        events = [r for r in read_jsonl(record) if r["kind"] == "event"]
        self.assertEqual([e["redelivered"] for e in events], [False] * WAKES, "nothing came again")
        self.assertEqual(len({e["seq"] for e in events}), WAKES)
        return record

    def test_the_library_carries_the_ack_in_the_finish(self):
        self.run_wakes("library")

    def test_an_ack_beyond_what_was_sent_acknowledges_what_was_sent(self):
        self.run_wakes("beyond")

    def test_a_bad_ack_is_refused_and_nothing_is_done(self):
        record = self.run_wakes("bad")
        refused = [r for r in read_jsonl(record) if r["kind"].startswith("bad")]
        self.assertEqual([r["kind"] for r in refused], ["badRefused"] * WAKES, refused)
        self.assertTrue(all(r["code"] == "invalidArgument" and "'ack'" in r["error"] for r in refused), refused)


if __name__ == "__main__":
    unittest.main()

"""Order per source, against the real vigild (issue 26, part 1).

docs/lifecycle.md, "Order": events keep their order within a source, not
across sources; an event held for the foreground (its source's mode is not
declared) holds back only the later events of its own source. The issue's
reproduction: an app without `external-accessory`, suspended; a `wake` of
kind `accessory.connected` is `queued`; a later `wake` of kind `test` must
wake the app and be delivered (before, it was queued behind the first, and
the app got nothing until a person brought it to the foreground). In the
foreground the held event comes, with a seq above the test event's (the
seqs a connection sees always increase, so the app's cumulative `ack` of
the test event did not cover it), and nothing is lost.
"""

import os
import unittest

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, daemon_with_app, read_jsonl, wait_for

APP = "org.vigil.test.sourceorder"
STEP = 20.0


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class SourceOrderTests(unittest.TestCase):
    def test_an_event_held_for_the_foreground_holds_back_only_its_source(self):
        daemon, control, record = daemon_with_app(
            self, "vigil-source-order-", APP, [PYTHON, FAULT_APP, "--record", "{record}"], modes=())
        records = lambda: read_jsonl(record)  # noqa: E731
        events = lambda: [r for r in records() if r["kind"] == "event"]  # noqa: E731

        def context():
            return f"\n--- vigild\n{daemon.log_tail(30)}\n--- app records\n" + "\n".join(map(str, records()[-15:]))

        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in records()), STEP), "no app" + context())
        control.app_action("background", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", STEP), "not suspended" + context())

        held = control.wake(APP, kind="accessory.connected", attributes={"connectionID": 1, "protocolStrings": []})
        self.assertEqual(held["disposition"], "queued", held)
        self.assertEqual(app_info(control, APP)["state"], "suspended")

        # The reproduction: before per-source order this was `queued` too, and never delivered.
        woken = control.wake(APP, payload=b"later")
        self.assertEqual(woken["disposition"], "woke", f"{woken}" + context())
        self.assertTrue(wait_for(lambda: any(e["seq"] == woken["seq"] for e in events()), STEP),
                        "the test event was not delivered" + context())
        # Acknowledged (cumulatively, up to its seq), and the held event is still there, unsent.
        self.assertTrue(wait_for(lambda: app_info(control, APP)["unacknowledgedEvents"] == 0
                                 and app_info(control, APP)["state"] == "suspended", STEP), context())
        self.assertEqual(app_info(control, APP)["queuedEvents"], 1)
        self.assertNotIn("accessory.connected", [e["eventKind"] for e in events()])

        # A later event of the held source waits behind it: it wakes nothing.
        behind = control.wake(APP, kind="accessory.disconnected", attributes={"connectionID": 1})
        self.assertEqual(behind["disposition"], "queued", behind)

        control.app_action("foreground", APP)
        self.assertTrue(wait_for(lambda: [e["eventKind"] for e in events()][-2:]
                                 == ["accessory.connected", "accessory.disconnected"], STEP),
                        "the held events did not come in the foreground, in order" + context())
        pid = events()[-1]["pid"]
        seqs = [e["seq"] for e in events() if e["pid"] == pid]
        self.assertEqual(seqs, sorted(seqs), "seqs on one connection must increase" + context())
        self.assertGreater(events()[-2]["seq"], woken["seq"], "the overtaken event is renumbered above the test event")
        self.assertTrue(wait_for(lambda: (lambda i: i["unacknowledgedEvents"] + i["queuedEvents"] == 0)(
            app_info(control, APP)), STEP), "not all acknowledged" + context())
        print(f"\nsource order: held seq {held['seq']} ({held['disposition']}), test seq {woken['seq']} "
              f"({woken['disposition']}), held events delivered in the foreground as seqs {seqs[-2:]}")


if __name__ == "__main__":
    unittest.main()

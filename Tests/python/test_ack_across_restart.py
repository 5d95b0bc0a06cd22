"""Acknowledgement across a daemon restart (issue 26; docs/lifecycle.md,
"Acknowledgement across connections").

An `ack` covers the events the acknowledging process was sent: on its
current connection, or with the same seq on an earlier connection of the
same process (same pid and start time), even of a daemon since SIGKILLed.
An `ack` from another process for such a seq is refused (decision `refuse`)
and the event comes again, flagged `redelivered`.

Both tests hold an event back from redelivery after the restart: the app
declares no background mode, receives a `accessory.connected` in the
foreground and holds it (fault_app.py --hold); vigild is SIGKILLed; the
new daemon has the app in the background, where that event may not go, so
it waits, journaled as sent. Then:

- the same process, adopted, acknowledges it on its new connection
  (fault_app.py --ack-file): accepted, and it never comes again, in the
  foreground either (before the rule it was refused and delivered again);
- the app's process is killed too, a new one launched (by a `test` wake,
  into the background) acknowledges the old seq: refused, and in the
  foreground the event comes again, flagged `redelivered`.
"""

import os
import signal
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, app_info, connect_control, daemon_with_app, decisions_in_log, read_jsonl, wait_for,
)

APP = "org.vigil.test.ackrestart"
STEP = 20.0
HELD = {"connectionID": 1, "protocolStrings": [], "hold": True}


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class AckAcrossRestartTests(unittest.TestCase):
    def start(self, prefix):
        daemon, control, record = daemon_with_app(
            self, prefix, APP, [PYTHON, FAULT_APP, "--record", "{record}", "--hold", "--ack-file", "{record}.ack"],
            modes=(), extra='on-stop = "leave"')
        self.daemon, self.control, self.record = daemon, control, record
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in self.records()), STEP), "no app" + self.context())
        held = control.wake(APP, kind="accessory.connected", attributes=HELD)
        self.assertEqual(held["disposition"], "delivered", held)
        self.assertTrue(wait_for(lambda: any(e["seq"] == held["seq"] for e in self.events()), STEP), self.context())
        self.assertTrue(wait_for(lambda: app_info(control, APP)["unacknowledgedEvents"] == 1, STEP), self.context())
        return held["seq"]

    def records(self):
        return read_jsonl(self.record)

    def events(self):
        return [r for r in self.records() if r["kind"] == "event"]

    def context(self):
        return (f"\n--- vigild\n{self.daemon.log_tail(30)}\n--- app records\n"
                + "\n".join(map(str, self.records()[-12:])))

    def restart(self, meanwhile=lambda: None):
        """SIGKILL vigild, call `meanwhile`, and start it again on the same state folder."""
        self.control.close()
        self.daemon.kill(signal.SIGKILL)
        meanwhile()
        self.daemon.start()
        self.control = connect_control(self.daemon.socket)
        self.addCleanup(self.control.close)

    def refusals(self):
        return [line for line in decisions_in_log(self.daemon.output, "refuse") if "ack up to seq" in line]

    def test_the_same_process_acknowledges_after_a_restart(self):
        seq = self.start("vigil-ack-restart-same-")
        pid = app_info(self.control, APP)["pid"]
        adoptions = len(decisions_in_log(self.daemon.output, "adopt"))

        def ask_for_the_ack():
            with open(self.record + ".ack", "w") as file:
                file.write(str(seq))
        self.restart(ask_for_the_ack)
        self.assertTrue(wait_for(lambda: len(decisions_in_log(self.daemon.output, "adopt")) > adoptions, STEP),
                        "not adopted" + self.context())
        # Its next connection (it reconnects within a second) begins with `ack seq`.
        self.assertTrue(wait_for(lambda: any(r["kind"] == "acked" and r.get("late") for r in self.records()), STEP),
                        "the app did not acknowledge on its new connection" + self.context())
        self.assertTrue(wait_for(lambda: self.refusals() or (lambda i: i["unacknowledgedEvents"] + i["queuedEvents"] == 0)(
            app_info(self.control, APP)), STEP), self.context())
        self.assertEqual(self.refusals(), [], "the same process's ack was refused" + self.context())
        self.assertEqual(app_info(self.control, APP)["pid"], pid)

        # In the foreground (where it could go) it does not come again; a later event does.
        self.control.app_action("foreground", APP)
        after = self.control.wake(APP, payload=b"after")["seq"]
        self.assertTrue(wait_for(lambda: any(e["seq"] == after for e in self.events()), STEP), self.context())
        copies = [e for e in self.events() if e["seq"] == seq]
        self.assertEqual(len(copies), 1, "an acknowledged event was delivered again" + self.context())
        print(f"\nack across a restart, same process (pid {pid}): seq {seq} acknowledged after the SIGKILL, "
              f"copies delivered {len(copies)}, refusals {len(self.refusals())}")

    def test_another_process_may_not_acknowledge_what_it_was_not_sent(self):
        seq = self.start("vigil-ack-restart-other-")
        old = app_info(self.control, APP)["pid"]

        def kill_the_app():
            os.kill(old, signal.SIGKILL)
            self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{old}") or _zombie(old), STEP))
            with open(self.record + ".ack", "w") as file:
                file.write(str(seq))
        self.restart(kill_the_app)

        # A new process, launched into the background by a test event, acknowledges the old seq.
        woken = self.control.wake(APP, payload=b"wake")
        self.assertTrue(wait_for(lambda: any(r["kind"] == "acked" and r.get("late") for r in self.records()), STEP),
                        "the new process did not acknowledge" + self.context())
        self.assertTrue(wait_for(lambda: self.refusals(), STEP), "the other process's ack was not refused" + self.context())
        self.assertTrue(wait_for(lambda: app_info(self.control, APP)["pid"] is not None, STEP), self.context())
        new = app_info(self.control, APP)["pid"]
        self.assertNotEqual(new, old)
        self.assertTrue(wait_for(lambda: any(e["seq"] == woken["seq"] for e in self.events()), STEP), self.context())
        self.assertEqual(app_info(self.control, APP)["queuedEvents"], 1, "the held event must stay queued" + self.context())

        # In the foreground the held event comes again, flagged, to the new process: with a
        # new seq, since the test event (seq above it) went first on this connection.
        self.control.app_action("foreground", APP)
        held = lambda: [e for e in self.events() if e["eventKind"] == "accessory.connected" and e["pid"] == new]  # noqa: E731
        self.assertTrue(wait_for(held, STEP), "the held event was not redelivered" + self.context())
        copy = held()[0]
        self.assertTrue(copy["redelivered"], copy)
        self.assertGreater(copy["seq"], woken["seq"], copy)
        print(f"\nack across a restart, another process (pid {old} -> {new}): ack of seq {seq} refused "
              f"({len(self.refusals())} refusal(s)), redelivered {copy['redelivered']} as seq {copy['seq']}")


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


if __name__ == "__main__":
    unittest.main()

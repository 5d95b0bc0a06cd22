"""The crash point of what apps asked of Bluetooth (issue 26, part 3;
docs/reliability.md, "Crash points"): `state.parts`, state.json rewritten
for the Bluetooth part alone, against the host-tier BlueZ mock.

The app (example_app.py) registers a central and subscribes to a heart-rate
monitor's measurements; vigild SIGKILLs itself right before or after the
first parts-only write that holds the subscription. A vigild started again
on the same state without VIGIL_CRASH_POINT:

- after the write: subscribes again by itself, from the state file, and a
  value relaunches the app with its central restored;
- before it: has no subscription to restore (the intent was lost with the
  daemon, as in any crash before the save; unless a whole snapshot took it
  first); the app, launched again, asks again and gets values. Either way nothing is left half-done: no
  subscription the daemon does not know of, and the app gets values.
"""

import json
import os
import subprocess
import unittest

import test_ble_daemon
from ble_harness import VIGILD, missing
from test_ble_daemon import APP, CentralRig

# The parts-only write that first holds the subscription.
HIT = int(os.environ.get("VIGIL_TEST_PARTS_HIT", "1"))


@unittest.skipIf(missing(), missing() or "")
class BluetoothIntentCrashPointTests(CentralRig):
    point = None  # set per test before setUp starts the daemon
    notifying = test_ble_daemon.BluetoothCentralTests.notifying

    def start_daemon(self):
        env = dict(self.mock.env)
        if self.point:
            env["VIGIL_CRASH_POINT"] = self.point
        self.daemon = subprocess.Popen(
            [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml"],
            env=env, stdout=self.daemon_log, stderr=self.daemon_log, stdin=subprocess.DEVNULL)
        self.control = self.connect()

    def saved_subscription(self):
        try:
            with open(f"{self.dir}/state/state.json") as file:
                central = json.load(file).get("bluetooth", {}).get("central", {}).get(APP, {})
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        return any(s["path"]["characteristic"].startswith("00002a37") for s in central.get("subscriptions", []))

    def daemon_text(self):
        with open(f"{self.dir}/vigild.log", errors="replace") as log:
            return log.read()

    def run_point(self, moment):
        point = f"state.parts:{moment}"
        notifications = lambda: [r for r in self.records() if r.get("eventKind") == "ble.notification"]  # noqa: E731
        self.control.app_action("launch", APP)
        # The first parts-only write holding the subscription: the daemon armed at every hit up to it.
        self.wait_until(lambda: self.daemon.poll() is not None or self.saved_subscription(), "the subscription's save")
        if self.daemon.poll() is None:
            self.skipTest("no parts-only write held the subscription")  # pragma: no cover
        self.assertIn(f"crash point {point}", self.daemon_text())
        saved = self.saved_subscription()
        # After the write the file has the subscription, unless that write held only the
        # registration (the subscription a save later): then as before it. Before it, the file
        # has it only if a whole snapshot (`snapshot.state`) took it first.
        self.point = None
        self.start_daemon()
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "poweredOn", "Bluetooth powered on")
        if saved:
            self.wait_until(self.notifying, "StartNotify from the restarted daemon")
        else:
            # The dead daemon's notify session ends with its bus connection.
            self.wait_until(lambda: not self.notifying(), "no subscription the restarted daemon does not know of")
            self.control.app_action("launch", APP)
            self.wait_until(self.notifying, "the app's subscription, asked again")
        before = len(notifications())
        self.mock.control.NotifyHeartRate(self.hrm, self.dbus.UInt16(77), self.dbus.Array([], signature="q"))
        self.wait_until(lambda: len(notifications()) > before, "a value after the restart")
        return f"{point:20} saved {saved}, subscribed again by {'the daemon' if saved else 'the app'}, value delivered"

    def setUp(self):
        moment = self._testMethodName.rsplit("_", 1)[1]
        self.point = f"state.parts:{moment}:{HIT}"
        super().setUp()

    def test_crash_point_before(self):
        print("\n" + self.run_point("before"))

    def test_crash_point_after(self):
        print("\n" + self.run_point("after"))


if __name__ == "__main__":
    unittest.main()

"""The crash point of what apps asked of Bluetooth (issue 26, part 3;
docs/reliability.md, "Crash points"): `state.parts`, state.json rewritten
for the Bluetooth part alone, against the host-tier BlueZ mock.

The app (example_app.py) registers a central and connects to a heart-rate
monitor, and subscribes to its measurements when a wake tells it to. The
point is armed through a gate file (`@FILE`, docs/reliability.md) once the
registration's saves are done, so the hit is the parts-only write that holds
the subscription, in every run. A vigild started again on the same state
without VIGIL_CRASH_POINT:

- after the write: the file holds the subscription; the daemon subscribes
  again by itself, and a value reaches the app;
- before it: the file does not hold it (the intent was lost with the daemon,
  as in any crash before the save); no subscription is left at BlueZ that
  the daemon does not know of, and the app, asked again, subscribes and
  gets values.
"""

import json
import os
import subprocess
import tempfile
import time
import unittest

import test_ble_daemon
from ble_harness import VIGILD, missing
from test_ble_daemon import APP, CentralRig
from vigil_client import VigilError


@unittest.skipIf(missing(), missing() or "")
class BluetoothIntentCrashPointTests(CentralRig):
    point = None  # set per test before setUp starts the daemon
    notifying = test_ble_daemon.BluetoothCentralTests.notifying

    def manifest(self):
        return super().manifest().replace('"--restore-id"', '"--ble-notify-on-wake", "--restore-id"')

    def start_daemon(self):
        env = dict(self.mock.env)
        if self.point:
            env["VIGIL_CRASH_POINT"] = self.point
        self.daemon = subprocess.Popen(
            [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml"],
            env=env, stdout=self.daemon_log, stderr=self.daemon_log, stdin=subprocess.DEVNULL)
        self.control = self.connect()

    def saved_central(self):
        try:
            with open(f"{self.dir}/state/state.json") as file:
                return json.load(file).get("bluetooth", {}).get("central", {}).get(APP)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def saved_subscription(self):
        central = self.saved_central() or {}
        return any(s["path"]["characteristic"].startswith("00002a37") for s in central.get("subscriptions", []))

    def settled(self):
        """The central's registration and connection are saved and no save has
        come for a second (the coalesced saves of the launch are done)."""
        try:
            age = time.time() - os.stat(f"{self.dir}/state/state.json").st_mtime
        except FileNotFoundError:
            return False
        return self.saved_central() is not None and age > 1.0

    def daemon_text(self):
        with open(f"{self.dir}/vigild.log", errors="replace") as log:
            return log.read()

    def subscribed_by_app(self):
        return [r for r in self.records() if r["kind"] == "subscribed"]

    def run_point(self, moment):
        point = f"state.parts:{moment}"
        notifications = lambda: [r for r in self.records() if r.get("eventKind") == "ble.notification"]  # noqa: E731
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's central")
        self.wait_until(self.settled, "the central's saves")
        self.assertFalse(self.saved_subscription())
        with open(self.gate, "w"):
            pass
        try:
            self.control.wake(APP, payload=b"subscribe")
        except (VigilError, OSError):
            pass  # the daemon may die before its reply
        self.wait_until(lambda: self.daemon.poll() is not None, f"the daemon to reach {point}")
        self.assertIn(f"crash point {point}", self.daemon_text())
        saved = self.saved_subscription()
        self.assertEqual(saved, moment == "after", "the parts-only write did not hold the subscription")
        os.unlink(self.gate)
        self.point = None
        self.start_daemon()
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "poweredOn", "Bluetooth powered on")
        if saved:
            self.wait_until(self.notifying, "StartNotify from the restarted daemon")
        else:
            # The dead daemon's notify session ends with its bus connection.
            self.wait_until(lambda: not self.notifying(), "no subscription the restarted daemon does not know of")
            asked = len(self.subscribed_by_app())
            if next(a for a in self.control.apps() if a["id"] == APP)["state"] == "notRunning":
                self.control.app_action("launch", APP)
            self.control.wake(APP, payload=b"subscribe")
            self.wait_until(lambda: len(self.subscribed_by_app()) > asked, "the app asked again")
            self.wait_until(self.notifying, "the app's subscription, asked again")
        before = len(notifications())
        self.mock.control.NotifyHeartRate(self.hrm, self.dbus.UInt16(77), self.dbus.Array([], signature="q"))
        self.wait_until(lambda: len(notifications()) > before, "a value after the restart")
        return f"{point:20} saved {saved}, subscribed again by {'the daemon' if saved else 'the app'}, value delivered"

    def setUp(self):
        moment = self._testMethodName.rsplit("_", 1)[1]
        self.gate = tempfile.mktemp(prefix="vigil-crash-gate-")
        self.point = f"state.parts:{moment}:1@{self.gate}"
        super().setUp()
        self.addCleanup(lambda: os.path.exists(self.gate) and os.unlink(self.gate))

    def test_crash_point_before(self):
        print("\n" + self.run_point("before"))

    def test_crash_point_after(self):
        print("\n" + self.run_point("after"))


if __name__ == "__main__":
    unittest.main()

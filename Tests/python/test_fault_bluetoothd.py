"""Fault suite: 50 bluetoothd restarts with a subscribed app (host tier, BlueZ mock).

vigild talks to the BlueZ mock (Tests/bluez-mock) on a private system bus.
The app (clients/python/example_app.py) connects to a heart-rate monitor and
subscribes to its measurement characteristic, then goes to the background:
each notification wakes it, it records it and acknowledges it. Fifty times,
bluetoothd is restarted (all its objects, links and notify sessions gone; the
device comes back as a new object), vigild restores the link and the
subscription by itself, and notifications are sent.

A window is one bluetoothd lifetime. In each, one notification is sent right
away (before vigild can have subscribed again) and then, once the mock shows
the characteristic notifying, five more, each numbered. Definition: a
notification is *sent after the subscription was restored* when bluetoothd
(the mock) handed it to at least one notify session (its Notify returned >= 1):
from then on, vigild holds the subscription, and every such notification must
reach the app. One the mock delivered to nobody is counted, not required.

Figures per window and in total: sent (delivered to a session by the mock),
not delivered by the mock, received by the app, lost; time to restore the
subscription. Fails when any notification sent after the subscription was
restored is lost, or when a subscription is not restored within 30 s.
"""

import json
import os
import shutil
import struct
import sys
import tempfile
import time
import unittest

from fault_harness import (
    EXAMPLE_APP, PYTHON, REPO, VIGILD, FaultDaemon, app_info, app_manifest, connect_control, freezer_available,
    kill_all, processes_with, read_jsonl, wait_for,
)

sys.path.insert(0, os.path.join(REPO, "Tests", "bluez-mock"))
from test_ble_daemon import missing  # noqa: E402  (the BlueZ mock's prerequisites and vigild)

APP = "org.vigil.test.faultble"
HRM = "AA:BB:CC:DD:EE:01"
HRS, MEASUREMENT = "180d", "2a37"
RESTARTS = 50
AFTER_RESTORE = 5
RESTORE_LIMIT = 30.0
ARRIVAL_LIMIT = 15.0


@unittest.skipIf(missing(), missing() or "")
class BluetoothdRestartTests(unittest.TestCase):
    def test_fifty_bluetoothd_restarts_with_a_subscribed_app(self):
        import dbus
        from bluez_mock import MockBlueZ

        mock = MockBlueZ()
        mock.start()
        self.addCleanup(mock.stop)
        hrm = mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        root = tempfile.mkdtemp(prefix="vigil-fault-ble-")
        self.addCleanup(shutil.rmtree, root, True)
        suspension = "cgroup" if freezer_available() else "signal"
        daemon = FaultDaemon(root, suspension, bluetooth=True, env={"DBUS_SYSTEM_BUS_ADDRESS": mock.address})
        record = os.path.join(root, "app.jsonl")
        with open(os.path.join(daemon.apps_dir, APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, EXAMPLE_APP, "--record", record, "--ble-peripheral", HRM,
                                              "--ble-notify", f"{HRS}/{MEASUREMENT}", "--restore-id", "hrm"],
                                        modes=["bluetooth-central"]))
        self.addCleanup(daemon.remove_cgroups)
        self.addCleanup(lambda: kill_all(processes_with(record)))
        daemon.start()
        self.addCleanup(daemon.stop)
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        records = lambda: read_jsonl(record)  # noqa: E731

        def received():
            return [struct.unpack("<H", bytes.fromhex(r["payloadHex"])[1:3])[0] for r in records()
                    if r.get("kind") == "event" and r.get("eventKind") == "ble.notification"
                    and len(r["payloadHex"]) == 6]

        def characteristic():
            return mock.bus.get_object("org.bluez", f"{hrm}/service000a/char000b")

        def notifying():
            try:
                properties = characteristic().GetAll("org.bluez.GattCharacteristic1",
                                                     dbus_interface="org.freedesktop.DBus.Properties")
            except dbus.exceptions.DBusException:
                return False
            return bool(properties.get("Notifying") or properties.get("NotifyAcquired"))

        def notify(number):
            """Sends measurement `number` (flags 0x01: a 16-bit rate); how many sessions bluetoothd gave it to."""
            value = dbus.Array([dbus.Byte(b) for b in struct.pack("<BH", 0x01, number)], signature="y")
            return int(mock.control.Notify(f"{hrm}/service000a/char000b", value))

        def context():
            return (f"\n--- vigild\n{daemon.log_tail(40)}\n--- app records\n"
                    + "\n".join(json.dumps(r)[:200] for r in records()[-10:]))

        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "bleReady" for r in records()), 20),
                        "the app did not subscribe" + context())
        self.assertTrue(wait_for(notifying, 20), "no subscription at the mock" + context())
        control.app_action("background", APP)

        windows = []  # (restore s, sent, undelivered by the mock, received, lost numbers)
        failures = []
        number = 0
        for window in range(RESTARTS):
            mock.restart_bluez()
            hrm = mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
            restarted = time.monotonic()
            sent, undelivered = [], []
            number += 1
            (sent if notify(number) else undelivered).append(number)  # before any subscription can be back
            if not wait_for(notifying, RESTORE_LIMIT):
                failures.append(f"window {window}: subscription not restored within {RESTORE_LIMIT} s")
                windows.append((None, 0, len(undelivered), 0, []))
                break
            restore = time.monotonic() - restarted
            for _ in range(AFTER_RESTORE):
                number += 1
                (sent if notify(number) else undelivered).append(number)
            wait_for(lambda: set(sent) <= set(received()), ARRIVAL_LIMIT)
            got = set(received())
            lost = [n for n in sent if n not in got]
            windows.append((restore, len(sent), len(undelivered), len([n for n in sent if n in got]), lost))
            if lost:
                failures.append(f"window {window}: lost {lost}")

        total_sent = sum(w[1] for w in windows)
        total_lost = sum(len(w[4]) for w in windows)
        restores = sorted(w[0] for w in windows if w[0] is not None)
        print(f"\nbluetoothd restarts with a subscribed app (suspension = {suspension}): {len(windows)} windows")
        print("  window: restore s, sent after restore, not delivered by bluetoothd, received, lost")
        for index in range(0, len(windows), 10):
            print("  " + "  ".join(f"{i}: {w[0] or 0:.2f} {w[1]}/{w[2]}/{w[3]}/{len(w[4])}"
                                   for i, w in enumerate(windows[index:index + 10], start=index)))
        if restores:
            print(f"  total: sent {total_sent}, not delivered by bluetoothd {sum(w[2] for w in windows)}, "
                  f"received {sum(w[3] for w in windows)}, lost {total_lost}; restore median "
                  f"{restores[len(restores) // 2]:.2f} s, max {restores[-1]:.2f} s; app "
                  f"{app_info(control, APP)['state']}, launches {app_info(control, APP)['launches']}")
        self.assertFalse(failures, "; ".join(failures) + context())


if __name__ == "__main__":
    unittest.main()

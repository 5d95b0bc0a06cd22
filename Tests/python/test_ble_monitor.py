"""Advertisement monitors through the real vigild, against the host-tier
BlueZ mock: a broadcast sensor whose manufacturer data changes with every
advertisement (the mock's SetAdvertisement: one PropertiesChanged each, as
bluetoothd emits for changed data).

What a pass proves: request checking, pattern matching, found/lost, every
advertisement delivered in order and batched to a suspended app, loss
counted and reported (never silent) when the app falls behind. The lab test
Tests/Lab/62-vigild-ble-monitor.py checks the same against real BlueZ and a
Bumble broadcaster.
"""

import json
import os
import queue
import subprocess
import threading
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ble_harness import EXAMPLE_APP, PYTHON, VIGILD, MockBlueZDaemonTest, missing  # noqa: E402
from vigil_client import VigilError  # noqa: E402
import vigil  # noqa: E402

APP = "org.vigil.test.blemonitor"
SENSOR = "C0:FF:EE:00:00:01"
OTHER = "C0:FF:EE:00:00:02"
COMPANY = 0x0499  # Ruuvi Innovations
MONITOR = {"monitor": "ruuvi", "patterns": [{"type": "manufacturer", "company": COMPANY, "prefix": "05"}],
           "lostTimeout": 1.0}


class MonitorRig(MockBlueZDaemonTest):
    APP = APP
    #: Extra arguments of the app.
    app_arguments = ()

    def prepare_mock(self):
        dbus = __import__("dbus")
        self.sensor = self.mock.control.AddLEDevice("hci0", SENSOR, "", dbus.Dictionary({}, signature="sv"))
        self.other = self.mock.control.AddLEDevice("hci0", OTHER, "", dbus.Dictionary({}, signature="sv"))

    def manifest(self):
        arguments = ", ".join(json.dumps(a) for a in self.app_arguments)
        return (f'id = "{APP}"\n'
                f'exec = ["{PYTHON}", "{EXAMPLE_APP}", "--record", "{self.record}", "--ble-monitor", '
                f'{json.dumps(json.dumps(MONITOR))}, "--restore-id", "sensors"{", " if arguments else ""}{arguments}]\n'
                'background-modes = ["bluetooth-central"]\n')

    def properties(self, counter, company=COMPANY, first=0x05, rssi=-60):
        """Device1 properties of one advertisement carrying `counter`."""
        dbus = self.dbus
        data = dbus.Array([dbus.Byte(first), dbus.Byte(counter >> 8 & 0xFF), dbus.Byte(counter & 0xFF)], signature="y",
                          variant_level=1)
        return dbus.Dictionary({
            "ManufacturerData": dbus.Dictionary({dbus.UInt16(company): data}, signature="qv", variant_level=1),
            "RSSI": dbus.Int16(rssi, variant_level=1)}, signature="sv")

    def advertise(self, device, counter, **options):
        self.mock.control.SetAdvertisement(device, self.properties(counter, **options))

    def advertise_many(self, device, first, count, chunk=50):
        """`count` advertisements numbered first.., back to back in chunks."""
        for start in range(first, first + count, chunk):
            series = [self.properties(n) for n in range(start, min(first + count, start + chunk))]
            self.mock.control.AdvertiseMany(device, self.dbus.Array(series, signature="a{sv}"))

    def state(self):
        return next(a for a in self.control.apps() if a["id"] == APP)["state"]

    def advertisements(self, address=SENSOR):
        return [r for r in self.records() if r["kind"] == "advertisement" and r["address"] == address]

    def counters(self, address=SENSOR):
        return [int(r["manufacturer"][str(COMPANY)][2:], 16) for r in self.advertisements(address)]

    def state_file(self):
        try:
            with open(f"{self.dir}/state/state.json") as file:
                return file.read()
        except FileNotFoundError:
            return ""

    def wakes(self):
        return [d for d in self.control.log(app=APP) if d["action"] == "wake"]


@unittest.skipIf(missing(), missing() or "")
class MonitorControlTests(MonitorRig):
    def test_found_every_advertisement_then_lost_and_a_non_matching_device_is_silent(self):
        c = self.control
        c.request("ble.monitor.start", **MONITOR)
        self.advertise(self.other, 1, company=0x004C)  # another company: no match
        self.advertise(self.other, 2, first=0x03)  # Ruuvi's older format 3: the prefix does not match
        self.advertise(self.sensor, 1)
        found = self.push(c, "ble.monitor.found")["attributes"]
        self.assertEqual((found["monitor"], found["peripheral"], found["rssi"]), ("ruuvi", SENSOR, -60))
        for n in range(2, 6):
            self.advertise(self.sensor, n)
        seen = []
        while len(seen) < 5:
            push = self.push(c, "ble.monitor.advertisements")
            for record in vigil.advertisement_records(push["attributes"], push.body):
                self.assertEqual(record.address, SENSOR, "only the matching device")
                self.assertEqual(record.rssi, -60)
                self.assertGreater(record.time, 1.6e9, "the time received, in seconds since 1970")
                seen.append(record.manufacturer_data[COMPANY][2])
        self.assertEqual(seen, [1, 2, 3, 4, 5], "every advertisement, in order")
        lost = self.push(c, "ble.monitor.lost")["attributes"]
        self.assertEqual((lost["monitor"], lost["peripheral"]), ("ruuvi", SENSOR))
        listed = c.request("ble.monitors")["monitors"]
        self.assertEqual([(m["monitor"], m["found"], m["delivered"], m["lost"]) for m in listed], [("ruuvi", [], 5, 0)])
        # Found again when it comes back.
        self.advertise(self.sensor, 6)
        self.assertEqual(self.push(c, "ble.monitor.found")["attributes"]["peripheral"], SENSOR)
        c.request("ble.monitor.stop", monitor="ruuvi")
        self.assertEqual(c.request("ble.monitors")["monitors"], [])

    def test_vigilctl_ble_monitor_prints_found_and_every_advertisement(self):
        vigilctl = os.path.join(os.path.dirname(VIGILD), "vigilctl")
        process = subprocess.Popen(
            [vigilctl, "ble", "monitor", "--manufacturer", "0x0499:05", "--lost-timeout", "1", "--json", "--socket", self.socket],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(json.loads(line)) for line in process.stdout], daemon=True).start()
        try:
            # vigilctl's monitor runs from some moment on: advertise until it reports the device found.
            seen = []
            counter = 0
            deadline = time.monotonic() + 30
            while not any(line["event"] == "found" for line in seen):
                self.assertLess(time.monotonic(), deadline, f"vigilctl printed no found line: {seen}")
                counter += 1
                self.advertise(self.sensor, counter)
                self.advertise(self.other, counter, company=0x004C)
                try:
                    seen.append(lines.get(timeout=0.1))
                except queue.Empty:
                    pass
            for n in range(counter + 1, counter + 4):
                self.advertise(self.sensor, n)
            while [line["event"] for line in seen].count("advertisement") < 3:
                seen.append(lines.get(timeout=20))
            advertisements = [line for line in seen if line["event"] == "advertisement"]
            self.assertTrue(all(line["peripheral"] == SENSOR for line in advertisements), seen)
            counters = [int(line["manufacturerData"][str(COMPANY)][2:], 16) for line in advertisements]
            self.assertEqual(counters, sorted(counters), "in order")
        finally:
            process.terminate()
            process.communicate(timeout=10)

    def test_rssi_thresholds(self):
        c = self.control
        c.request("ble.monitor.start", **dict(MONITOR, rssiFound=-50, rssiLost=-80))
        self.advertise(self.sensor, 1, rssi=-70)  # too weak to be found
        self.no_push(c, "ble.monitor.found", within=0.5)
        self.advertise(self.sensor, 2, rssi=-45)
        self.push(c, "ble.monitor.found")
        self.advertise(self.sensor, 3, rssi=-75)  # weaker, still heard
        self.advertise(self.sensor, 4, rssi=-90)  # below rssiLost: not heard
        values = []
        deadline = time.monotonic() + 10
        while 3 not in values and time.monotonic() < deadline:
            push = self.push(c, "ble.monitor.advertisements")
            values += [r.manufacturer_data[COMPANY][2] for r in vigil.advertisement_records(push["attributes"], push.body)]
        self.assertEqual(values, [2, 3])
        self.push(c, "ble.monitor.lost")

    def test_bad_requests_get_clear_errors(self):
        c = self.control
        for members, words in (
            ({"monitor": "m", "patterns": []}, "no patterns"),
            ({"monitor": "", "patterns": MONITOR["patterns"]}, "1 to 64"),
            ({"monitor": "m", "patterns": [{"type": "colour"}]}, "unknown pattern type"),
            ({"monitor": "m", "patterns": [{"type": "manufacturer"}]}, "needs 'company'"),
            ({"monitor": "m", "patterns": [{"type": "manufacturer", "company": 70000}]}, "16-bit"),
            ({"monitor": "m", "patterns": [{"type": "manufacturer", "company": 1, "prefix": "zz"}]}, "not hex"),
            ({"monitor": "m", "patterns": [{"type": "service", "uuid": "nope"}]}, "not a Bluetooth UUID"),
            ({"monitor": "m", "patterns": [{"type": "name", "name": ""}]}, "non-empty"),
            ({"monitor": "m", "patterns": MONITOR["patterns"], "lostTimeout": 0}, "lostTimeout"),
            ({"monitor": "m", "patterns": MONITOR["patterns"], "rssiFound": -90, "rssiLost": -50}, "rssiLost"),
        ):
            with self.assertRaises(VigilError) as error:
                c.request("ble.monitor.start", **members)
            self.assertEqual(error.exception.code, "invalidArgument", members)
            self.assertIn(words, error.exception.message, members)
        self.assertEqual(c.request("ble.monitors")["monitors"], [], "nothing started by a refused request")
        c.request("ble.monitor.stop", monitor="never-started")


@unittest.skipIf(missing(), missing() or "")
class MonitorAppTests(MonitorRig):
    def launch(self):
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's monitor")

    def test_a_suspended_app_gets_every_advertisement_in_order_batched_and_a_non_match_does_not_wake_it(self):
        self.launch()
        self.control.app_action("background", APP)
        self.wait_until(lambda: self.state() == "suspended", "suspension")
        # A device that does not match: no wake, nothing delivered.
        wakes_before = len(self.wakes())
        for n in range(1, 6):
            self.advertise(self.other, n, company=0x004C)
        self.control.request("ble.monitors")  # a round trip: vigild has handled the signals before it
        time.sleep(0.5)
        self.assertEqual(len(self.wakes()), wakes_before, "a non-matching device woke the app")
        self.assertEqual(self.state(), "suspended")
        # 400 readings back to back while the app is frozen between wakes.
        self.advertise_many(self.sensor, 1, 400)
        self.wait_until(lambda: len(self.advertisements()) >= 400, "400 advertisements in the app", timeout=60)
        self.assertEqual(self.counters(), list(range(1, 401)), "complete, in order, each once")
        events = sorted({r["seq"] for r in self.advertisements()})
        self.assertLess(len(events), 400 / 5, f"batched: {len(events)} events for 400 advertisements")
        self.assertEqual(sum({r["seq"]: r["lost"] for r in self.advertisements()}.values()), 0)
        wakes = [w for w in self.wakes()[wakes_before:] if "ble.monitor" in w["reason"]]
        self.assertLessEqual(len(wakes), len(events) + 1, "at most a wake per event (and the found event)")
        found = [r for r in self.records() if r["kind"] == "event" and r["eventKind"] == "ble.monitor.found"]
        self.assertEqual([r["attributes"]["peripheral"] for r in found], [SENSOR])
        self.assertEqual(self.advertisements(OTHER), [])
        self.wait_until(lambda: any(r["kind"] == "event" and r["eventKind"] == "ble.monitor.lost" for r in self.records()),
                        "the sensor lost after it stopped")

    def test_a_monitor_relaunches_a_terminated_app_and_survives_a_daemon_restart(self):
        self.launch()
        self.control.app_action("terminate", APP)
        self.wait_until(lambda: self.state() == "notRunning", "termination")
        self.advertise(self.sensor, 1)
        self.wait_until(lambda: len([r for r in self.records() if r["kind"] == "launch"]) == 2, "a relaunch")
        self.wait_until(lambda: self.counters() == [1], "the advertisement that relaunched it")
        relaunch = [r for r in self.records() if r["kind"] == "launch"][-1]["launch"]
        self.assertEqual(relaunch["restoreIdentifiers"], ["sensors"])
        # The monitor is in the state file: a new vigild runs it without the app asking again.
        self.wait_until(lambda: "ruuvi" in self.state_file(), "the monitor saved")
        self.stop_daemon()
        self.start_daemon()
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "poweredOn", "Bluetooth powered on")
        self.advertise(self.sensor, 2)
        self.wait_until(lambda: self.counters()[-1:] == [2], "an advertisement after the restart")


@unittest.skipIf(missing(), missing() or "")
class MonitorLossTests(MonitorRig):
    # Room for about 30 records; the app takes 0.3 s per event.
    config_lines = "advertisement-buffer-limit = 1024\n"
    app_arguments = ("--ack-delay", "0.3")

    def test_an_app_that_falls_behind_is_told_how_many_advertisements_it_lost(self):
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's monitor")
        sent = 600
        self.advertise_many(self.sensor, 1, sent)
        # Then one more, once the app has caught up: it (or an event before
        # it) carries every loss not yet reported.
        app = lambda: next(a for a in self.control.apps() if a["id"] == APP)  # noqa: E731
        self.wait_until(lambda: app()["queuedEvents"] == 0 and app()["unacknowledgedEvents"] == 0 and self.advertisements(),
                        "the app caught up", timeout=60)
        self.advertise(self.sensor, sent + 1)
        self.wait_until(lambda: (self.counters() or [0])[-1] == sent + 1, "the last advertisement", timeout=60)
        counters = self.counters()
        # `lost` is the event's: every record line of a batch repeats it.
        lost = sum({r["seq"]: r["lost"] for r in self.advertisements()}.values())
        self.assertGreater(lost, 0, "the bound was reached")
        self.assertEqual(len(counters) + lost, sent + 1, "every advertisement delivered or reported lost")
        self.assertEqual(counters, sorted(counters), "in order")
        self.assertEqual(self.control.request("ble.monitors")["monitors"], [], "a client sees its own monitors only")


if __name__ == "__main__":
    unittest.main()


def ruuvi_format5(sequence):
    """RuuviTag data format 5: 21.5 C, 45 %, 1000 hPa, measurement sequence number `sequence`."""
    import struct
    return struct.pack(">BhHHhhhHBH6s", 5, 4300, 18000, 50000, 0, 0, 1000, (1300 << 5) | 22, sequence % 256, sequence,
                       bytes.fromhex("C0FFEE000001"))


@unittest.skipIf(missing(), missing() or "")
class SensorLoggerBroadcastTests(MonitorRig):
    """vigil-sensor-logger with VIGIL_LOGGER_RUUVI=1: a row per RuuviTag advertisement."""

    def manifest(self):
        logger = os.path.join(os.path.dirname(VIGILD), "vigil-sensor-logger")
        self.database = f"{self.dir}/records.sqlite"
        return (f'id = "{APP}"\n'
                f'exec = ["{logger}"]\n'
                'background-modes = ["bluetooth-central", "external-accessory"]\n'
                f'environment = {{ VIGIL_LOGGER_RUUVI = "1", VIGIL_LOGGER_DB = "{self.database}" }}\n')

    def rows(self):
        import sqlite3
        try:
            with sqlite3.connect(self.database) as db:
                return db.execute("SELECT sequence, temperature, humidity, pressure FROM broadcasts ORDER BY id").fetchall()
        except sqlite3.Error:
            return []

    def test_every_ruuvitag_advertisement_is_a_row(self):
        if not os.path.exists(os.path.join(os.path.dirname(VIGILD), "vigil-sensor-logger")):
            self.skipTest("vigil-sensor-logger is not built")
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any("monitoring RuuviTags" in line for line in self.app_output()), "the logger's monitor")
        self.control.app_action("background", APP)
        dbus = self.dbus
        for n in range(1, 11):
            data = dbus.Array(list(ruuvi_format5(n)), signature="y", variant_level=1)
            self.mock.control.SetAdvertisement(self.sensor, dbus.Dictionary({
                "ManufacturerData": dbus.Dictionary({dbus.UInt16(COMPANY): data}, signature="qv", variant_level=1),
                "RSSI": dbus.Int16(-60, variant_level=1)}, signature="sv"))
        self.wait_until(lambda: len(self.rows()) >= 10, "10 rows")
        rows = self.rows()
        self.assertEqual([r[0] for r in rows], list(range(1, 11)))
        self.assertEqual({(round(r[1], 3), round(r[2], 3), r[3]) for r in rows}, {(21.5, 45.0, 100000.0)})

    def app_output(self):
        logs = f"{self.dir}/logs"
        lines = []
        with open(f"{self.dir}/vigild.log", errors="replace") as file:  # app output goes to the journal or here
            lines += file.readlines()
        for name in os.listdir(logs) if os.path.isdir(logs) else []:
            with open(os.path.join(logs, name), errors="replace") as file:
                lines += file.readlines()
        return lines

"""Accessories through the real vigild, with udev and the device faked by umockdev.

vigild runs inside a umockdev testbed (Tests/python/accessory_testbed.py) that
presents a USB CDC-ACM accessory whose node is a pty driven by this test. The
app is clients/python/example_app.py, launched by vigild. Skipped (not failed)
when vigild is not built or umockdev is not installed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import ControlClient, VigilError  # noqa: E402
from jsonl_records import read_jsonl  # noqa: E402

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
PYTHON = "/usr/bin/python3"
EXAMPLE_APP = os.path.join(REPO, "clients", "python", "example_app.py")
TESTBED = os.path.join(REPO, "Tests", "python", "accessory_testbed.py")
SENSOR_APP = "org.vigil.test.sensorapp"
DFU_ONLY_APP = "org.vigil.test.dfuonly"


def missing():
    if not os.path.exists(VIGILD):
        return f"vigild is not built at {VIGILD}"
    if not shutil.which("umockdev-wrapper"):
        return "umockdev is not installed (apt install umockdev gir1.2-umockdev-1.0 python3-gi)"
    return None


@unittest.skipIf(missing(), missing() or "")
class AccessoryDaemonHarness(unittest.TestCase):
    """vigild in a testbed with one accessory and two apps; no tests of its own."""

    timings = "suspend-grace = 0.5\nwake-budget = 3.0\n"
    daemon_settings = ""
    app_arguments = ""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vigil-acc-")
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        cgroup = ""
        unified = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        if os.geteuid() == 0 and os.path.exists(f"{unified}/cgroup.procs"):
            self.cgroup_root = f"{unified}/vigil-pyacc-{os.getpid()}"
            cgroup = f'cgroup-root = "{self.cgroup_root}"'
        else:
            self.cgroup_root = None
        with open(f"{self.dir}/vigild.toml", "w") as config:
            config.write(f'manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\n{cgroup}\n'
                         f"{self.daemon_settings}[timings]\n{self.timings}")
        self.records = {}
        for app, declared in ((SENSOR_APP, "org.example.sensor"), (DFU_ONLY_APP, "org.example.dfu")):
            self.records[app] = f"{self.dir}/{app}.jsonl"
            with open(f"{self.dir}/apps/{app}.toml", "w") as manifest:
                manifest.write(
                    f'id = "{app}"\n'
                    f'exec = ["{PYTHON}", "{EXAMPLE_APP}", "--record", "{self.records[app]}", '
                    '"--accessory-protocol", "org.example.sensor"' + self.app_arguments + ']\n'
                    'background-modes = ["external-accessory"]\n'
                    f'accessory-protocols = ["{declared}"]\n')
        self.daemon_log = open(f"{self.dir}/vigild.log", "w")
        self.testbed = subprocess.Popen(
            ["umockdev-wrapper", PYTHON, TESTBED, "--", VIGILD, "--socket", self.socket,
             "--config", f"{self.dir}/vigild.toml"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.daemon_log, text=True, bufsize=1)
        self.assertEqual(self.testbed.stdout.readline().strip(), "ready", "the testbed did not start")
        self.control = self.connect()

    def tearDown(self):
        try:
            self.control.close()
            self.device("quit")
        except Exception:  # noqa: BLE001 - tear down regardless
            self.testbed.kill()
        self.testbed.wait(timeout=20)
        self.testbed.stdin.close()
        self.testbed.stdout.close()
        self.daemon_log.close()
        if self.cgroup_root and os.path.isdir(self.cgroup_root):
            for child in os.listdir(self.cgroup_root):
                path = f"{self.cgroup_root}/{child}"
                if os.path.isdir(path):
                    with open(f"{path}/cgroup.kill", "w") as kill:
                        kill.write("1")
                    self.wait_until(lambda: "populated 0" in open(f"{path}/cgroup.events").read(), "cgroup empty", 10)
                    os.rmdir(path)
            os.rmdir(self.cgroup_root)
        shutil.rmtree(self.dir, ignore_errors=True)

    # Helpers

    def connect(self):
        deadline = time.monotonic() + 20
        while True:
            try:
                return ControlClient(self.socket)
            except (OSError, VigilError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def device(self, request):
        self.testbed.stdin.write(request + "\n")
        self.testbed.stdin.flush()
        reply = self.testbed.stdout.readline().strip()
        if not reply:  # EOF: the testbed died; its stderr is in vigild.log
            try:
                status = self.testbed.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = "still running"
            self.daemon_log.flush()
            with open(f"{self.dir}/vigild.log", errors="replace") as log:
                tail = "".join(log.readlines()[-40:])
            self.fail(f"testbed: {request} -> no reply (testbed exit status {status}); the log's end:\n{tail}")
        self.assertTrue(reply.startswith("ok") or reply.startswith("data"), f"testbed: {request} -> {reply}")
        return reply

    def wait_until(self, condition, what, timeout=20):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}\n{self.diagnostics()}")
            time.sleep(0.05)

    def diagnostics(self):
        parts = []
        with open(f"{self.dir}/vigild.log") as log:
            parts.append("vigild log:\n" + "".join(log.readlines()[-30:]))
        for app, path in self.records.items():
            records = [dict(r, payloadHex=f"<{len(r['payloadHex']) // 2} bytes>") if "payloadHex" in r else r
                       for r in self.read(app)[-20:]]
            parts.append(f"{app} records:\n" + "\n".join(json.dumps(r) for r in records))
        return "\n".join(parts)

    def read(self, app):
        # The app may be writing its last line while this reads: read_jsonl skips a torn line.
        return read_jsonl(self.records[app])

    def events(self, app, kind):
        return [r for r in self.read(app) if r.get("kind") == "event" and r.get("eventKind") == kind]

    def state(self, app):
        return next(a for a in self.control.apps() if a["id"] == app)["state"]

    def vigild_pid(self):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    argv = file.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"vigild") and self.socket.encode() in argv:
                return int(pid)
        self.fail("vigild's process not found")


class AccessoryDaemonTests(AccessoryDaemonHarness):
    def test_accessory_sessions_through_suspension_unplug_and_replug(self):
        accessories = self.control.accessories()["accessories"]
        self.assertEqual(len(accessories), 1, accessories)
        sensor = accessories[0]
        self.assertEqual((sensor["vendorID"], sensor["productID"], sensor["serialNumber"]), ("1209", "0001", "VGL123"))
        self.assertEqual(sensor["manufacturer"], "Vigil Labs")
        self.assertIn("org.example.sensor", sensor["protocolStrings"])
        self.assertEqual(sensor["deviceNode"], "/dev/ttyACM0")
        first_id = sensor["connectionID"]

        # The app opens a session, then is suspended in the background.
        self.control.app_action("launch", SENSOR_APP)
        self.wait_until(lambda: any(r["kind"] == "sessionOpened" for r in self.read(SENSOR_APP)), "the app's session")
        session = next(r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened")["session"]
        self.control.app_action("background", SENSOR_APP)
        self.wait_until(lambda: self.state(SENSOR_APP) == "suspended", "suspension")

        # Data from the device wakes it and arrives intact, in order.
        burst = b"1,0.500000,3.7\n2,1.000000,7.4\n"
        self.device("write " + burst.hex())
        received = lambda: b"".join(bytes.fromhex(e["payloadHex"]) for e in self.events(SENSOR_APP, "session.data"))
        self.wait_until(lambda: received() == burst, "the burst in the app")
        self.assertTrue(all(e["attributes"]["session"] == session for e in self.events(SENSOR_APP, "session.data")))
        wakes = [d for d in self.control.log(app=SENSOR_APP) if d["action"] == "wake"]
        self.assertTrue(any("session.data" in d["reason"] for d in wakes), wakes)

        # One session per accessory and protocol: another holder is refused by name.
        with self.assertRaises(VigilError) as refused:
            self.control.open_session(first_id, "org.example.sensor")
        self.assertIn(SENSOR_APP, refused.exception.message)
        # A person's terminal on the other protocol: bytes reach the device.
        terminal = self.control.open_session(first_id, "org.example.dfu")["session"]
        self.assertEqual(self.control.write(terminal, b"ping"), 4)
        self.assertEqual(self.device("read 4"), "data " + b"ping".hex())

        # Unplug: sessions close (the app's waits to reopen), disconnect is delivered.
        self.device("unplug")
        self.wait_until(lambda: self.events(SENSOR_APP, "accessory.disconnected"), "accessory.disconnected")
        closed = self.events(SENSOR_APP, "session.closed")
        self.assertTrue(closed and closed[-1]["attributes"]["willReopen"], closed)
        self.assertEqual(self.control.accessories()["accessories"], [])

        # Replug on another node: a new connection id, the session reopens by itself.
        self.assertEqual(self.device("plug"), "ok /dev/ttyACM1")
        self.wait_until(lambda: self.events(SENSOR_APP, "session.reopened"), "session.reopened")
        connected = self.events(SENSOR_APP, "accessory.connected")
        self.assertTrue(connected, "no accessory.connected after the replug")
        second_id = connected[-1]["attributes"]["connectionID"]
        self.assertNotEqual(second_id, first_id)
        self.assertEqual(self.control.accessories()["accessories"][0]["deviceNode"], "/dev/ttyACM1")
        more = b"3,1.500000,11.1\n"
        self.device("write " + more.hex())
        self.wait_until(lambda: received() == burst + more, "data after the replug")

        # An app whose manifest lacks the protocol is refused a session.
        self.control.app_action("launch", DFU_ONLY_APP)
        self.wait_until(lambda: any(r["kind"] == "openFailed" for r in self.read(DFU_ONLY_APP)), "the refusal")
        failure = next(r for r in self.read(DFU_ONLY_APP) if r["kind"] == "openFailed")
        self.assertIn("does not declare", failure["error"])

    def test_a_closed_session_leaves_no_log_and_no_descriptor_behind(self):
        # closeSession used to close only the port: the session's log (a file,
        # its descriptor and its mapping) stayed until vigild restarted.
        connection_id = self.control.accessories()["accessories"][0]["connectionID"]
        log_dir = f"{self.dir}/state/session-logs"
        pid = self.vigild_pid()
        descriptors = []
        for round in range(4):
            session = self.control.open_session(connection_id, "org.example.sensor")["session"]
            self.device("write " + f"round {round}\n".encode().hex())
            output = self.control.next_session_output(timeout=10)
            self.assertIsNotNone(output, "no data from the device")
            self.assertEqual((output.type, output.body), ("sessionData", f"round {round}\n".encode()))
            self.assertIn(f"{session}.log", os.listdir(log_dir))
            self.control.close_session(session)
            self.assertEqual(os.listdir(log_dir), [], f"session {session}'s log is still there")
            self.assertEqual(self.control.accessories()["sessions"], [])
            descriptors.append(len(os.listdir(f"/proc/{pid}/fd")))
        self.assertEqual(len(set(descriptors)), 1, f"vigild's descriptors after each close: {descriptors}")


class LineControlTests(AccessoryDaemonHarness):
    """Serial line control through the protocol. The testbed's node is a pty,
    which has no modem lines and no RS-485: these prove the requests, their
    checks and the `notSupported` answers; the lab proves the lines move."""

    def refused(self, code, type, **members):
        with self.assertRaises(VigilError) as caught:
            self.control.request(type, **members)
        self.assertEqual(caught.exception.code, code, caught.exception.message)
        return caught.exception.message

    def test_line_requests_on_a_pty(self):
        connection_id = self.control.accessories()["accessories"][0]["connectionID"]
        # umockdev's tty takes no termios2 (TCSETS2): a rate outside the table is refused by name.
        with self.assertRaises(VigilError) as caught:
            self.control.open_session(connection_id, "org.example.sensor", line_settings="250000 8N1")
        self.assertEqual(caught.exception.code, "notSupported")
        self.assertIn("a baud rate of 250000 (BOTHER)", caught.exception.message)
        self.assertEqual(self.control.accessories()["sessions"], [])
        session = self.control.open_session(connection_id, "org.example.sensor",
                                            line_settings="230400 8N1 nohupcl")["session"]
        listed = self.control.accessories()["sessions"]
        self.assertEqual([s["lineSettings"] for s in listed], ["230400 8N1 nohupcl"])

        # What the driver cannot do is an error naming the ioctl, never a silent no-op.
        self.assertIn("TIOCMGET", self.refused("notSupported", "sessionLines", session=session))
        self.assertIn("TIOCMGET", self.refused("notSupported", "sessionLines", session=session, dtr=False))
        self.refused("notSupported", "watchSessionLines", session=session, enabled=True, wake=True)
        self.assertIn("TIOCSRS485", self.refused("notSupported", "sessionRS485", session=session,
                                                   rs485={"enabled": True, "delayAfterSend": 2}))
        # Checked before the driver is asked.
        self.refused("invalidArgument", "sessionRS485", session=session, rs485={"enabled": True, "delayBeforeSend": 500})
        self.refused("invalidArgument", "sendBreak", session=session, milliseconds=0)
        self.refused("invalidArgument", "sendBreak", session=session, milliseconds=60_000)
        # Only the holder's sessions.
        self.refused("invalidArgument", "sessionLines", session=session + 1000)
        other = ControlClient(self.socket)
        try:
            with self.assertRaises(VigilError) as caught:
                other.request("sendBreak", session=session, milliseconds=10)
            self.assertEqual(caught.exception.code, "invalidArgument")
        finally:
            other.close()

        # umockdev's tty refuses TIOCSBRK (a bare pty would take it and ignore it):
        # refused by name, and nothing is left running (the next one is refused the same way,
        # not as a break already in progress). The lab times a real one.
        self.assertIn("TIOCSBRK", self.refused("notSupported", "sendBreak", session=session, milliseconds=300))
        self.assertIn("TIOCSBRK", self.refused("notSupported", "sendBreak", session=session, milliseconds=300))
        # The session is unharmed: bytes still flow both ways.
        self.assertEqual(self.control.write(session, b"after"), 5)
        self.assertEqual(self.device("read 5"), "data " + b"after".hex())
        self.device("write " + b"back".hex())
        output = self.control.next_session_output(timeout=10)
        self.assertEqual((output.type, output.body), ("sessionData", b"back"))

    def test_a_rate_out_of_range_is_refused_at_open(self):
        connection_id = self.control.accessories()["accessories"][0]["connectionID"]
        with self.assertRaises(VigilError) as caught:
            self.control.open_session(connection_id, "org.example.sensor", line_settings="30000000")
        self.assertEqual(caught.exception.code, "invalidArgument")
        self.assertIn("unsupported baud rate 30000000", caught.exception.message)


class SlowConsumerTests(AccessoryDaemonHarness):
    """An app slower than its device: a small session buffer, a short window,
    and an app that takes a while to acknowledge each piece of data."""

    timings = "suspend-grace = 0.5\nwake-budget = 1.0\n"
    daemon_settings = "session-buffer-limit = 4096\n"
    app_arguments = ', "--ack-delay", "1.5"'

    def test_a_window_that_ends_with_data_held_back_does_not_stall_the_session(self):
        # Regression: the window ended while the app held unacknowledged data and
        # reading was paused; no new data could arrive to wake it, so it never
        # woke again and the device stayed held back for good.
        self.control.app_action("launch", SENSOR_APP)
        self.wait_until(lambda: any(r["kind"] == "sessionOpened" for r in self.read(SENSOR_APP)), "the app's session")
        self.control.app_action("background", SENSOR_APP)
        self.wait_until(lambda: self.state(SENSOR_APP) == "suspended", "suspension")

        stream = bytes((i * 7 + i // 256) % 251 for i in range(12 * 1024))
        self.assertEqual(self.device(f"feed {stream.hex()} 30"), "ok")
        received = lambda: b"".join(bytes.fromhex(e["payloadHex"]) for e in self.events(SENSOR_APP, "session.data"))
        self.wait_until(lambda: len(received()) >= len(stream), "the whole stream in the app", timeout=90)
        self.assertEqual(received(), stream, "bytes lost, repeated or reordered")
        held_back = [d for d in self.control.log(app=SENSOR_APP)
                     if d["action"] == "wake" and "holds data back" in d["reason"]]
        self.assertTrue(held_back, "the app was never woken for held-back data, so the test did not exercise it")


class UntrustedDeviceTests(AccessoryDaemonHarness):
    """Devices whose udev attributes lie: protocol strings that are shell, serial
    numbers with control and bidi characters, a clone of the sensor's identity."""

    def log_text(self):
        with open(f"{self.dir}/vigild.log", encoding="utf-8", errors="replace") as log:
            return log.read()

    def accessory(self, node):
        return next((a for a in self.control.accessories()["accessories"] if a["deviceNode"] == node), None)

    def test_invalid_protocols_are_refused_device_text_is_escaped_and_clones_are_reported(self):
        self.control.app_action("launch", SENSOR_APP)
        self.wait_until(lambda: any(r["kind"] == "sessionOpened" for r in self.read(SENSOR_APP)), "the app's session")
        session = next(r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened")["session"]
        sensor_id = self.accessory("/dev/ttyACM0")["connectionID"]

        evil_serial, evil_name = "EVIL\u202etxt\u0007", "Evil\u202eName\u0007"
        evil_node = self.device("add evil " + json.dumps({
            "port": "1-4", "first_number": 40, "serial": evil_serial, "name": evil_name, "manufacturer": "M" * 4000,
            "protocols": "$(reboot) ;rm org.example.dfu"})).split()[1]
        self.wait_until(lambda: self.accessory(evil_node), "the evil device listed")
        evil = self.accessory(evil_node)
        self.assertEqual(evil["protocolStrings"], ["org.example.dfu"], "invalid protocol strings were offered")
        self.assertEqual((evil["serialNumber"], evil["name"]), (evil_serial, evil_name), "identity strings are kept")
        self.assertLessEqual(len(evil["manufacturer"].encode()), 255, "identity strings are bounded")
        problems = self.control.accessories()["problems"]
        refused = [p["detail"] for p in problems if p["connectionID"] == evil["connectionID"]
                   and p["problem"] == "refusedProtocol"]
        self.assertEqual(len(refused), 2, problems)
        self.assertIn('"$(reboot)"', refused[0])
        with self.assertRaises(VigilError) as offered:
            self.control.open_session(evil["connectionID"], "$(reboot)")
        self.assertIn("does not speak", offered.exception.message)

        # The log names what was refused, escaped; no device-provided control
        # or bidi character reaches it raw.
        log = self.log_text()
        self.assertIn('protocol string "$(reboot)" refused', log)
        self.assertIn('protocol string ";rm" refused', log)
        self.assertIn("EVIL\\u{202E}txt\\u{7}", log)
        self.assertNotIn("\u202e", log)
        self.assertNotIn("\u0007", log)

        # A clone of the sensor's identity on another port: reported, its own
        # connection id, and it never gets the sensor's session.
        clone_node = self.device("add clone " + json.dumps({"port": "1-3", "first_number": 20})).split()[1]
        self.wait_until(lambda: self.accessory(clone_node), "the clone listed")
        clone_id = self.accessory(clone_node)["connectionID"]
        self.assertNotIn(clone_id, (sensor_id, evil["connectionID"]))
        duplicates = {p["connectionID"] for p in self.control.accessories()["problems"]
                      if p["problem"] == "duplicateIdentity"}
        self.assertEqual(duplicates, {sensor_id, clone_id})
        self.assertIn("claims the same identity", self.log_text())

        self.device("unplug")
        self.wait_until(lambda: self.events(SENSOR_APP, "session.closed"), "the sensor's session waiting")
        self.device("@clone unplug")
        clone_node = self.device("@clone plug").split()[1]
        self.wait_until(lambda: self.accessory(clone_node), "the clone back")
        clone_id = self.accessory(clone_node)["connectionID"]
        held = next(s for s in self.control.accessories()["sessions"] if s["session"] == session)
        self.assertNotEqual(held["connectionID"], clone_id, "the clone took the sensor's waiting session")
        self.assertEqual(self.events(SENSOR_APP, "session.reopened"), [])

        # The sensor comes back on its own port: its session reopens there.
        self.assertEqual(self.device("plug"), "ok /dev/ttyACM1")
        self.wait_until(lambda: self.events(SENSOR_APP, "session.reopened"), "session.reopened")
        reopened = self.events(SENSOR_APP, "session.reopened")[-1]["attributes"]
        self.assertEqual((reopened["session"], reopened["deviceNode"]), (session, "/dev/ttyACM1"))
        self.device("@clone write " + b"clone\n".hex())
        self.device("write " + b"sensor\n".hex())
        received = lambda: b"".join(bytes.fromhex(e["payloadHex"]) for e in self.events(SENSOR_APP, "session.data"))
        self.wait_until(lambda: received() == b"sensor\n", "the sensor's data, and only it")


if __name__ == "__main__":
    unittest.main()

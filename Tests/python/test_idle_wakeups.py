"""An idle vigild takes no wake-ups (issue 12), and its signals still work.

Starts the real vigild and counts the context switches of every one of its
threads (voluntary + involuntary, from /proc/PID/task/*/status) while nothing
happens: a thread that never wakes never switches. These are counts, not
timings: a busy machine delays a wake-up, it does not add one. Each check
first waits until the daemon has been quiet for a while (its start, the
coalesced write of the state file, a connection just closed), then expects
exactly 0 switches over 3 s, and only vigild's own two threads: the main
thread (waiting for the loop to end) and `vigild-loop`. A third thread would
be libdispatch's (`…-qos.overcommit`, `…default-qos`), whose manager re-arms
a 1 s timer forever once Swift's global executor has been used.

Covered: Bluetooth off; Bluetooth on with no system bus (vigild waits for the
bus socket with inotify, even for a directory that does not exist yet); the
bus appearing (vigild connects), with no bluetoothd on it (it waits for
NameOwnerChanged), bluetoothd (the BlueZ mock) appearing, a peripheral
connected and subscribed to, the bus going and coming back; an app suspended; SIGHUP (reload), SIGTERM and SIGINT (graceful
stop, exit status 0, the suspended app left running).

    cd Tests/python && VIGILD=../../.build/debug/vigild \\
        VIGIL_DEMO_APP=../../.build/debug/vigil-demo-app /usr/bin/python3 -m unittest test_idle_wakeups -v
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.join(REPO, "Tests", "bluez-mock"))

from vigil_client import ControlClient, VigilError  # noqa: E402

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
DEMO_APP = os.environ.get("VIGIL_DEMO_APP") or os.path.join(os.path.dirname(VIGILD), "vigil-demo-app")
HRM = "AA:BB:CC:DD:EE:01"
IDLE_SECONDS = 3.0
QUIET_SECONDS = 2.0
OWN_THREADS = {"vigild", "vigild-loop"}


def thread_switches(pid):
    """{tid: (name, context switches)} of every thread of `pid`."""
    result = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        switches = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
        result[tid] = (fields["Name"].strip(), switches)
    return result


def bus_missing():
    if not shutil.which("dbus-daemon"):
        return "dbus-daemon is not installed"
    if not os.path.exists("/usr/lib/python3/dist-packages/dbusmock"):
        return "python3-dbusmock is not installed"
    return None


@unittest.skipUnless(os.path.exists(VIGILD), f"vigild is not built at {VIGILD}")
class IdleWakeupTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vigil-idle-")
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        self.bus_socket = f"{self.dir}/run/dbus/system_bus_socket"  # its directory does not exist yet
        self.daemon = None
        self.children = []  # dbus-daemon, the BlueZ mock
        self.app_pid = None

    def tearDown(self):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        if self.app_pid:
            for kill in (lambda: os.killpg(self.app_pid, signal.SIGKILL), lambda: os.kill(self.app_pid, signal.SIGKILL)):
                try:
                    kill()
                except ProcessLookupError:
                    pass
        for child in reversed(self.children):
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # Helpers

    def start_daemon(self, bluetooth=True, manifests=()):
        with open(f"{self.dir}/vigild.toml", "w") as config:
            config.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                         f"bluetooth = {'true' if bluetooth else 'false'}\n"
                         "[timings]\nsuspend-grace = 0.5\n")
        for name, text in manifests:
            with open(f"{self.dir}/apps/{name}.toml", "w") as manifest:
                manifest.write(text)
        env = dict(os.environ)
        env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=" + self.bus_socket
        with open(f"{self.dir}/vigild.log", "w") as log:
            self.daemon = subprocess.Popen(
                [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml", "--no-port-keeper"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        with self.control() as control:
            control.status()

    def control(self):
        deadline = time.monotonic() + 20
        while True:
            try:
                return ControlClient(self.socket)
            except (OSError, VigilError):
                if self.daemon.poll() is not None or time.monotonic() > deadline:
                    self.fail(f"vigild did not answer\n{self.log()}")
                time.sleep(0.05)

    def log(self):
        with open(f"{self.dir}/vigild.log") as log:
            return log.read()

    def wait_until(self, condition, what, timeout=20):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}\nvigild log:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def wait_for_log(self, text, count=1):
        self.wait_until(lambda: self.log().count(text) >= count, f"{text!r} in the log")

    def assert_idle(self, what, quiet=QUIET_SECONDS):
        """Waits until the daemon has been quiet for `quiet` s, then expects
        no switch of any thread over IDLE_SECONDS, and no thread but vigild's two."""
        pid = self.daemon.pid
        deadline = time.monotonic() + 30
        quiet_since, last = time.monotonic(), thread_switches(pid)
        while time.monotonic() - quiet_since < quiet:
            if time.monotonic() > deadline:
                self.fail(f"{what}: vigild never went quiet for {quiet} s: {last}\n{self.log()[-4000:]}")
            time.sleep(0.1)
            now = thread_switches(pid)
            if now != last:
                quiet_since, last = time.monotonic(), now
        before = last
        time.sleep(IDLE_SECONDS)
        after = thread_switches(pid)
        names = sorted(name for name, _ in after.values())
        self.assertTrue(set(names) <= OWN_THREADS and len(names) == len(set(names)),
                        f"{what}: vigild has threads other than its own two: {names}")
        woken = {f"{after[tid][0]}/{tid}": after[tid][1] - before.get(tid, (None, 0))[1]
                 for tid in after if after[tid][1] != before.get(tid, (None, 0))[1]}
        self.assertEqual(woken, {}, f"{what}: threads woken during {IDLE_SECONDS} s idle (context switches)")

    def stop(self, signal_number):
        self.daemon.send_signal(signal_number)
        try:
            status = self.daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail(f"vigild did not stop on {signal.Signals(signal_number).name}\n{self.log()[-4000:]}")
        self.assertEqual(status, 0, f"vigild's exit status after {signal.Signals(signal_number).name}\n{self.log()[-4000:]}")
        self.assertIn("stopped", self.log())
        self.assertFalse(os.path.exists(self.socket), "the socket is removed")

    def start_bus(self):
        from bluez_mock import BUS_CONFIG
        os.makedirs(os.path.dirname(self.bus_socket), exist_ok=True)
        config = f"{self.dir}/bus.conf"
        with open(config, "w") as file:
            file.write(BUS_CONFIG.format(socket=self.bus_socket))
        with open(f"{self.dir}/dbus-daemon.log", "ab") as log:
            bus = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.children.append(bus)
        return bus

    def start_bluez_mock(self):
        from bluez_mock import TEMPLATE, _python
        env = dict(os.environ)
        env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=" + self.bus_socket
        env.pop("PYTHONHOME", None)
        params = json.dumps({"adapters": ["hci0"], "register_timeout": 3.0})
        with open(f"{self.dir}/bluez-mock.log", "ab") as log:
            mock = subprocess.Popen([_python(), "-m", "dbusmock", "--system", "--template", TEMPLATE, "-p", params],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        self.children.append(mock)
        return mock

    def push(self, client, kind, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = client.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
            if message is not None and message.type == "blePush" and message["kind"] == kind:
                return message
        self.fail(f"no {kind} push within {timeout} s\n{self.log()[-4000:]}")

    def notify_and_receive(self, client, mock, hrm):
        import dbus
        mock.NotifyHeartRate(hrm, dbus.UInt16(72), dbus.Array([], signature="q"))
        message = client.next_unsolicited(timeout=0.5)
        return message is not None and message.type == "blePush" and message["kind"] == "ble.notification"

    def ble_state(self):
        with self.control() as control:
            return control.request("ble.state")["state"]

    # Tests

    def test_1_bluetooth_off_then_sigint(self):
        self.start_daemon(bluetooth=False)
        self.assert_idle("Bluetooth off")
        self.stop(signal.SIGINT)

    @unittest.skipIf(bus_missing(), bus_missing() or "")
    def test_2_no_bus_then_bus_then_bluez(self):
        self.start_daemon(bluetooth=True)
        self.wait_for_log(f"waiting for {self.bus_socket} to appear")
        self.assert_idle("Bluetooth on, no system bus (not even its directory)")

        bus = self.start_bus()
        self.wait_for_log("bluetooth: connected to the system bus")
        self.wait_for_log("bluetoothd is not running; waiting for it")
        self.assert_idle("Bluetooth on, a system bus without bluetoothd")

        self.start_bluez_mock()
        self.wait_until(lambda: self.ble_state() == "poweredOn", "Bluetooth powered on (bluetoothd appeared)")
        self.assert_idle("Bluetooth on, bluetoothd on the bus")

        # Every central path once (connect, discovery, subscribe, a value),
        # then idle with the link and the subscription up: none of it may have
        # left work on the global executor (a libdispatch thread would stay).
        import dbus
        bus_connection = dbus.bus.BusConnection("unix:path=" + self.bus_socket)
        mock = dbus.Interface(bus_connection.get_object("org.bluez", "/org/vigil/mock", introspect=False), "org.vigil.BlueZMock")
        hrm = mock.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
        with self.control() as client:
            client.request("ble.registerCentral")
            client.request("ble.connect", peripheral=HRM)
            self.push(client, "ble.connected")
            client.request("ble.notify", peripheral=HRM, service="180d", characteristic="2a37", enabled=True)
            self.wait_until(lambda: self.notify_and_receive(client, mock, hrm), "a heart-rate notification")
            self.assert_idle("Bluetooth on, a peripheral connected and subscribed")
        bus_connection.close()

        bus.terminate()
        bus.wait(timeout=10)
        self.wait_for_log("bluetooth: lost the system bus")
        self.wait_until(lambda: self.ble_state() != "poweredOn", "Bluetooth no longer powered on")
        # Longer quiet: had the socket outlived the bus, its refusals would
        # bring follow-up attempts up to 0.25 + 1 + 4 s later (then none).
        self.assert_idle("Bluetooth on, the system bus gone", quiet=6.0)
        self.children.remove(bus)
        self.start_bus()
        self.wait_for_log("bluetooth: connected to the system bus", count=2)
        self.stop(signal.SIGTERM)

    @unittest.skipUnless(os.path.exists(DEMO_APP), f"vigil-demo-app is not built at {DEMO_APP}")
    def test_3_suspended_app_sighup_sigterm(self):
        app = "org.vigil.test.idle"
        self.start_daemon(bluetooth=True, manifests=[("idle", f'id = "{app}"\nexec = ["{DEMO_APP}"]\n'
                                                              '[environment]\nVIGIL_DEMO_QUIET = "1"\n')])
        with self.control() as control:
            control.app_action("launch", app)
            self.wait_until(lambda: self.app(control, app)["state"] == "active", "the app active")
            control.app_action("background", app)
            self.wait_until(lambda: self.app(control, app)["state"] == "suspended", "the app suspended")
            self.app_pid = self.app(control, app)["pid"]
        self.wait_until(lambda: self.process_state(self.app_pid) == "T", "the app stopped (SIGSTOP)")
        self.assert_idle("an app suspended")

        # SIGHUP reloads the manifests: a new one is seen.
        with open(f"{self.dir}/apps/other.toml", "w") as manifest:
            manifest.write('id = "org.vigil.test.other"\nexec = ["/bin/sleep", "1000"]\n')
        self.daemon.send_signal(signal.SIGHUP)
        self.wait_for_log("reloading the manifests")
        with self.control() as control:
            self.wait_until(lambda: any(a["id"] == "org.vigil.test.other" for a in control.apps()), "the new manifest loaded")
        self.assertIsNone(self.daemon.poll(), "SIGHUP does not stop vigild")
        self.assert_idle("after SIGHUP")

        # SIGTERM with on-stop = leave: the app is thawed and left running.
        self.stop(signal.SIGTERM)
        self.assertNotEqual(self.process_state(self.app_pid), "T", "the app is not left stopped")

    @staticmethod
    def app(control, app):
        return next(a for a in control.apps() if a["id"] == app)

    @staticmethod
    def process_state(pid):
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]


if __name__ == "__main__":
    unittest.main()

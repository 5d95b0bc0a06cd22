"""The host-tier Bluetooth rig the BLE test modules share: the BlueZ mock
(Tests/bluez-mock, dbusmock's bluez5 on a private system-like bus) and a real
vigild pointed at it, with one app manifest, in a temporary folder.

A module subclasses `MockBlueZDaemonTest` and says what differs: the mock's
options, extra config lines, the app's manifest, and what to prepare on the
mock before vigild starts. The base class has no tests of its own.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.join(REPO, "Tests", "bluez-mock"))

from vigil_client import ControlClient, VigilError  # noqa: E402
from jsonl_records import read_jsonl  # noqa: E402

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
PYTHON = "/usr/bin/python3"
EXAMPLE_APP = os.path.join(REPO, "clients", "python", "example_app.py")


def missing():
    """Why the rig cannot run here, or None."""
    if not os.path.exists(VIGILD):
        return f"vigild is not built at {VIGILD}"
    if not shutil.which("dbus-daemon"):
        return "dbus-daemon is not installed"
    if not os.path.exists("/usr/lib/python3/dist-packages/dbusmock"):
        return "python3-dbusmock is not installed"
    try:
        import dbus  # noqa: F401
    except ImportError:
        return "python3-dbus is not importable (run with /usr/bin/python3)"
    return None


def extra_threads(daemon):
    """Threads of a running vigild besides its own two. vigild never runs on
    Swift's global executor (issue 12: libdispatch's pool would wake it every
    second), so any name here is a regression."""
    if daemon.poll() is not None:
        return []
    def name(tid):
        with open(f"/proc/{daemon.pid}/task/{tid}/comm") as comm:
            return comm.read().strip()
    names = sorted(name(tid) for tid in os.listdir(f"/proc/{daemon.pid}/task"))
    return [name for name in names if name not in ("vigild", "vigild-loop")]


class MockBlueZDaemonTest(unittest.TestCase):
    """A mock BlueZ, vigild on it (control connection in `self.control`, the
    adapter poweredOn), and the app of `manifest()` recording to `self.record`."""

    APP = "org.vigil.test.bleapp"
    #: Keyword arguments for MockBlueZ.
    mock_options = {}
    #: Lines added to vigild.toml's top level.
    config_lines = ""
    #: Put the app in its own cgroup tree when root can (else the signal suspender).
    use_cgroups = True

    def manifest(self):
        """The app's manifest text (override)."""
        raise NotImplementedError

    def prepare_mock(self):
        """Called after the mock started, before vigild does (override)."""

    def setUp(self):
        import dbus
        from bluez_mock import MockBlueZ

        self.dbus = dbus
        self.mock = MockBlueZ(**self.mock_options)
        self.mock.start()
        self.prepare_mock()
        self.dir = tempfile.mkdtemp(prefix="vigil-ble-")
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        self.record = f"{self.dir}/app.jsonl"
        suspension = 'suspension = "signal"'
        unified = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        self.cgroup_root = None
        if self.use_cgroups and os.geteuid() == 0 and os.path.exists(f"{unified}/cgroup.procs"):
            self.cgroup_root = f"{unified}/vigil-pyble-{os.getpid()}"
            suspension = f'cgroup-root = "{self.cgroup_root}"'
        with open(f"{self.dir}/vigild.toml", "w") as config:
            config.write(f'manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\n{suspension}\n'
                         f"{self.config_lines}"
                         "[timings]\nsuspend-grace = 0.5\nwake-budget = 3.0\n")
        with open(f"{self.dir}/apps/{self.APP}.toml", "w") as manifest:
            manifest.write(self.manifest())
        self.daemon_log = open(f"{self.dir}/vigild.log", "w")
        self.clients = []
        self.start_daemon()
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "poweredOn", "Bluetooth powered on")

    def start_daemon(self):
        """Starts vigild (again, after a test stopped it) and connects `self.control`."""
        self.daemon = subprocess.Popen(
            [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml"],
            env=self.mock.env, stdout=self.daemon_log, stderr=self.daemon_log, stdin=subprocess.DEVNULL)
        self.control = self.connect()

    def stop_daemon(self):
        """Closes the test's connections and stops vigild with SIGTERM."""
        for client in self.clients:
            client.close()
        self.clients = []
        self.daemon.terminate()
        try:
            self.daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()

    def tearDown(self):
        extra = extra_threads(self.daemon)
        self.stop_daemon()
        self.daemon_log.close()
        if self.cgroup_root and os.path.isdir(self.cgroup_root):
            for child in os.listdir(self.cgroup_root):
                path = f"{self.cgroup_root}/{child}"
                if os.path.isdir(path):
                    with open(f"{path}/cgroup.kill", "w") as kill:
                        kill.write("1")
                    deadline = time.monotonic() + 10
                    while "populated 0" not in Path(path, "cgroup.events").read_text() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    os.rmdir(path)
            os.rmdir(self.cgroup_root)
        self.mock.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(extra, [], "vigild threads other than its own (libdispatch: the global executor was used)")

    # Helpers

    def connect(self):
        """A new control connection (closed at tearDown), retried while vigild starts."""
        deadline = time.monotonic() + 20
        while True:
            try:
                client = ControlClient(self.socket)
                self.clients.append(client)
                return client
            except (OSError, VigilError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def wait_until(self, condition, what, timeout=20):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}\n{self.diagnostics()}")
            time.sleep(0.05)

    def diagnostics(self):
        with open(f"{self.dir}/vigild.log") as log:
            text = "vigild log:\n" + "".join(log.readlines()[-40:])
        return text + "\napp records:\n" + "\n".join(json.dumps(r) for r in self.records()[-20:])

    def records(self):
        """What the app recorded (example_app.py --record), one dict per line."""
        return read_jsonl(self.record)  # a line the app is still writing is skipped

    def push(self, client, kind, timeout=15, where=lambda message: True):
        """The next blePush of `kind` (others before it are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = client.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
            if message is not None and message.type == "blePush" and message["kind"] == kind and where(message):
                return message
        self.fail(f"no {kind} push within {timeout} s\n{self.diagnostics()}")

    def no_push(self, client, kind, within=1.0):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            message = client.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
            if message is not None and message.type == "blePush" and message["kind"] == kind:
                self.fail(f"unexpected {kind}: {message.header}")

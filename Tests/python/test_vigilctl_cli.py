"""vigilctl and vigild as a shell user meets them, with the real binaries:
`--version`, exit statuses (sysexits: 64 usage, 69 no daemon, 77 refused,
1 other failures), failures as JSON under `--json`, messages in words rather
than the protocol's codes, the fallback from the per-user socket to the
system one, `vigild --socket` refusing a folder that does not exist, and
`vigilctl status` / `ble scan` / `ble read` saying why Bluetooth cannot be
used (no bus, no bluetoothd, no adapter, powered off: the BlueZ mock of
Tests/bluez-mock on a private bus) and whether udev works, and vigilctl's
text and `--json` output byte for byte against golden files recorded before
it left Foundation (vigilctl_golden.py).

    VIGILD=.build/debug/vigild /usr/bin/python3 -m unittest test_vigilctl_cli -v
"""

import json
import os
import re
import shutil
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
VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(os.path.dirname(VIGILD), "vigilctl")
# A guard against a hang, not a timing assertion: what must fail at once
# would otherwise wait for ever (a scan without --timeout).
HANG = 60


def version_in_source():
    with open(os.path.join(REPO, "Sources", "VigilProtocol", "VigilVersion.swift")) as file:
        text = file.read()
    return re.search(r'static let current = "([^"]+)"', text).group(1)


def built():
    for path in (VIGILD, VIGILCTL):
        if not os.access(path, os.X_OK):
            return f"{path} is not built"
    return None


def bluez_mock_missing():
    if not shutil.which("dbus-daemon"):
        return "dbus-daemon is not installed"
    if not os.path.exists("/usr/lib/python3/dist-packages/dbusmock"):
        return "python3-dbusmock is not installed"
    return None


class Daemon:
    """A per-user vigild on a private socket and folder."""

    def __init__(self, env=None, config=""):
        self.dir = tempfile.mkdtemp(prefix="vigil-cli-")
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        with open(f"{self.dir}/vigild.toml", "w") as file:
            file.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                       + config)
        self.log = open(f"{self.dir}/vigild.log", "w")
        self.process = subprocess.Popen(
            [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml", "--no-port-keeper"],
            env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while True:
            try:
                with ControlClient(self.socket, timeout=2.0):
                    return
            except (OSError, VigilError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    with open(f"{self.dir}/vigild.log") as file:
                        output = file.read()
                    self.stop()
                    raise RuntimeError(f"vigild did not start:\n{output}")
                time.sleep(0.05)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self):
        with ControlClient(self.socket) as control:
            return control.status()


def vigilctl(*arguments, socket=None, env=None, timeout=HANG):
    prefix = [VIGILCTL] + (["--socket", socket] if socket else [])
    return subprocess.run(prefix + list(arguments), capture_output=True, text=True, timeout=timeout, env=env)


def wait_for(condition, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@unittest.skipIf(built(), built() or "")
class VersionAndExitStatusTests(unittest.TestCase):
    def test_both_binaries_print_the_one_version(self):
        version = version_in_source()
        for binary in (VIGILD, VIGILCTL):
            result = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=HANG)
            self.assertEqual((result.returncode, result.stdout.strip()), (0, version), binary)

    def test_no_daemon_is_69_with_the_path(self):
        with tempfile.TemporaryDirectory() as folder:
            result = vigilctl("status", socket=f"{folder}/none.sock")
            self.assertEqual(result.returncode, 69, result.stderr)
            self.assertEqual(result.stdout, "")
            self.assertEqual(result.stderr, f"vigilctl: no daemon listening at {folder}/none.sock (is vigild running?)\n")
            result = vigilctl("apps", "--json", socket=f"{folder}/none.sock")
            self.assertEqual(result.returncode, 69)
            error = json.loads(result.stderr)["error"]
            self.assertEqual((error["code"], error["exitStatus"]), ("noDaemon", 69))
            self.assertIn(f"{folder}/none.sock", error["message"])

    def test_usage_is_64_and_json_under_json(self):
        result = vigilctl("launch")
        self.assertEqual(result.returncode, 64)
        self.assertIn("Usage: vigilctl launch", result.stderr)
        result = vigilctl("launch", "--json")
        self.assertEqual(result.returncode, 64)
        error = json.loads(result.stderr)["error"]
        self.assertEqual((error["code"], error["exitStatus"]), ("usage", 64))
        self.assertIn("<app>", error["message"])

    def test_help_documents_the_exit_statuses(self):
        result = vigilctl("--help")
        self.assertEqual(result.returncode, 0)
        for status in ("64", "69", "77"):
            self.assertIn(status, result.stdout)

    def test_the_daemon_refuses_a_socket_folder_that_does_not_exist(self):
        with tempfile.TemporaryDirectory() as folder:
            with open(f"{folder}/vigild.toml", "w") as file:
                file.write(f'state-dir = "{folder}/state"\nlog-dir = "{folder}/logs"\nbluetooth = false\n')
            result = subprocess.run([VIGILD, "--socket", f"{folder}/missing/vigild.sock", "--config", f"{folder}/vigild.toml"],
                                    capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL)
            self.assertEqual(result.returncode, 64, result.stderr)
            self.assertIn(f"the socket's folder {folder}/missing does not exist", result.stderr)
            self.assertFalse(os.path.exists(f"{folder}/missing"), "the folder was created anyway")


@unittest.skipIf(built(), built() or "")
class DaemonMessagesTests(unittest.TestCase):
    """Against a vigild with Bluetooth on a bus that does not exist."""

    @classmethod
    def setUpClass(cls):
        cls.busless = tempfile.mkdtemp(prefix="vigil-nobus-")
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={cls.busless}/system_bus_socket")
        cls.daemon = Daemon(env=env)
        # Until its first attempt fails the daemon says "starting", not "noBus".
        try:
            wait_for(lambda: cls.daemon.status().get("bluetooth", {}).get("condition") == "noBus", "noBus")
        except BaseException:
            cls.daemon.stop()
            shutil.rmtree(cls.busless, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.busless, ignore_errors=True)

    def test_an_unknown_app_is_1_in_words_and_its_code_under_json(self):
        result = vigilctl("launch", "org.example.none", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr, "vigilctl: no app with id 'org.example.none'\n")
        result = vigilctl("wake", "org.example.none", "--json", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 1)
        error = json.loads(result.stderr)["error"]
        self.assertEqual((error["code"], error["exitStatus"]), ("unknownApp", 1))

    def test_status_says_why_bluetooth_is_unusable_and_how_udev_is(self):
        result = vigilctl("status", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
        self.assertIn("no system bus", rows["bluetooth"])
        self.assertIn(self.busless, rows["bluetooth"])
        self.assertIn("udev", rows)
        status = json.loads(vigilctl("status", "--json", socket=self.daemon.socket).stdout)
        self.assertEqual(status["bluetooth"]["condition"], "noBus")
        self.assertIn(status["udev"]["condition"], ("ok", "noUdevd", "unavailable"))
        self.assertTrue(status["udev"]["detail"])

    def test_scan_and_read_fail_at_once_with_the_reason(self):
        for command in (["ble", "scan"], ["ble", "read", "AA:BB:CC:DD:EE:FF", "180f", "2a19"]):
            result = vigilctl(*command, socket=self.daemon.socket)
            self.assertEqual(result.returncode, 1, command)
            self.assertIn("Bluetooth is unavailable: cannot reach the system bus", result.stderr)
            self.assertEqual(result.stdout, "")

    def test_connect_and_disconnect_answer_in_json(self):
        address = "AA:BB:CC:DD:EE:01"
        result = vigilctl("ble", "connect", address, "--wait", "0", "--json", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), {"peripheral": address, "state": "pending"})
        result = vigilctl("ble", "disconnect", address, "--json", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), {"peripheral": address, "state": "cancelled"})

    def test_app_states_are_words(self):
        manifest = f"{self.daemon.dir}/apps/idle.toml"
        with open(manifest, "w") as file:
            file.write('id = "org.vigil.test.cli.idle"\nexec = ["/bin/sleep", "600"]\n')
        self.addCleanup(os.unlink, manifest)
        self.assertEqual(vigilctl("reload", socket=self.daemon.socket).returncode, 0)
        result = vigilctl("apps", socket=self.daemon.socket)
        self.assertEqual(result.returncode, 0, result.stderr)
        line = next(line for line in result.stdout.splitlines() if "org.vigil.test.cli.idle" in line)
        self.assertIn("not running", line)
        self.assertNotIn("notRunning", result.stdout)


@unittest.skipIf(built() or bluez_mock_missing(), built() or bluez_mock_missing() or "")
class BluetoothHealthTests(unittest.TestCase):
    """Each link of bus, bluetoothd, adapter and power, as the daemon reports it."""

    def setUp(self):
        from bluez_mock import MockBlueZ

        self.mock = MockBlueZ()
        self.mock.start()
        self.addCleanup(self.mock.stop)
        self.daemon = Daemon(env=self.mock.env)
        self.addCleanup(self.daemon.stop)

    def condition(self):
        return self.daemon.status().get("bluetooth", {}).get("condition")

    def expect(self, condition, words, reason):
        wait_for(lambda: self.condition() == condition, condition)
        status = vigilctl("status", socket=self.daemon.socket)
        self.assertEqual(status.returncode, 0, status.stderr)
        row = next(line for line in status.stdout.splitlines() if line.startswith("bluetooth"))
        self.assertIn(f"{words}: {reason}", row)
        if condition == "poweredOn":
            return
        for command in (["ble", "scan"], ["ble", "read", "AA:BB:CC:DD:EE:FF", "180f", "2a19"]):
            result = vigilctl(*command, "--json", socket=self.daemon.socket)
            self.assertEqual(result.returncode, 1, command)
            error = json.loads(result.stderr)["error"]
            self.assertEqual(error["code"], "unavailable")
            self.assertIn(reason, error["message"])

    def test_powered_on_off_no_bluetoothd_no_adapter(self):
        self.expect("poweredOn", "powered on", "adapter hci0 is powered on")
        self.mock.control.SetPowered("/org/bluez/hci0", False)
        self.expect("poweredOff", "powered off", "adapter hci0 is powered off")
        self.mock.kill_bluez()
        self.expect("noBluetoothd", "bluetoothd not running", "bluetoothd is not running")
        self.mock.start_bluez(adapters=[])
        # The default adapter, once seen, is kept by address and waited for (docs/bluetooth.md, "Adapters").
        self.expect("noAdapter", "no adapter",
                    "the default adapter (00:01:02:03:04:05) is gone; vigild waits for it and uses no other")


@unittest.skipIf(built() or os.geteuid() != 0 or not shutil.which("unshare"),
                 built() or "needs root and unshare (a private /run)")
class SocketFallbackTests(unittest.TestCase):
    """With XDG_RUNTIME_DIR set and no per-user daemon, vigilctl tries the
    system socket: a vigild at /run/vigil/vigild.sock in a mount namespace
    of its own (a tmpfs over /run), so the machine's /run is not touched."""

    SCRIPT = r"""
set -eu
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mkdir -p /run/vigil "$WORK/xdg"
"$VIGILD" --socket /run/vigil/vigild.sock --config "$WORK/vigild.toml" --no-port-keeper >"$WORK/vigild.log" 2>&1 &
daemon=$!
for i in $(seq 200); do [ -S /run/vigil/vigild.sock ] && break; sleep 0.05; done
set +e
env -u VIGIL_SOCKET XDG_RUNTIME_DIR="$WORK/xdg" "$VIGILCTL" --json status >"$WORK/found.json" 2>"$WORK/found.err"
echo $? >"$WORK/found.rc"
kill $daemon; wait $daemon
env -u VIGIL_SOCKET XDG_RUNTIME_DIR="$WORK/xdg" "$VIGILCTL" status >/dev/null 2>"$WORK/none.err"
echo $? >"$WORK/none.rc"
"""

    def test_the_system_socket_after_the_per_user_one(self):
        with tempfile.TemporaryDirectory() as work:
            with open(f"{work}/vigild.toml", "w") as file:
                file.write(f'manifest-dirs = ["{work}/apps"]\nstate-dir = "{work}/state"\nlog-dir = "{work}/logs"\n'
                           'suspension = "signal"\nbluetooth = false\n')
            env = dict(os.environ, WORK=work, VIGILD=VIGILD, VIGILCTL=VIGILCTL)
            subprocess.run(["unshare", "--mount", "sh", "-c", self.SCRIPT], env=env, check=True, timeout=HANG)

            def read(name):
                with open(f"{work}/{name}") as file:
                    return file.read()

            self.assertEqual(read("found.rc").strip(), "0", read("found.err") + read("vigild.log"))
            self.assertEqual(json.loads(read("found.json"))["socket"], "/run/vigil/vigild.sock")
            self.assertEqual(read("none.rc").strip(), "69")
            self.assertIn(f"no daemon listening at {work}/xdg/vigil/vigild.sock or /run/vigil/vigild.sock",
                          read("none.err"))


@unittest.skipIf(not os.access(VIGILCTL, os.X_OK), f"{VIGILCTL} is not built")
class GoldenOutputTests(unittest.TestCase):
    """vigilctl's stdout, stderr and exit status for a recorded daemon's
    replies (vigilctl_golden.py): tables with local times in three time
    zones, durations, JSON (pretty and compact), failures in words and as
    JSON, byte for byte as the Foundation-linked vigilctl printed them."""

    def test_every_case_prints_its_golden_output(self):
        import vigilctl_golden

        cases = vigilctl_golden.load_cases()
        self.assertGreaterEqual(len(cases), 20)
        with tempfile.TemporaryDirectory(prefix="vigil-cli-golden-") as folder:
            for case in cases:
                with self.subTest(case=case["name"], args=case["args"], tz=case["tz"]):
                    result = vigilctl_golden.replay(VIGILCTL, case, folder)
                    self.assertEqual(result.stdout, vigilctl_golden.golden(case["name"], "stdout"))
                    self.assertEqual(result.stderr, vigilctl_golden.golden(case["name"], "stderr"))
                    self.assertEqual(result.returncode, case["exit"])


if __name__ == "__main__":
    unittest.main()

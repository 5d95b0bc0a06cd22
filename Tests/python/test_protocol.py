"""The local protocol, end to end, against a real vigild, using the stdlib client.

    VIGILD=.build/debug/vigild VIGIL_DEMO_APP=.build/debug/vigil-demo-app \\
        /usr/bin/python3 -m unittest discover -s Tests/python -v

Starts one vigild for the whole module on a private socket, with its own
config, manifest, state and log folders in a temporary directory. Skipped (not
failed) when the vigild binary has not been built.

Environment:
  VIGILD                  the daemon binary (default: .build/debug/vigild)
  VIGIL_DEMO_APP          the Swift sample app (default: .build/debug/vigil-demo-app);
                          its one test is skipped when it is not built
  VIGILD_ARGS             extra daemon arguments, split like a shell would
  VIGIL_TEST_CGROUP_ROOT  a cgroup folder for the daemon's apps (config key cgroup-root)
"""

import contextlib
import json
import os
import random
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vigil_client import (  # noqa: E402
    AppClient, ConnectionClosed, Connection, ControlClient, VigilError, encode_frame,
)
import protocol_fuzz  # noqa: E402
from jsonl_records import read_jsonl  # noqa: E402

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
VIGIL_DEMO_APP = os.environ.get("VIGIL_DEMO_APP") or os.path.join(REPO, ".build", "debug", "vigil-demo-app")
VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(os.path.dirname(VIGILD), "vigilctl")
PROTOCOL_FUZZ = os.path.join(REPO, "Tests", "python", "protocol_fuzz.py")
EXAMPLE_APP = os.path.join(REPO, "clients", "python", "example_app.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# The daemon's config file. Keys and timings are the only daemon-specific
# knowledge here: adjust them if vigild's config changes.
DAEMON_CONFIG = """\
manifest-dirs = [{apps}]
state-dir = {state}
log-dir = {logs}
event-queue-limit = 1000
{extra}
[timings]
suspend-grace = 1.0
wake-budget = 5.0
background-time-limit = 30.0
expiration-warning = 5.0
exit-grace = 2.0
"""

APP_MANIFEST = """\
id = {id}
exec = {exec}
background-modes = []
accessory-protocols = []
exits-on-suspend = false
"""

BINARY_APP = "org.example.py.binary"
RELAUNCH_APP = "org.example.py.relaunch"
MODES_APP = "org.example.py.nomodes"
DEMO_APP = "org.example.swift.demo"
STARTUP_TIMEOUT = 15.0
RECORD_TIMEOUT = 15.0


def toml_string(value):
    # A TOML basic string is a JSON string for the characters paths contain.
    return json.dumps(value)


class Daemon:
    """A vigild with everything in one temporary folder."""

    def __init__(self, root):
        self.root = root
        self.socket = os.path.join(root, "run", "vigild.sock")
        self.apps_dir = os.path.join(root, "apps")
        self.log_dir = os.path.join(root, "logs")
        self.output = os.path.join(root, "vigild.out")
        for folder in (self.apps_dir, self.log_dir, os.path.join(root, "state"), os.path.dirname(self.socket)):
            os.makedirs(folder, exist_ok=True)
        self.config = os.path.join(root, "vigild.toml")
        cgroup_root = os.environ.get("VIGIL_TEST_CGROUP_ROOT")
        unified = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        if cgroup_root is None and os.geteuid() == 0 and os.path.exists(os.path.join(unified, "cgroup.procs")):
            # A root of its own, removed at the end, rather than the daemon's default.
            cgroup_root = os.path.join(unified, f"vigil-pytest-{os.getpid()}")
        self.cgroup_root = cgroup_root
        with open(self.config, "w") as config:
            config.write(DAEMON_CONFIG.format(
                apps=toml_string(self.apps_dir),
                state=toml_string(os.path.join(root, "state")),
                logs=toml_string(self.log_dir),
                extra=f"cgroup-root = {toml_string(cgroup_root)}" if cgroup_root else "",
            ))
        self.process = None

    def remove_cgroups(self):
        """Ends whatever the apps left running and removes the test's cgroup root."""
        root = self.cgroup_root
        if not root or os.environ.get("VIGIL_TEST_CGROUP_ROOT") or not os.path.isdir(root):
            return
        for child in os.listdir(root):
            path = os.path.join(root, child)
            if os.path.isdir(path):
                with open(os.path.join(path, "cgroup.kill"), "w") as kill:
                    kill.write("1")
                deadline = time.monotonic() + 10

                def populated():
                    with open(os.path.join(path, "cgroup.events")) as events:
                        return "populated 1" in events.read()
                while populated() and time.monotonic() < deadline:
                    time.sleep(0.05)
                os.rmdir(path)
        os.rmdir(root)

    def add_python_app(self, app_id, record_path):
        self.add_app(app_id, [PYTHON, EXAMPLE_APP, "--record", record_path])

    def add_demo_app(self, app_id, record_path):
        # env(1) execs in place: the demo is the process vigild launched, with its settings.
        self.add_app(app_id, ["/usr/bin/env", f"VIGIL_DEMO_RECORD={record_path}", VIGIL_DEMO_APP])

    def add_app(self, app_id, command):
        with open(os.path.join(self.apps_dir, app_id + ".toml"), "w") as manifest:
            manifest.write(APP_MANIFEST.format(id=toml_string(app_id), exec=json.dumps(command)))

    def start(self):
        arguments = [VIGILD, "--socket", self.socket, "--config", self.config]
        arguments += shlex.split(os.environ.get("VIGILD_ARGS", ""))
        # Never the test runner's own stdout/stderr: apps may outlive the daemon holding them.
        with open(self.output, "ab") as output:
            self.process = subprocess.Popen(arguments, stdin=subprocess.DEVNULL, stdout=output,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vigild exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with ControlClient(self.socket, timeout=2.0):
                    return
            except (VigilError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"vigild did not answer on {self.socket} within {STARTUP_TIMEOUT}s:\n{self.log_tail()}")

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        try:
            with ControlClient(self.socket, timeout=5.0) as control:
                for app in control.apps():
                    if app.get("pid"):
                        control.app_action("quit", app["id"])
        except (VigilError, OSError):
            pass
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log_tail(self, lines=40):
        try:
            with open(self.output, errors="replace") as output:
                return "".join(output.readlines()[-lines:])
        except OSError:
            return "(no daemon output)"


def read_records(path):
    """The app's records; a line it is still writing is skipped (read_jsonl)."""
    return read_jsonl(path)


def wait_for_record(path, predicate, timeout=RECORD_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in read_records(path):
            if predicate(record):
                return record
        time.sleep(0.05)
    return None


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class ProtocolTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vigil-pytest-")
        cls.daemon = Daemon(cls.tmp.name)
        cls.records = {app: os.path.join(cls.tmp.name, app + ".jsonl") for app in (BINARY_APP, RELAUNCH_APP, MODES_APP)}
        for app, record in cls.records.items():
            cls.daemon.add_python_app(app, record)
        cls.records[DEMO_APP] = os.path.join(cls.tmp.name, DEMO_APP + ".jsonl")
        cls.daemon.add_demo_app(DEMO_APP, cls.records[DEMO_APP])
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon.remove_cgroups()
        cls.tmp.cleanup()

    def control(self):
        return ControlClient(self.daemon.socket)

    def context(self):
        return "\n--- vigild output ---\n" + self.daemon.log_tail()

    def assertClosedWithError(self, connection, code):
        """The next frame is an error with `code`, then the daemon closes."""
        message = connection.receive(timeout=5.0)
        self.assertIsNotNone(message, f"no answer; expected error {code}" + self.context())
        self.assertEqual(message.type, "error", message.header)
        self.assertEqual(message["code"], code, message.header)
        self.assertIsInstance(message.get("message"), str)
        with self.assertRaises(ConnectionClosed):
            extra = connection.receive(timeout=5.0)
            self.fail(f"connection still open after fatal {code}; got {extra}")

    # -- handshake

    def test_control_handshake_is_welcomed(self):
        with self.control() as control:
            welcome = control.welcome
            self.assertEqual(welcome["type"], "welcome")
            self.assertEqual(welcome["version"], 1)
            self.assertEqual(welcome["role"], "control")
            self.assertIsInstance(welcome["daemon"], str)
            self.assertEqual(welcome["limits"], {"maxHeaderBytes": 65536, "maxBodyBytes": 1048576})

    def test_highest_common_version_is_chosen(self):
        with Connection(self.daemon.socket, versions=[1, 99]) as connection:
            self.assertEqual(connection.welcome["version"], 1)

    def test_unsupported_version_is_refused(self):
        connection = Connection(self.daemon.socket, handshake=False)
        with connection:
            connection.send_frame({"type": "hello", "versions": [99], "role": "control"})
            self.assertClosedWithError(connection, "unsupportedVersion")

    def test_first_frame_must_be_hello(self):
        with Connection(self.daemon.socket, handshake=False) as connection:
            connection.send_frame({"type": "apps", "id": 1})
            self.assertClosedWithError(connection, "handshakeRequired")

    def test_plain_process_cannot_take_app_role(self):
        with self.assertRaises(VigilError) as refusal:
            AppClient(self.daemon.socket)
        self.assertEqual(refusal.exception.code, "unauthorized", self.context())

    # -- framing errors

    def test_malformed_header_closes_only_that_connection(self):
        with self.control() as bystander, self.control() as offender:
            offender.send_raw(struct.pack("<II", 8, 0) + b"not json")
            self.assertClosedWithError(offender, "malformedFrame")
            self.assertIsInstance(bystander.apps(), list)

    def test_header_without_type_is_malformed(self):
        with self.control() as connection:
            connection.send_frame({"id": 3})
            self.assertClosedWithError(connection, "malformedFrame")

    def test_empty_header_is_malformed(self):
        with self.control() as connection:
            connection.send_raw(struct.pack("<II", 0, 0))
            self.assertClosedWithError(connection, "malformedFrame")

    def test_oversized_header_is_refused_on_the_prefix(self):
        # Only the prefix is sent: the daemon must answer without waiting for 64 KiB + 1.
        with self.control() as connection:
            connection.send_raw(struct.pack("<II", 65537, 0))
            self.assertClosedWithError(connection, "frameTooLarge")

    def test_oversized_body_is_refused_on_the_prefix(self):
        with self.control() as connection:
            connection.send_raw(struct.pack("<II", 20, 1048577))
            self.assertClosedWithError(connection, "frameTooLarge")

    def test_frame_split_across_writes_is_reassembled(self):
        with self.control() as connection:
            frame = encode_frame({"type": "apps", "id": 41})
            for byte in frame:
                connection.send_raw(bytes([byte]))
            reply = connection.receive(timeout=5.0)
            self.assertEqual((reply.type, reply.id), ("reply", 41), reply.header)

    def test_unknown_request_is_answered_and_connection_stays(self):
        with self.control() as connection:
            with self.assertRaises(VigilError) as refusal:
                connection.request("noSuchThing")
            self.assertEqual(refusal.exception.code, "unknownMessage")
            self.assertIsInstance(connection.apps(), list)

    # -- control role

    def test_apps_lists_manifests_with_documented_members(self):
        with self.control() as control:
            apps = {app["id"]: app for app in control.apps()}
        self.assertIn(BINARY_APP, apps, self.context())
        members = {"id", "state", "pid", "backgroundModes", "exitsOnSuspend", "forceQuit", "wakes", "launches",
                   "backgroundTimeUsed", "backgroundTimeRemaining", "tasks", "queuedEvents",
                   "unacknowledgedEvents", "droppedEvents", "lastDecision", "lastReason", "launchReason",
                   "logPath", "journalIdentifier", "manifestPath"}
        self.assertLessEqual(members, set(apps[BINARY_APP]), "missing: " + ", ".join(members - set(apps[BINARY_APP])))

    def test_status_names_the_suspension_mechanism(self):
        with self.control() as control:
            status = control.status()
        self.assertIn(status["suspension"], ("cgroup", "signal"))
        self.assertIsInstance(status["suspensionDetail"], str)
        self.assertEqual(status["onStop"], "leave")
        self.assertEqual(status["portKeeper"], "not running (no port open)")
        self.assertEqual(status["protocolVersion"], 1)

    def test_unknown_app_is_a_request_error(self):
        with self.control() as control:
            with self.assertRaises(VigilError) as refusal:
                control.app_action("launch", "org.example.nonexistent")
            self.assertEqual(refusal.exception.code, "unknownApp")
            self.assertIsInstance(control.apps(), list)

    # -- app role, through the example app

    def test_wake_delivers_binary_payload_intact(self):
        record = self.records[BINARY_APP]
        payload = bytes(range(256))
        with self.control() as control:
            control.app_action("launch", BINARY_APP)
            launched = wait_for_record(record, lambda r: r["kind"] == "launch")
            self.assertIsNotNone(launched, "the example app never connected" + self.context())
            self.assertEqual(launched["app"], BINARY_APP)

            accepted = control.wake(BINARY_APP, attributes={"note": "bytes 0..255", "n": 256}, payload=payload)
            self.assertIsInstance(accepted["seq"], int)
            self.assertIn(accepted["disposition"], ("delivered", "woke", "launched", "queued"))

            event = wait_for_record(record, lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"])
            self.assertIsNotNone(event, "the event never reached the app" + self.context())
            self.assertEqual(bytes.fromhex(event["payloadHex"]), payload)
            self.assertEqual(event["eventKind"], "test")
            self.assertEqual(event["attributes"], {"note": "bytes 0..255", "n": 256})
            self.assertFalse(event["redelivered"])
            self.assertTrue(self.eventually(lambda: self.app_info(control, BINARY_APP)["unacknowledgedEvents"] == 0),
                            "the ack did not empty the queue" + self.context())

    def test_event_relaunches_app_terminated_by_system(self):
        record = self.records[RELAUNCH_APP]
        with self.control() as control:
            control.app_action("launch", RELAUNCH_APP)
            self.assertIsNotNone(wait_for_record(record, lambda r: r["kind"] == "launch"), self.context())
            info = control.app_action("terminate", RELAUNCH_APP)
            self.assertFalse(info["forceQuit"])
            self.assertTrue(self.eventually(lambda: self.app_info(control, RELAUNCH_APP)["pid"] is None),
                            "terminate left the app running" + self.context())

            accepted = control.wake(RELAUNCH_APP, kind="test", payload=b"again")
            event = wait_for_record(record, lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"])
            self.assertIsNotNone(event, "the event did not relaunch the app" + self.context())
            self.assertEqual(bytes.fromhex(event["payloadHex"]), b"again")
            launches = [r for r in read_records(record) if r["kind"] == "launch"]
            self.assertEqual(launches[-1]["launch"]["reason"], "event", launches[-1])
            self.assertEqual(launches[-1]["state"], "background", launches[-1])

            decisions = control.log(app=RELAUNCH_APP)
            self.assertTrue(decisions, "no decision logged")
            self.assertLessEqual({"time", "app", "action", "reason", "state"}, set(decisions[-1]))

    @unittest.skipUnless(os.access(VIGIL_DEMO_APP, os.X_OK), f"vigil-demo-app is not built at {VIGIL_DEMO_APP}")
    def test_swift_demo_app_is_woken_in_the_background(self):
        record = self.records[DEMO_APP]
        with self.control() as control:
            sent = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            accepted = control.wake(DEMO_APP, attributes={"sent": sent}, payload="héllo".encode())
            self.assertEqual(accepted["disposition"], "launched", accepted)
            event = wait_for_record(record, lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"])
            self.assertIsNotNone(event, "the demo app never got the event" + self.context())
            self.assertEqual(event["payload"], "héllo")
            self.assertGreater(event["latencyNs"], 0)
            launch = next(r for r in read_records(record) if r["kind"] == "launch")
            self.assertEqual((launch["reason"], launch["eventKind"], launch["state"]), ("event", "test", "background"))
            self.assertIsNotNone(wait_for_record(record, lambda r: r["kind"] == "finished"), self.context())

    # -- malformed input before and after the handshake (issue 10, items 13 and 14)

    def test_malformed_hello_is_answered_then_closed(self):
        # None of these carries an id: the daemon must still answer, then close.
        cases = {
            "versions missing": b'{"type":"hello","role":"control"}',
            "versions not an array": b'{"type":"hello","versions":1,"role":"control"}',
            "a version not an integer": b'{"type":"hello","versions":[1,"2"],"role":"control"}',
            "a version out of range": b'{"type":"hello","versions":[1,-1],"role":"control"}',
            "role missing": b'{"type":"hello","versions":[1]}',
            "role unknown": b'{"type":"hello","versions":[1],"role":"admin"}',
            "app not a string": b'{"type":"hello","versions":[1],"role":"app","app":7}',
            "client not a string": b'{"type":"hello","versions":[1],"role":"control","client":["x"]}',
        }
        for name, header in cases.items():
            with self.subTest(name), Connection(self.daemon.socket, handshake=False) as connection:
                connection.send_raw(struct.pack("<II", len(header), 0) + header)
                self.assertClosedWithError(connection, "invalidArgument")
        with Connection(self.daemon.socket, handshake=False) as connection:
            connection.send_frame({"type": "hello", "id": 5, "versions": [1], "role": "nobody"})
            message = connection.receive(timeout=5.0)
            self.assertEqual((message.type, message["code"], message.id), ("error", "invalidArgument", 5), message.header)
        with self.control() as control:
            self.assertEqual(control.status()["pid"], self.daemon.process.pid)

    def test_invalid_utf8_anywhere_in_the_header_is_malformed(self):
        sequences = {"0xFF": b"\xff", "overlong /": b"\xc0\xaf", "encoded surrogate": b"\xed\xa0\x80",
                     "above U+10FFFF": b"\xf4\x90\x80\x80"}
        for name, bad in sequences.items():
            # Before the handshake, in a member the daemon decodes (hello's client).
            with self.subTest(name + " in hello"), Connection(self.daemon.socket, handshake=False) as connection:
                header = b'{"type":"hello","versions":[1],"role":"control","client":"' + bad + b'"}'
                connection.send_raw(struct.pack("<II", len(header), 0) + header)
                self.assertClosedWithError(connection, "malformedFrame")
            # After it, in a member nobody reads, and in a key.
            for header in (b'{"type":"status","id":1,"future":"' + bad + b'"}', b'{"type":"status","id":1,"' + bad + b'":1}'):
                with self.subTest(name, header=header), self.control() as connection:
                    connection.send_raw(struct.pack("<II", len(header), 0) + header)
                    self.assertClosedWithError(connection, "malformedFrame")

    def test_non_integer_request_id_is_a_malformed_frame(self):
        for value in ("1.5", '"7"', "true", "9223372036854775808", "[1]"):
            with self.subTest(value), self.control() as connection:
                header = ('{"type":"status","id":' + value + '}').encode()
                connection.send_raw(struct.pack("<II", len(header), 0) + header)
                message = connection.receive(timeout=5.0)
                self.assertEqual((message.type, message["code"]), ("error", "malformedFrame"), message.header)
                self.assertIn("'id'", message["message"])
                with self.assertRaises(ConnectionClosed):
                    connection.receive(timeout=5.0)

    def test_vigilctl_log_refuses_a_negative_limit(self):
        if not os.access(VIGILCTL, os.X_OK):
            self.skipTest(f"vigilctl is not built at {VIGILCTL}")
        run = subprocess.run([VIGILCTL, "--socket", self.daemon.socket, "log", "--limit=-1"],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertIn("--limit", run.stderr)
        self.assertIn("0…2^63-1", run.stderr)
        # The daemon itself refuses it too (another client than vigilctl).
        with self.control() as control:
            with self.assertRaises(VigilError) as refusal:
                control.request("log", limit=-1)
            self.assertEqual(refusal.exception.code, "invalidArgument")
            self.assertIn("'limit'", str(refusal.exception))
            self.assertEqual(control.status()["pid"], self.daemon.process.pid)
        self.assertIsNone(self.daemon.process.poll(), "vigild died" + self.context())

    # -- test wakes follow the background-mode rule (issue 10, item 14)

    def test_test_wake_of_an_accessory_kind_needs_the_mode(self):
        record = self.records[MODES_APP]
        with self.control() as control:
            control.app_action("launch", MODES_APP)
            self.assertIsNotNone(wait_for_record(record, lambda r: r["kind"] == "launch"), self.context())
            control.app_action("background", MODES_APP)
            self.assertTrue(self.eventually(lambda: self.app_info(control, MODES_APP)["state"] == "suspended", 20),
                            "the app was not suspended" + self.context())

            # The app has no external-accessory mode: not woken, the event waits for the foreground.
            accepted = control.wake(MODES_APP, kind="accessory.connected", attributes={"connectionID": 1, "protocolStrings": []})
            self.assertEqual(accepted["disposition"], "queued", accepted)
            self.assertEqual(self.app_info(control, MODES_APP)["state"], "suspended")
            last = control.log(app=MODES_APP, limit=1)[-1]
            self.assertIn("external-accessory", last["reason"], last)

            control.app_action("foreground", MODES_APP)
            event = wait_for_record(record, lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"])
            self.assertIsNotNone(event, "the queued event was not delivered in the foreground" + self.context())
            self.assertEqual(event["eventKind"], "accessory.connected")

    # -- helpers

    @staticmethod
    def app_info(control, app_id):
        return next(app for app in control.apps() if app["id"] == app_id)

    @staticmethod
    def eventually(condition, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.05)
        return False


# Integer members of requests, each with the request that carries it (@ID@ and @VALUE@ are replaced).
CONTROL_RANGE_CASES = [
    ("log", "limit", '{"type":"log","id":@ID@,"limit":@VALUE@}'),
    ("openSession", "connectionID", '{"type":"openSession","id":@ID@,"connectionID":@VALUE@,"protocol":"org.example.x"}'),
    ("write", "session", '{"type":"write","id":@ID@,"session":@VALUE@}'),
    ("closeSession", "session", '{"type":"closeSession","id":@ID@,"session":@VALUE@}'),
    ("ble.respond", "request", '{"type":"ble.respond","id":@ID@,"request":@VALUE@}'),
    ("ble.startAdvertising", "advertisement.appearance",
     '{"type":"ble.startAdvertising","id":@ID@,"advertisement":{"appearance":@VALUE@}}'),
    ("ble.read", "instance",
     '{"type":"ble.read","id":@ID@,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e",'
     '"instance":@VALUE@}'),
    ("ble.write", "instance",
     '{"type":"ble.write","id":@ID@,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e",'
     '"instance":@VALUE@,"withResponse":true}'),
    ("ble.notify", "instance",
     '{"type":"ble.notify","id":@ID@,"peripheral":"AA:BB:CC:DD:EE:FF","service":"181a","characteristic":"2a6e",'
     '"instance":@VALUE@,"enabled":true}'),
]
APP_RANGE_CASES = CONTROL_RANGE_CASES[1:] + [
    ("endBackgroundTask", "task", '{"type":"endBackgroundTask","id":@ID@,"task":@VALUE@}'),
    ("finishedProcessing", "ack", '{"type":"finishedProcessing","id":@ID@,"ack":@VALUE@}'),
]
OUT_OF_RANGE = ["-1", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
                "18446744073709551616", "1.5", "1e300", "1e400", "true", '"7"', "null"]
# null is "absent" for an optional member (a valid request, not sent here); for a required one, invalidArgument.
OPTIONAL_MEMBERS = {("log", "limit"), ("ble.startAdvertising", "advertisement.appearance"), ("ble.read", "instance"),
                    ("ble.write", "instance"), ("ble.notify", "instance"), ("finishedProcessing", "ack")}


# Members that are a seq take 0…2^64-1: 2^63 is in range for them.
UINT64_MEMBERS = {("finishedProcessing", "ack")}


def range_values(type_name, field):
    return [value for value in OUT_OF_RANGE if (value != "null" or (type_name, field) not in OPTIONAL_MEMBERS)
            and (value != "9223372036854775808" or (type_name, field) not in UINT64_MEMBERS)]


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class RequestRangeTests(unittest.TestCase):
    """Every integer member of every request, out of range, on a real vigild
    (issue 10, item 11): an invalidArgument naming member, value and range,
    and the daemon keeps answering."""

    SCRIPT_APP = "org.example.py.ranges"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vigil-pytest-ranges-")
        cls.daemon = Daemon(cls.tmp.name)
        cls.script = os.path.join(cls.tmp.name, "frames.json")
        cls.results = os.path.join(cls.tmp.name, "results.json")
        cls.daemon.add_app(cls.SCRIPT_APP, [PYTHON, PROTOCOL_FUZZ, "script", "--frames", cls.script, "--out", cls.results])
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon.remove_cgroups()
        cls.tmp.cleanup()

    def context(self):
        return "\n--- vigild output ---\n" + self.daemon.log_tail()

    def check_refusal(self, type_name, field, value, answer):
        where = f"{type_name}.{field} = {value}: {answer}"
        self.assertIsNotNone(answer, "no answer to " + where + self.context())
        self.assertEqual(answer["type"], "error", where)
        self.assertEqual(answer["code"], "invalidArgument", where)
        if value != "null":
            self.assertIn(f"'{field}'", answer["message"], where)
            self.assertIn("…", answer["message"], where)  # the range

    def test_control_requests(self):
        sent = 0
        with ControlClient(self.daemon.socket) as control:
            for type_name, field, template in CONTROL_RANGE_CASES:
                for value in range_values(type_name, field):
                    sent += 1
                    header = template.replace("@ID@", str(sent)).replace("@VALUE@", value).encode()
                    control.send_raw(struct.pack("<II", len(header), 0) + header)
                    answer = control.receive(timeout=10)
                    self.check_refusal(type_name, field, value, answer and answer.header)
                    self.assertEqual(answer.id, sent)
                    # Still answering, on the same connection.
                    self.assertEqual(control.status()["pid"], self.daemon.process.pid, self.context())
        print(f"\n  control: {sent} out-of-range requests refused, vigild alive", file=sys.stderr)
        # Before the handshake, hello's versions: fatal, answered.
        for value in OUT_OF_RANGE[:-1]:
            with self.subTest(versions=value), Connection(self.daemon.socket, handshake=False) as connection:
                header = ('{"type":"hello","versions":[1,' + value + '],"role":"control"}').encode()
                connection.send_raw(struct.pack("<II", len(header), 0) + header)
                answer = connection.receive(timeout=10)
                self.assertEqual((answer.type, answer["code"]), ("error", "invalidArgument"), answer.header)
                self.assertIn("'versions[1]'", answer["message"])
                with self.assertRaises(ConnectionClosed):
                    connection.receive(timeout=10)
        self.assertIsNone(self.daemon.process.poll(), "vigild died" + self.context())

    def test_app_requests(self):
        headers, expected = [], []
        for type_name, field, template in APP_RANGE_CASES:
            for value in range_values(type_name, field):
                headers.append(template.replace("@ID@", str(len(headers) + 1)).replace("@VALUE@", value))
                expected.append((type_name, field, value))
        # ack has no id: nothing to answer, but the daemon must go on answering.
        for value in OUT_OF_RANGE:
            headers.append('{"type":"ack","seq":' + value + '}')
            expected.append(("ack", "seq", value))
        # In the foreground backgroundTimeRemaining is unlimited: seconds is there, null.
        headers.append('{"type":"backgroundTimeRemaining","id":999}')
        expected.append(("backgroundTimeRemaining", None, None))
        with open(self.script, "w") as script:
            json.dump(headers, script)
        with ControlClient(self.daemon.socket) as control:
            control.app_action("launch", self.SCRIPT_APP)
            deadline = time.monotonic() + 60
            while not os.path.exists(self.results) and time.monotonic() < deadline:
                self.assertIsNone(self.daemon.process.poll(), "vigild died" + self.context())
                time.sleep(0.05)
            self.assertTrue(os.path.exists(self.results), "the app wrote no results" + self.context())
            with open(self.results) as results:
                results = json.load(results)["results"]
            self.assertEqual(len(results), len(headers))
            for (type_name, field, value), result in zip(expected, results):
                with self.subTest(type_name, value=value):
                    self.assertIsNotNone(result["probe"], f"no answer after {result['sent']}" + self.context())
                    self.assertEqual(result["probe"]["type"], "reply", result)
                    if type_name == "ack":
                        self.assertIsNone(result["answer"], result)
                    elif type_name == "backgroundTimeRemaining":
                        self.assertIn("seconds", result["answer"], result)
                        self.assertIsNone(result["answer"]["seconds"], result)
                    else:
                        self.check_refusal(type_name, field, value, result["answer"])
            self.assertEqual(control.status()["pid"], self.daemon.process.pid)
        print(f"\n  app: {len(headers)} requests sent from inside the app, each followed by a probe that was answered",
              file=sys.stderr)


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class RandomFrameTests(unittest.TestCase):
    """A bounded random-frame fuzzer against a real vigild: frames of every
    known type with random members and values, invalid UTF-8, random bytes,
    cut and oversized frames; as control client, before the handshake, and from
    inside an app. The daemon must stay up and answer a fresh status.

    VIGIL_FUZZ_SEED reproduces a run; VIGIL_FUZZ_FRAMES sets the control count."""

    FUZZ_APP = "org.example.py.fuzz"
    TARGET_APP = "org.example.py.sleeper"

    @contextlib.contextmanager
    def daemon_must_answer(self, daemon, context):
        """A refused connect or a reset means the daemon is gone: a failure, with its output."""
        try:
            yield
        except (OSError, VigilError) as error:
            self.fail(f"vigild stopped answering ({error}); exit status {daemon.process.poll()}" + context())

    def test_random_frames_leave_the_daemon_answering(self):
        seed = int(os.environ.get("VIGIL_FUZZ_SEED") or random.randrange(2**32))
        control_count = int(os.environ.get("VIGIL_FUZZ_FRAMES") or 6000)
        app_count, handshake_count = control_count // 2, control_count // 6
        with tempfile.TemporaryDirectory(prefix="vigil-pytest-fuzz-") as tmp:
            daemon = Daemon(tmp)
            results = os.path.join(tmp, "fuzz-app.json")
            daemon.add_app(self.FUZZ_APP, [PYTHON, PROTOCOL_FUZZ, "fuzz", "--count", str(app_count),
                                           "--seed", str(seed), "--out", results])
            daemon.add_app(self.TARGET_APP, ["/bin/sleep", "600"])
            frames_log = os.path.join(tmp, "frames.hex")
            daemon.start()
            try:
                context = lambda: f"\nseed {seed}; frames in {frames_log}\n--- vigild output ---\n" + daemon.log_tail()
                rng = random.Random(seed)
                with open(frames_log, "w") as log, self.daemon_must_answer(daemon, context):
                    # Before the handshake: hellos of every shape, and anything else.
                    before = protocol_fuzz.fuzz(daemon.socket, None, {"hello": protocol_fuzz.HELLO_MEMBERS}, handshake_count,
                                                rng, log=log)
                    self.assertIsNone(daemon.process.poll(), "vigild died before the handshake" + context())
                    control = protocol_fuzz.fuzz(daemon.socket, {"type": "hello", "versions": [1], "role": "control"},
                                                 protocol_fuzz.CONTROL_TYPES, control_count, rng,
                                                 app_ids=[self.TARGET_APP, "org.example.none"], log=log)
                    self.assertIsNone(daemon.process.poll(), "vigild died under control frames" + context())
                with ControlClient(daemon.socket) as client:
                    client.app_action("launch", self.FUZZ_APP)
                    deadline = time.monotonic() + 120
                    while not os.path.exists(results) and time.monotonic() < deadline:
                        self.assertIsNone(daemon.process.poll(), "vigild died under app frames" + context())
                        time.sleep(0.05)
                self.assertTrue(os.path.exists(results), "the fuzzing app did not finish" + context())
                with open(results) as figures:
                    app = json.load(figures)["figures"]
                self.assertIsNone(daemon.process.poll(), "vigild died" + context())
                with ControlClient(daemon.socket) as fresh:
                    status = fresh.status()
                    self.assertEqual(status["pid"], daemon.process.pid)
                total = before["frames"] + control["frames"] + app["frames"]
                print(f"\n  random frames (seed {seed}): {total} sent: {before['frames']} before the handshake "
                      f"({before['connections']} connections), {control['frames']} as control "
                      f"({control['connections']} connections, {control['answers']} answers), {app['frames']} as an app "
                      f"({app['connections']} connections, {app['answers']} answers); vigild alive, status answered",
                      file=sys.stderr)
            finally:
                daemon.stop()
                daemon.remove_cgroups()


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class DocumentedEdgeTests(unittest.TestCase):
    """What docs/protocol.md says about a second app connection and a full
    queue (issue 10, item 15), on a real vigild with a queue of 3."""

    TAKEOVER_APP = "org.example.py.takeover"
    QUEUE_APP = "org.example.py.queue"
    LIMIT = 3

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vigil-pytest-edges-")
        cls.daemon = Daemon(cls.tmp.name)
        with open(cls.daemon.config) as config:
            text = config.read()
        with open(cls.daemon.config, "w") as config:
            config.write(text.replace("event-queue-limit = 1000", f"event-queue-limit = {cls.LIMIT}"))
        cls.takeover = os.path.join(cls.tmp.name, "takeover.json")
        cls.record = os.path.join(cls.tmp.name, "queue.jsonl")
        cls.daemon.add_app(cls.TAKEOVER_APP, [PYTHON, PROTOCOL_FUZZ, "takeover", "--out", cls.takeover])
        cls.daemon.add_python_app(cls.QUEUE_APP, cls.record)
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon.remove_cgroups()
        cls.tmp.cleanup()

    def context(self):
        return "\n--- vigild output ---\n" + self.daemon.log_tail()

    def test_a_second_app_connection_takes_over_the_first(self):
        with ControlClient(self.daemon.socket) as control:
            accepted = control.wake(self.TAKEOVER_APP, payload=b"held")
            self.assertEqual(accepted["disposition"], "launched", accepted)
            deadline = time.monotonic() + 30
            while not os.path.exists(self.takeover) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.assertTrue(os.path.exists(self.takeover), "the app wrote nothing" + self.context())
        with open(self.takeover) as result:
            result = json.load(result)
        self.assertEqual(result["first"]["seq"], accepted["seq"], result)
        # The first connection ends without a word; the second gets the event again.
        self.assertEqual(result["afterTakeover"], [], result)
        self.assertTrue(result["firstClosed"], result)
        self.assertIsNotNone(result["second"], result)
        self.assertEqual((result["second"]["seq"], result["second"]["redelivered"]), (accepted["seq"], True), result)
        self.assertEqual(result["probe"]["type"], "reply", result)

    def test_a_full_queue_refuses_and_reports_overflow(self):
        with ControlClient(self.daemon.socket) as control:
            control.app_action("launch", self.QUEUE_APP)
            self.assertIsNotNone(wait_for_record(self.record, lambda r: r["kind"] == "launch"), self.context())
            control.app_action("background", self.QUEUE_APP)
            deadline = time.monotonic() + 20
            while self.state(control) != "suspended" and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.state(control), "suspended", self.context())
            # Kinds the app has no mode for: queued, not woken, until the queue is full.
            accessory = {"connectionID": 1, "protocolStrings": []}
            seqs = [control.wake(self.QUEUE_APP, kind="accessory.connected", attributes=accessory)["seq"]
                    for _ in range(self.LIMIT)]
            with self.assertRaises(VigilError) as refusal:
                control.wake(self.QUEUE_APP, kind="accessory.disconnected")
            self.assertEqual(refusal.exception.code, "queueFull")
            self.assertIn("dropped", refusal.exception.message)
            info = next(app for app in control.apps() if app["id"] == self.QUEUE_APP)
            self.assertEqual(info["droppedEvents"], 1, info)
            # In the foreground the app gets the three, acknowledges them, then the report.
            control.app_action("foreground", self.QUEUE_APP)
            overflow = wait_for_record(self.record, lambda r: r["kind"] == "event" and r["eventKind"] == "overflow")
            self.assertIsNotNone(overflow, "no overflow event" + self.context())
            self.assertEqual(overflow["attributes"], {"dropped": 1, "firstDroppedKind": "accessory.disconnected"})
            delivered = [r["seq"] for r in read_records(self.record) if r["kind"] == "event" and r["eventKind"] != "overflow"]
            self.assertEqual(delivered, seqs)
            self.assertGreater(overflow["seq"], seqs[-1])

    def state(self, control):
        return next(app for app in control.apps() if app["id"] == self.QUEUE_APP)["state"]


if __name__ == "__main__":
    unittest.main()

"""Fault suite: broken manifests and daemon configs against the real vigild.

    VIGILD=.build/debug/vigild /usr/bin/python3 -m unittest discover -s Tests/python -p test_bad_inputs.py -v

- A manifest directory full of broken manifests (bad TOML of every shape,
  numbers out of range, wrong types, missing fields, files no parser should
  see) beside a good one: every broken file is refused with its file (and
  field) named in `status` (and `vigilctl status --json`) and in the log, the
  good app launches and gets its events, the daemon lives on, and so through
  `reload` with more broken files dropped in.
- Broken daemon configs: vigild refuses to start with an error naming the file
  and the key, exits non-zero and is not killed by a signal.
- `reload` does not leak: RSS growth per reload with 8 manifests is printed,
  and only a gross leak (over 1 kB per reload on average) fails (issue 10,
  item 12: about 7.6 kB per reload with TOMLKit).
"""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_protocol import (  # noqa: E402
    Daemon, REPO, VIGILD, ControlClient, read_records, toml_string, wait_for_record,
)

VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(REPO, ".build", "debug", "vigilctl")
GOOD_APP = "org.example.badinputs.good"
TIMEOUT = 20.0


def manifest(app_id, extra=""):
    return f'id = {toml_string(app_id)}\nexec = ["/bin/true"]\n{extra}'.encode()


GOOD_HEAD = manifest("org.example.badinputs.x")

# file name -> (contents, the field named or None for the whole file, a piece of the message)
BROKEN_MANIFESTS = {
    "brackets3.toml": (b"[[[", None, "not valid TOML: expected a key, found '[' at line 1, column 3"),
    "brackets6.toml": (b"[[[]]]\n", None, "not valid TOML: expected a key, found '[' at line 1, column 3"),
    "brackets-late.toml": (GOOD_HEAD + b"[[[]]]\n", None, "at line 3, column 3"),
    "unterminated.toml": (b'id = "org.example.x\nexec = ["/bin/true"]\n', None, "the string is not closed on its line"),
    "unterminated-eof.toml": (b'id = "org.example.x"\nexec = ["/bin/true"]\nworking-directory = """/tmp', None,
                              "the string is never closed"),
    "bad-escape.toml": (b'id = "org.\\qexample"\nexec = ["/bin/true"]\n', None, "invalid escape '\\q'"),
    "bad-unicode-escape.toml": (b'id = "org.example.x"\nexec = ["/bin/\\uD800"]\n', None, "not a Unicode scalar value"),
    "duplicate-key.toml": (GOOD_HEAD + b'id = "org.example.y"\n', None, "'id' is defined twice at line 3"),
    "duplicate-table.toml": (GOOD_HEAD + b'[environment]\nA = "1"\n[environment]\nB = "2"\n', None,
                             "table [environment] is defined twice"),
    "invalid-utf8.toml": (b'id = "org.example.x"\nexec = ["/bin/\xff"]\n', None, "not valid UTF-8 (byte 0xFF) at line 2"),
    "overlong-utf8.toml": (b'id = "org.example.\xc0\xaf"\nexec = ["/bin/true"]\n', None, "not valid UTF-8 (byte 0xC0)"),
    "surrogate-utf8.toml": (b'# \xed\xa0\x80\n' + GOOD_HEAD, None, "not valid UTF-8"),
    "nul.toml": (b'id = "org.example.x"\x00\nexec = ["/bin/true"]\n', None, "control character U+0000"),
    "bom.toml": (b"\xef\xbb\xbf" + GOOD_HEAD, None, "a byte order mark is not allowed"),
    "huge.toml": (GOOD_HEAD + b"# " + b"x" * (2 << 20) + b"\n", None, "larger than 1048576 bytes"),
    "deep-arrays.toml": (b"id = " + b"[" * 100000, None, "nested deeper than 128 levels"),
    "deep-tables.toml": (b"[" + b"a." * 5000 + b"a]\n", None, "nested deeper than 128 levels"),
    "deep-inline.toml": (b"environment = " + b"{a=" * 5000, None, "nested deeper than 128 levels"),
    "huge-int.toml": (GOOD_HEAD + b"exits-on-suspend = 99999999999999999999999\n", None, "does not fit in 64 bits"),
    "crlf-cr.toml": (b'id = "org.example.x"\rexec = ["/bin/true"]\r\n', None, "control character U+000D"),
    "wrong-type-id.toml": (b'id = 42\nexec = ["/bin/true"]\n', "id", "must be a string, not an integer"),
    "wrong-type-exec.toml": (b'id = "org.example.x"\nexec = "/bin/true"\n', "exec", "must be an array of strings, not a string"),
    "wrong-type-element.toml": (b'id = "org.example.x"\nexec = ["/bin/true", 1e300]\n', "exec[1]", "must be a string, not a float"),
    "wrong-type-bool.toml": (GOOD_HEAD + b"exits-on-suspend = inf\n", "exits-on-suspend", "must be true or false, not a float"),
    "wrong-type-env.toml": (GOOD_HEAD + b"[environment]\nLEVEL = 9223372036854775807\n", "environment.LEVEL",
                            "must be a string, not an integer"),
    "missing-exec.toml": (b'id = "org.example.noexec"\n', "exec", "is required"),
    "empty-exec.toml": (b'id = "org.example.x"\nexec = []\n', "exec", "must name a program"),
    "missing-id.toml": (b'exec = ["/bin/true"]\n', "id", "is required"),
    "empty.toml": (b"", "id", "is required"),
    "bad-id.toml": (b'id = "not reverse dns"\nexec = ["/bin/true"]\n', "id", "is not a reverse-DNS identifier"),
    "unknown-mode.toml": (GOOD_HEAD + b'background-modes = ["external-accessory", "audio"]\n', "background-modes[1]",
                          "unknown mode 'audio'"),
    "unknown-field.toml": (GOOD_HEAD + b'exec-path = "/bin/true"\n', "exec-path", "unknown field"),
    "relative-dir.toml": (GOOD_HEAD + b'working-directory = "tmp"\n', "working-directory", "must be an absolute path"),
    "bad-protocol.toml": (GOOD_HEAD + b'accessory-protocols = ["$(reboot)"]\n', "accessory-protocols[0]",
                          "is not a reverse-DNS protocol string"),
}

# Files that are not files: made in place by `make_special`.
SPECIAL_MANIFESTS = {
    "fifo.toml": "cannot read: not a regular file",     # reading it would block the daemon forever
    "zero.toml": "cannot read: not a regular file",     # a symlink to /dev/zero: endless
    "folder.toml": "cannot read: not a regular file",
}


def make_special(directory, name):
    path = os.path.join(directory, name)
    if name == "fifo.toml":
        os.mkfifo(path)
    elif name == "zero.toml":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)


def random_junk(seed, count):
    rng = random.Random(seed)
    pieces = [b"[", b"]", b"[[", b"{", b"}", b'"', b"'''", b"\\", b"=", b".", b"\n", b"\x00", b"\xff", b"#", b"id",
              b"exec", b"1e999", b"0x", b"-", b"inf", b"\xe2\x82"]
    return {f"junk-{index}.toml": b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for index in range(count)}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def problems_by_file(problems):
    return {os.path.basename(problem["file"]): problem for problem in problems}


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class BrokenManifestTests(unittest.TestCase):
    """One vigild, started over a manifest directory of broken files and a good one."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="vigil-badinputs-")
        cls.daemon = Daemon(cls.tmp.name)
        cls.record = os.path.join(cls.tmp.name, GOOD_APP + ".jsonl")
        cls.daemon.add_python_app(GOOD_APP, cls.record)
        cls.junk = random_junk(10, 30)
        for name, contents in list(BROKEN_MANIFESTS.items()) + list(cls.junk.items()):
            with open(os.path.join(cls.daemon.apps_dir, name), "wb") as file:
                file.write(contents[0] if isinstance(contents, tuple) else contents)
        for name in SPECIAL_MANIFESTS:
            make_special(cls.daemon.apps_dir, name)
        cls.daemon.start()  # on TOMLKit, '[[[' aborted vigild right here

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon.remove_cgroups()
        cls.tmp.cleanup()

    def context(self):
        return "\n--- vigild output ---\n" + self.daemon.log_tail()

    def assertAlive(self):
        self.assertIsNone(self.daemon.process.poll(), "vigild died" + self.context())

    def assertRefusedByName(self, problems, expected):
        """Every expected file is refused, with the field and message given."""
        found = problems_by_file(problems)
        missing = sorted(set(expected) - set(found))
        self.assertEqual(missing, [], "not reported: " + ", ".join(missing) + self.context())
        for name, (field, message) in expected.items():
            problem = found[name]
            self.assertEqual(problem["file"], os.path.join(self.daemon.apps_dir, name))
            self.assertEqual(problem.get("field"), field, f"{name}: {problem}")
            self.assertIn(message, problem["message"], f"{name}: {problem}")

    def expected(self):
        expected = {name: (field, message) for name, (_, field, message) in BROKEN_MANIFESTS.items()}
        expected.update({name: (None, message) for name, message in SPECIAL_MANIFESTS.items()})
        return expected

    def assertGoodAppWorks(self, note):
        with ControlClient(self.daemon.socket) as control:
            accepted = control.wake(GOOD_APP, attributes={"note": note}, payload=note.encode())
            event = wait_for_record(self.record, lambda r: r["kind"] == "event" and r["seq"] == accepted["seq"])
            self.assertIsNotNone(event, f"the good app never got '{note}'" + self.context())
            self.assertEqual(bytes.fromhex(event["payloadHex"]), note.encode())

    def test_1_every_broken_manifest_is_refused_by_name(self):
        with ControlClient(self.daemon.socket) as control:
            status = control.status()
            apps = [app["id"] for app in control.apps()]
        self.assertEqual(apps, [GOOD_APP], self.context())
        problems = status["manifestProblems"]
        self.assertRefusedByName(problems, self.expected())
        junk = problems_by_file(problems)
        self.assertEqual(sorted(set(self.junk) - set(junk)), [], "junk files not refused")
        self.assertEqual(len(problems), len(self.expected()) + len(self.junk), problems)
        print(f"\n{len(problems)} broken manifests refused, {len(apps)} app loaded", flush=True)

        # The log says the same, one line per file.
        with open(self.daemon.output, errors="replace") as output:
            log = output.read()
        for problem in problems:
            where = problem["file"] + (f": field '{problem['field']}'" if problem.get("field") else "")
            self.assertIn(f"manifest rejected: {where}: ", log)

        if os.access(VIGILCTL, os.X_OK):
            shown = subprocess.run([VIGILCTL, "status", "--json", "--socket", self.daemon.socket],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
            self.assertEqual(shown.returncode, 0, shown.stderr)
            self.assertEqual(problems_by_file(json.loads(shown.stdout)["manifestProblems"]), problems_by_file(problems))
        self.assertAlive()

    def test_2_the_good_app_launches_and_gets_events(self):
        with ControlClient(self.daemon.socket) as control:
            control.app_action("launch", GOOD_APP)
        self.assertIsNotNone(wait_for_record(self.record, lambda r: r["kind"] == "launch"), self.context())
        self.assertGoodAppWorks("after start")
        self.assertAlive()

    def test_3_reload_with_more_broken_files(self):
        late = {
            "late-brackets.toml": (b"[[[", None, "not valid TOML"),
            "late-range.toml": (GOOD_HEAD + b"exits-on-suspend = 1e300\n", "exits-on-suspend", "not a float"),
            "late-missing-exec.toml": (b'id = "org.example.late"\n', "exec", "is required"),
            "zz-duplicate-id.toml": (manifest(GOOD_APP), "id", "is already declared by"),
        }
        for name, (contents, _, _) in late.items():
            with open(os.path.join(self.daemon.apps_dir, name), "wb") as file:
                file.write(contents)
        with open(os.path.join(self.daemon.apps_dir, "late-good.toml"), "wb") as file:
            file.write(manifest("org.example.badinputs.late"))
        # The config file itself broken under a running daemon: reload keeps what it runs with.
        with ControlClient(self.daemon.socket) as control:
            timings = control.status()["timings"]
        with open(self.daemon.config, "w") as config:
            config.write("[[[\n")

        for _ in range(3):
            with ControlClient(self.daemon.socket) as control:
                reply = control.reload()
            self.assertAlive()
        self.assertEqual(sorted(reply["apps"]), sorted([GOOD_APP, "org.example.badinputs.late"]), self.context())
        expected = self.expected()
        expected.update({name: (field, message) for name, (_, field, message) in late.items()})
        self.assertRefusedByName(reply["problems"], expected)
        with ControlClient(self.daemon.socket) as control:
            status = control.status()
        self.assertEqual(status["timings"], timings)
        self.assertRefusedByName(status["manifestProblems"], expected)
        self.assertGoodAppWorks("after reload")
        self.assertAlive()


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class BrokenConfigTests(unittest.TestCase):
    """vigild refuses each broken config: non-zero exit, no signal, file and key named."""

    CASES = {
        "brackets3": (b"[[[\n", None, "not valid TOML: expected a key, found '[' at line 1, column 3"),
        "brackets6": (b"[[[]]]\n", None, "not valid TOML"),
        "huge-duration": (b"[timings]\nsuspend-grace = 1e300\n", "timings.suspend-grace",
                          "1e+300 is out of range: must be a number of seconds from 0.1 to 86400"),
        "zero-duration": (b"[timings]\nsuspend-grace = 0\n", "timings.suspend-grace", "0 is out of range"),
        "nan-duration": (b"[timings]\nwake-budget = nan\n", "timings.wake-budget", "nan is out of range"),
        "negative-duration": (b"[timings]\nexit-grace = -1\n", "timings.exit-grace", "-1 is out of range"),
        "huge-queue": (b"event-queue-limit = 9223372036854775807\n", "event-queue-limit",
                       "9223372036854775807 is out of range: must be an integer from 1 to 1000000"),
        "wide-int": (b"event-queue-limit = 99999999999999999999\n", None, "does not fit in 64 bits"),
        "tiny-buffer": (b"session-buffer-limit = 1\n", "session-buffer-limit", "must be an integer from 1024"),
        "huge-timeout": (b"bluetooth-request-timeout = 1e12\n", "bluetooth-request-timeout", "from 0.1 to 300"),
        "bad-adapter": (b'bluetooth-adapter = "usb0"\n', "bluetooth-adapter", "must name an adapter: hciN or its address"),
        "warning-past-limit": (b"[timings]\nbackground-time-limit = 5\nexpiration-warning = 5\n",
                               "timings.expiration-warning", "must be shorter than background-time-limit"),
        "wrong-type-seconds": (b'[timings]\nwake-budget = "10 s"\n', "timings.wake-budget", "not a string"),
        "wrong-type-int": (b"[timings]\nrelaunch-limit = 1.5\n", "timings.relaunch-limit", "not a float (1.5)"),
        "wrong-type-table": (b"timings = 3\n", "timings", "must be a table, not an integer"),
        "unknown-key": (b'sokcet = "/x"\n', "sokcet", "unknown field"),
        "unknown-suspension": (b'suspension = "freezer"\n', "suspension", "must be one of auto, cgroup, signal"),
        "bad-accessory": (b'[[accessory]]\nvendor-id = "xyz"\nprotocols = ["org.example.p"]\n', "accessory[0].vendor-id",
                          "is not a USB id"),
        "invalid-utf8": (b'socket = "/run/\xff"\n', None, "not valid UTF-8 (byte 0xFF) at line 1"),
        "nul": (b"bluetooth = false\x00\n", None, "control character U+0000"),
        "huge-file": (b"# " + b"x" * (2 << 20) + b"\n", None, "larger than 1048576 bytes"),
        "deep": (b"manifest-dirs = " + b"[" * 100000, None, "nested deeper than 128 levels"),
        "duplicate": (b"bluetooth = false\nbluetooth = true\n", None, "'bluetooth' is defined twice"),
    }

    def run_vigild(self, config_path, root):
        """(exit status or None if it kept running, its output, whether it listened)."""
        socket = os.path.join(root, "vigild.sock")
        if os.path.exists(socket):
            os.unlink(socket)
        with open(os.path.join(root, "out"), "wb") as output:
            process = subprocess.Popen([VIGILD, "--socket", socket, "--config", config_path], stdin=subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        # It exits at once on a refused config; listening means it took the config.
        deadline = time.monotonic() + TIMEOUT
        while process.poll() is None and not os.path.exists(socket) and time.monotonic() < deadline:
            time.sleep(0.02)
        listened = os.path.exists(socket)
        code = process.poll()
        if code is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        with open(os.path.join(root, "out"), errors="replace") as output:
            return code, output.read(), listened

    def test_each_broken_config_is_refused_by_name(self):
        with tempfile.TemporaryDirectory(prefix="vigil-badconfig-") as root:
            state = f"state-dir = {toml_string(os.path.join(root, 'state'))}\nlog-dir = {toml_string(os.path.join(root, 'logs'))}\n"
            for name, (contents, field, message) in self.CASES.items():
                with self.subTest(config=name):
                    path = os.path.join(root, name + ".toml")
                    with open(path, "wb") as config:
                        # Paths first where the document stays valid, so that only the broken key is wrong.
                        config.write(contents if field is None else state.encode() + contents)
                    code, output, listened = self.run_vigild(path, root)
                    self.assertFalse(listened, f"{name}: vigild took the config and listened:\n{output}")
                    self.assertIsNotNone(code, f"{name}: vigild did not exit within {TIMEOUT} s:\n{output}")
                    self.assertGreater(code, 0, f"{name}: exit status {code} (negative: a signal):\n{output}")
                    where = path + (f": field '{field}'" if field else "")
                    self.assertIn(f"invalid configuration: {where}: ", output)
                    self.assertIn(message, output)
            print(f"\n{len(self.CASES)} broken configs refused", flush=True)

    def test_special_files_are_refused(self):
        with tempfile.TemporaryDirectory(prefix="vigil-badconfig-") as root:
            for name in ("fifo.toml", "folder.toml"):
                make_special(root, name)
                path = os.path.join(root, name)
                code, output, listened = self.run_vigild(path, root)
                self.assertIsNotNone(code, f"{name}: vigild did not exit (blocked reading it?):\n{output}")
                self.assertGreater(code, 0, output)
                self.assertIn(f"invalid configuration: {path}: cannot read: not a regular file", output)


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD} (set VIGILD, or run swift build)")
class ReloadMemoryTests(unittest.TestCase):
    WARM_UP = int(os.environ.get("VIGIL_RELOAD_WARM_UP", "300"))
    RELOADS = int(os.environ.get("VIGIL_RELOADS", "2000"))
    GROSS_LEAK = 1024  # bytes per reload, averaged: far above noise, far below the 7.6 kB seen

    def test_reload_does_not_leak(self):
        with tempfile.TemporaryDirectory(prefix="vigil-reload-") as root:
            daemon = Daemon(root)
            for index in range(8):
                with open(os.path.join(daemon.apps_dir, f"app{index}.toml"), "w") as file:
                    file.write(f'id = "org.example.reload{index}"\nexec = ["/bin/sleep", "1000"]\n'
                               f'background-modes = ["external-accessory"]\naccessory-protocols = ["org.example.p{index}"]\n'
                               f'[environment]\nINDEX = "{index}"\n')
            daemon.start()
            try:
                with ControlClient(daemon.socket) as control:
                    for _ in range(self.WARM_UP):
                        control.reload()
                    before = rss_kib(daemon.process.pid)
                    started = time.monotonic()
                    for _ in range(self.RELOADS):
                        reply = control.reload()
                    elapsed = time.monotonic() - started
                    after = rss_kib(daemon.process.pid)
                self.assertEqual(len(reply["apps"]), 8, reply)
                per_reload = (after - before) * 1024 / self.RELOADS
                print(f"\nreload with 8 manifests: RSS {before} -> {after} KiB over {self.RELOADS} reloads "
                      f"({per_reload:.0f} B per reload; {self.RELOADS / elapsed:.0f} reloads/s)", flush=True)
                self.assertLess(per_reload, self.GROSS_LEAK, "reload leaks")
            finally:
                daemon.stop()
                daemon.remove_cgroups()


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/python3
"""Shared pieces of the fault suite (Tests/python/test_fault_*.py).

The fault tests start the real vigild and real apps (Tests/python/fault_app.py,
clients/python/example_app.py) and inject faults from outside: SIGKILL and
SIGTERM of vigild, SIGKILL of apps, bluetoothd restarts. They print their
figures and fail on any loss. What is here:

- `FaultDaemon`: test_protocol.Daemon (one temporary folder, a private socket)
  with the config a fault test needs: the suspension mode, fast timings, no
  Bluetooth unless asked, an environment of its own.
- `TestbedDaemon`: vigild inside accessory_testbed.py's umockdev testbed (a
  fake USB serial accessory backed by a pty), run by `supervise` below so that
  it can be SIGKILLed and comes back in the same testbed, with the same state
  folder, at once.
- `SecondCgroupMount`: lets a vigild inside a umockdev testbed use the cgroup
  freezer (umockdev hides /sys, cgroupfs included).
- Record files, processes, cgroups, and the numbered record stream.

Run as a program, it is the supervisor:

    fault_harness.py supervise PIDFILE -- vigild ARGS...

starts the command, writes its pid to PIDFILE, starts it again whenever it
ends, and on SIGTERM passes the signal on and exits when the command has.
"""

import errno
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, HERE)

from vigil_client import ControlClient, VigilError  # noqa: E402
from jsonl_records import read_jsonl  # noqa: E402,F401 - re-exported for the fault tests

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
PYTHON = "/usr/bin/python3"
FAULT_APP = os.path.join(HERE, "fault_app.py")
EXAMPLE_APP = os.path.join(REPO, "clients", "python", "example_app.py")
TESTBED = os.path.join(HERE, "accessory_testbed.py")
UNIFIED = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"


def seed():
    """A random seed, or $VIGIL_FAULT_SEED to replay a run; printed by the caller."""
    value = os.environ.get("VIGIL_FAULT_SEED")
    return int(value) if value else secrets.randbelow(10**9)


def freezer_available():
    return os.geteuid() == 0 and os.path.exists(os.path.join(UNIFIED, "cgroup.procs"))


def wait_for(condition, timeout, interval=0.02):
    """Polls `condition` until it is true (returns True) or `timeout` s pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)




def log_tail(path, lines=40):
    try:
        with open(path, errors="replace") as file:
            return "".join(file.readlines()[-lines:])
    except OSError:
        return f"(no {path})"


def decisions_in_log(path, action):
    """Decision lines of one action in vigild's log ("... [VigilDaemon] adopt APP: reason")."""
    try:
        with open(path, errors="replace") as file:
            return [line for line in file if f"] {action} " in line]
    except OSError:
        return []


# -- processes and cgroups

def processes_with(marker):
    """Pids of the processes whose command line contains `marker` (a record file's path)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    if marker.encode() in file.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return sorted(pids)


def process_state(pid):
    """The state letter of /proc/PID/stat (R, S, T, Z...), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def cgroup_frozen(pid, mount=UNIFIED):
    """Whether the process's cgroup v2 group is frozen (False outside one)."""
    try:
        with open(f"/proc/{pid}/cgroup") as file:
            path = next((line[3:].strip() for line in file if line.startswith("0::")), None)
        if not path or path == "/":
            return False
        with open(f"{mount}{path}/cgroup.events") as events:
            return "frozen 1" in events.read()
    except OSError:
        return False


def stranded(marker, current_info, settle=10.0):
    """App processes (command line containing `marker`) that the daemon does
    not hold: (left stopped, left frozen, orphaned) pid lists, and the app
    object they were judged against. `current_info()` returns the app object
    from `apps`: only its process, and only while it is `suspended`, may be
    stopped (signal fallback) or frozen (freezer).

    The daemon suspends and wakes the app at its own pace, so the processes
    are judged against an answer that did not change while they were read
    (one read just as the daemon stopped it, against the answer from just
    before, is not stranded); a process left stopped stays so, and is found
    in such a snapshot. After `settle` s without one, the last is used."""
    deadline = time.monotonic() + settle
    while True:
        info = current_info()
        stopped, frozen, orphaned = [], [], []
        for pid in processes_with(marker):
            state = process_state(pid)
            if state in (None, "Z"):
                continue
            held = pid == info["pid"] and info["state"] == "suspended"
            if state == "T" and not held:
                stopped.append(pid)
            elif cgroup_frozen(pid) and not held:
                frozen.append(pid)
            if pid != info["pid"]:
                orphaned.append(pid)
        after = current_info()
        if (after["pid"], after["state"]) == (info["pid"], info["state"]) or time.monotonic() > deadline:
            return stopped, frozen, orphaned, info
        time.sleep(0.05)


def remove_cgroup_tree(root):
    """Ends every process below `root` (cgroup.kill) and removes the groups."""
    if not root or not os.path.isdir(root):
        return
    for child in os.listdir(root):
        path = os.path.join(root, child)
        if os.path.isdir(path):
            remove_cgroup_tree(path)
    try:
        with open(os.path.join(root, "cgroup.kill"), "w") as kill:
            kill.write("1")
    except OSError:
        pass
    def empty():
        try:
            with open(os.path.join(root, "cgroup.events")) as events:
                return "populated 0" in events.read()
        except OSError:
            return True
    wait_for(empty, 10)
    try:
        os.rmdir(root)
    except OSError:
        pass


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class SecondCgroupMount:
    """A second mount of the cgroup2 hierarchy outside /sys, for a vigild in a
    umockdev testbed (which hides /sys). vigild takes the first cgroup2 mount
    in mountinfo as the reference and cuts that many characters off its
    cgroup-root to find the groups' paths in /proc/PID/cgroup: the second
    mount's path must be exactly as long as the first's."""

    def __init__(self):
        self.path = None

    def __enter__(self):
        length = len(UNIFIED)
        prefix = "/run/vfc-"
        path = prefix + secrets.token_hex(16)[:length - len(prefix)]
        os.makedirs(path)
        try:
            subprocess.run(["mount", "-t", "cgroup2", "none", path], check=True, capture_output=True, text=True)
        except (subprocess.CalledProcessError, OSError) as error:
            os.rmdir(path)
            raise RuntimeError(f"cannot mount cgroup2 at {path}: {getattr(error, 'stderr', error)}") from None
        self.path = path
        return self

    def __exit__(self, *exc):
        if self.path:
            subprocess.run(["umount", self.path], check=False, capture_output=True)
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            self.path = None
        return False


# -- the daemon's config

def daemon_config(root, suspension, cgroup_root=None, timings=None, bluetooth=False, extra=""):
    """A vigild config with everything in `root`. `suspension` is "cgroup" or "signal"."""
    timings = dict({"suspend-grace": 0.3, "wake-budget": 3.0, "relaunch-window": 60, "relaunch-limit": 100},
                   **(timings or {}))
    lines = [
        f"manifest-dirs = [{json.dumps(os.path.join(root, 'apps'))}]",
        f"state-dir = {json.dumps(os.path.join(root, 'state'))}",
        f"log-dir = {json.dumps(os.path.join(root, 'logs'))}",
        f'suspension = "{suspension}"',
        f"bluetooth = {'true' if bluetooth else 'false'}",
    ]
    if cgroup_root:
        lines.append(f"cgroup-root = {json.dumps(cgroup_root)}")
    lines.append(extra)
    lines.append("[timings]")
    lines += [f"{key} = {value}" for key, value in timings.items()]
    return "\n".join(lines) + "\n"


def app_manifest(app_id, command, modes=(), protocols=()):
    return (f"id = {json.dumps(app_id)}\nexec = {json.dumps(command)}\n"
            f"background-modes = {json.dumps(list(modes))}\naccessory-protocols = {json.dumps(list(protocols))}\n")


def connect_control(socket_path, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ControlClient(socket_path, timeout=10)
        except (OSError, VigilError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def app_info(control, app_id):
    return next(app for app in control.apps() if app["id"] == app_id)


# -- a plain vigild (no udev)

def _protocol_daemon():
    from test_protocol import Daemon
    return Daemon


class FaultDaemon(_protocol_daemon()):
    """test_protocol.Daemon with a fault test's config and environment."""

    def __init__(self, root, suspension, timings=None, bluetooth=False, env=None, extra=""):
        super().__init__(root)
        self.suspension = suspension
        if suspension != "cgroup":
            self.cgroup_root = None
        self.env = env or {}
        with open(self.config, "w") as config:
            config.write(daemon_config(root, suspension, self.cgroup_root, timings, bluetooth, extra))

    def start(self):
        # Daemon.start spawns with this process's environment.
        saved = {key: os.environ.get(key) for key in self.env}
        os.environ.update(self.env)
        try:
            spawn_retrying(super().start)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def kill(self, signum):
        """Sends `signum` and waits for the daemon to end."""
        self.process.send_signal(signum)
        self.process.wait(30)

    def stop_leaving_apps(self):
        """SIGTERM only (apps are left for adoption, as the daemon documents)."""
        if self.process is not None and self.process.poll() is None:
            self.kill(signal.SIGTERM)


def daemon_with_app(test, prefix, app_id, command, modes=(), timings=None, extra="", start=True):
    """A FaultDaemon in a fresh folder with one app (`command`, `modes`), in
    the freezer mode when this machine has it, everything removed when
    `test` ends. `{record}` in `command` becomes the app's record file.
    Returns (daemon, control, record); control is None with start=False."""
    root = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, root, True)
    daemon = FaultDaemon(root, "cgroup" if freezer_available() else "signal", timings=timings, extra=extra)
    record = os.path.join(root, "app.jsonl")
    with open(os.path.join(daemon.apps_dir, app_id + ".toml"), "w") as manifest:
        manifest.write(app_manifest(app_id, [part.replace("{record}", record) for part in command], modes=modes))
    test.addCleanup(daemon.remove_cgroups)
    test.addCleanup(lambda: kill_all(processes_with(record)))
    if not start:
        return daemon, None, record
    daemon.start()
    test.addCleanup(daemon.stop)
    control = connect_control(daemon.socket)
    test.addCleanup(control.close)
    return daemon, control, record


# -- vigild in a umockdev testbed, under a supervisor

class TestbedDaemon:
    """vigild in accessory_testbed.py's testbed with the fake USB accessory,
    restarted by the supervisor (this file's `supervise`) whenever it ends."""

    def __init__(self, root, config_text, env=None):
        """`env`: more environment for the daemon; VIGIL_CRASH_POINT in it
        arms only the first daemon (the supervisor drops it on restarts)."""
        self.root = root
        self.socket = os.path.join(root, "vigild.sock")
        self.config = os.path.join(root, "vigild.toml")
        self.pidfile = os.path.join(root, "vigild.pid")
        self.log_path = os.path.join(root, "vigild.log")
        with open(self.config, "w") as config:
            config.write(config_text)
        self.lock = threading.Lock()
        self.log = open(self.log_path, "w")
        self.testbed = subprocess.Popen(
            ["umockdev-wrapper", PYTHON, TESTBED, "--", PYTHON, os.path.abspath(__file__), "supervise",
             self.pidfile, "--", VIGILD, "--socket", self.socket, "--config", self.config],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
            start_new_session=True, env={**os.environ, **(env or {})})
        ready = self.testbed.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"the testbed did not start ({ready!r}):\n{log_tail(self.log_path)}")

    def device(self, request):
        """One request to the testbed (see accessory_testbed.py); the reply line."""
        with self.lock:
            self.testbed.stdin.write(request + "\n")
            self.testbed.stdin.flush()
            return self.testbed.stdout.readline().strip()

    def pid(self):
        try:
            with open(self.pidfile) as file:
                return int(file.read())
        except (OSError, ValueError):
            return None

    def wait_ready(self, not_pid=None, timeout=20):
        """Waits for a daemon other than `not_pid` to answer; returns its pid."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid and pid != not_pid:
                try:
                    with ControlClient(self.socket, timeout=5) as control:
                        if control.status()["pid"] == pid:
                            return pid
                except (OSError, VigilError, KeyError):
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"no vigild answered within {timeout} s:\n{log_tail(self.log_path)}")

    def close(self):
        try:
            self.device("quit")
            self.testbed.wait(timeout=30)
        except Exception:  # noqa: BLE001 - tear down regardless
            os.killpg(self.testbed.pid, signal.SIGKILL)
            self.testbed.wait()
        pid = self.pid()
        if pid and process_state(pid) not in (None, "Z"):
            kill_all([pid])
        self.testbed.stdin.close()
        self.testbed.stdout.close()
        self.log.close()


# -- the numbered record stream

def record_line(number, rng):
    """`NUMBER,VALUE,CRC32` + newline; the checksum covers "NUMBER,VALUE"."""
    body = f"{number},{rng.randrange(10**6):06d}"
    return f"{body},{zlib.crc32(body.encode()):08x}\n".encode()


class Emitter(threading.Thread):
    """The device's side: numbered records written into the accessory at
    `rate` records/s in batches, held back by the host as a real device is
    (the testbed's `feed` waits while the pty is full). A record counts as
    emitted once its last byte is in the pty."""

    def __init__(self, testbed, rate=250, batch=20, patience=2.0, seed_value=0):
        super().__init__(daemon=True)
        self.testbed = testbed
        self.interval = batch / rate
        self.batch = batch
        self.patience = patience
        self.rng = random.Random(seed_value)
        self.emitted = 0
        self.held_back = 0
        self.errors = []
        self.stopping = threading.Event()
        self.started_at = self.stopped_at = None

    def run(self):
        pending, ends = b"", []  # bytes not yet in the pty; where each of their records ends
        number = 0
        self.started_at = next_tick = time.monotonic()
        while not self.stopping.is_set():
            if not pending:
                for _ in range(self.batch):
                    number += 1
                    pending += record_line(number, self.rng)
                    ends.append(len(pending))
            reply = self.testbed.device(f"feed {pending.hex()} {self.patience}")
            if reply == "ok":
                sent = len(pending)
            elif reply.startswith("error held back"):
                self.held_back += 1
                sent = int(reply.split(" after ")[1].split()[0])
            else:
                self.errors.append(reply)
                break
            done = sum(1 for end in ends if end <= sent)
            self.emitted += done
            pending, ends = pending[sent:], [end - sent for end in ends[done:]]
            next_tick += self.interval
            pause = next_tick - time.monotonic()
            if pause > 0:
                self.stopping.wait(pause)  # the device's pace
            else:
                next_tick = time.monotonic()
        self.stopped_at = time.monotonic()

    def stop(self):
        self.stopping.set()
        self.join(60)


def analyse_stream(app_records):
    """What the logger stored, from its record file: the session data in the
    order it was stored, each event taken once (a copy of a sequence number
    already stored with the same bytes is a redelivery, not new data)."""
    seen = {}  # seq -> (kind, payload) of the first copy
    figures = dict(data_events=0, redelivered_copies=0, redelivered_records=0, unflagged_duplicates=0,
                   reused=0, reused_examples=[], corrupt=0, corrupt_examples=[])
    stream = bytearray()
    for record in app_records:
        if record.get("kind") != "event":
            continue
        seq, kind = record["seq"], record["eventKind"]
        payload = bytes.fromhex(record.get("payloadHex", ""))
        content = (kind, payload if kind == "session.data" else json.dumps(record.get("attributes"), sort_keys=True))
        if seq in seen:
            if seen[seq] == content:
                if record["redelivered"]:
                    figures["redelivered_copies"] += 1
                    figures["redelivered_records"] += payload.count(b"\n")
                else:
                    figures["unflagged_duplicates"] += 1
                continue
            # A number already used for other content: a new event under an old number.
            figures["reused"] += 1
            if len(figures["reused_examples"]) < 3:
                figures["reused_examples"].append((seq, seen[seq][0], kind, record["redelivered"]))
        seen[seq] = content
        if kind == "session.data":
            figures["data_events"] += 1
            stream += payload
    numbers = []
    lines = bytes(stream).split(b"\n")
    for line in lines[:-1]:  # the last piece has no newline yet
        try:
            number, value, crc = line.decode().split(",")
            if zlib.crc32(f"{number},{value}".encode()) != int(crc, 16):
                raise ValueError("checksum")
            numbers.append(int(number))
        except ValueError:
            figures["corrupt"] += 1
            if len(figures["corrupt_examples"]) < 3:
                figures["corrupt_examples"].append(line[:60])
    stored = set(numbers)
    highest, reordered = 0, 0
    for number in numbers:
        if number < highest:
            reordered += 1
        highest = max(highest, number)
    figures.update(numbers=numbers, stored=stored, duplicated=len(numbers) - len(stored), reordered=reordered)
    return figures


# -- the supervisor

def spawn_retrying(spawn, patience=120):
    """`spawn()`, again while the binary is being rebuilt (ETXTBSY, or briefly absent)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return spawn()
        except (OSError, subprocess.SubprocessError) as error:
            if getattr(error, "errno", None) not in (errno.ETXTBSY, errno.ENOENT) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def supervise(pidfile, command):
    """Runs `command`, starting it again whenever it ends, until SIGTERM.
    VIGIL_CRASH_POINT is passed to the first run only: a crash-point test
    wants the next daemon to start clean."""
    stopping = False
    child = None
    environment = dict(os.environ)

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True
        if child is not None:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while not stopping:
        child = spawn_retrying(lambda: os.posix_spawn(command[0], command, environment))
        environment.pop("VIGIL_CRASH_POINT", None)
        temporary = pidfile + ".new"
        with open(temporary, "w") as file:
            file.write(str(child))
        os.replace(temporary, pidfile)
        if stopping:  # SIGTERM came before `child` was set
            os.kill(child, signal.SIGTERM)
        os.waitpid(child, 0)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "supervise" and sys.argv[3] == "--":
        sys.exit(supervise(sys.argv[2], sys.argv[4:]))
    sys.exit("usage: fault_harness.py supervise PIDFILE -- COMMAND...")

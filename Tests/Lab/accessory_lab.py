"""Shared plumbing for the accessory lab tests in this folder (not a test: the
runner only runs files named NN-name).

    import accessory_lab as acc
    rules = acc.install_udev_rules()           # udev/70-vigil-accessories.rules + the lab's matcher
    daemon = acc.Daemon("50", apps={...})      # vigild (cgroup freezer) with manifests for
                                               # clients/python/example_app.py
    host, dev = lab.usb_plug("sensor", 0x1209, 0x0001, ...)
    ...
    daemon.stop(); rules.remove()              # also done at exit

vigild runs through lab_daemon (lib.sh), so the suite runner stops it after
the test even if the test dies; Daemon.stop() does it earlier and also empties
and removes the test's cgroups.  Apps record what they receive as JSON lines
(clients/python/example_app.py --record); every check reads those files.
Working files live in /tmp (tmpfs in the guest) and are copied to
$VIGIL_LAB_RESULTS/tests/<test>.files/ at the end for post-mortems.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import shutil
import subprocess
import sys
import time
from typing import Any, Callable

import vigillab as lab
from vigillab import LabError

REPO = lab.REPO
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from vigil_client import ControlClient, VigilError  # noqa: E402,F401  (re-exported for the tests)

BIN = os.environ.get("VIGIL_LAB_BIN_DIR") or os.path.join(REPO, ".build", "debug")
VIGILD = os.path.join(BIN, "vigild")
VIGILCTL = os.path.join(BIN, "vigilctl")
EXAMPLE_APP = os.path.join(REPO, "clients", "python", "example_app.py")
APP_PYTHON = "/usr/bin/python3"          # Debian's, as the apps' manifests on real systems
SHIPPED_RULES = os.path.join(REPO, "udev", "70-vigil-accessories.rules")
RULES_DIR = "/run/udev/rules.d"          # udev reads it like /etc/udev/rules.d; tmpfs in the guest
TEST = os.environ.get("LAB_TEST_NAME") or os.path.splitext(os.path.basename(sys.argv[0]))[0]

# The lab's accessories: pid.codes test ids.  1209:0001 is what the shipped
# rules file's commented example uses; the lab's own USB tests use 1209:70xx.
VID, PID = 0x1209, 0x0001
PROTOCOLS = ["org.vigil.sensor", "org.vigil.console"]
LINE_SETTINGS = "57600 8N1"
HARDWARE_REVISION = "B"
MATCHER = (
    f'SUBSYSTEM=="tty", SUBSYSTEMS=="usb", ATTRS{{idVendor}}=="{VID:04x}", ATTRS{{idProduct}}=="{PID:04x}", '
    f'ENV{{VIGIL_ACCESSORY}}="1", ENV{{VIGIL_PROTOCOLS}}="{" ".join(PROTOCOLS)}", '
    f'ENV{{VIGIL_SERIAL}}="{LINE_SETTINGS}", ENV{{VIGIL_HARDWARE_REVISION}}="{HARDWARE_REVISION}"\n')


def log(msg: str) -> None:
    lab.log(msg)


def pattern(n: int, start: int = 0) -> bytes:
    """serial_accessory.py's bulk pattern: byte[i] = i % 251."""
    return bytes((i % 251) for i in range(start, start + n))


# --------------------------------------------------------------- udev rules ----
class UdevRules:
    """The shipped rules file plus the lab's matcher, installed for one test."""

    def __init__(self) -> None:
        os.makedirs(RULES_DIR, exist_ok=True)
        self.paths = [os.path.join(RULES_DIR, "70-vigil-accessories.rules"),
                      os.path.join(RULES_DIR, "69-vigil-lab-accessories.rules")]
        # The rules give accessories to group "vigil"; create it (the guest's
        # /etc is a throw-away overlay) so udevd applies it instead of warning.
        if subprocess.run(["getent", "group", "vigil"], stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["groupadd", "--system", "vigil"], stderr=subprocess.DEVNULL)
        shutil.copyfile(SHIPPED_RULES, self.paths[0])
        with open(self.paths[1], "w") as f:
            f.write("# vigil lab: the test accessory (Tests/Lab/accessory_lab.py)\n" + MATCHER)
        self._reload()
        atexit.register(self.remove)

    @staticmethod
    def _reload() -> None:
        p = subprocess.run(["udevadm", "control", "--reload"], stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise LabError(f"udevadm control --reload failed: {p.stderr.strip()}")

    def remove(self) -> None:
        if any(os.path.exists(p) for p in self.paths):
            for p in self.paths:
                if os.path.exists(p):
                    os.unlink(p)
            self._reload()


def install_udev_rules() -> UdevRules:
    return UdevRules()


def check_udev_marked(host_node: str) -> dict[str, str]:
    """The node's udev properties, after checking our rules applied to it."""
    props = lab.udev_properties(host_node)
    want = {"VIGIL_ACCESSORY": "1", "VIGIL_PROTOCOLS": " ".join(PROTOCOLS),
            "VIGIL_SERIAL": LINE_SETTINGS, "ID_MM_DEVICE_IGNORE": "1"}
    bad = {k: (props.get(k), v) for k, v in want.items() if props.get(k) != v}
    if bad:
        raise LabError(f"udev did not mark {host_node} as an accessory (got, want): {bad}")
    return props


# ------------------------------------------------------------------- vigild ----
def end_port_keepers(socket: str) -> None:
    """Ends the port keeper serving `socket` (`vigild --fd-keeper`, its socket
    as stdin), if one runs."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"--fd-keeper" not in f.read().split(b"\0"):
                    continue
            serves = os.readlink(f"/proc/{entry}/fd/0")
        except OSError:
            continue
        # /proc shows a socket as socket:[INODE]; the path's inode is another one, so
        # match through /proc/net/unix, which lists bound paths by inode.
        inode = serves.removeprefix("socket:[").removesuffix("]")
        with open("/proc/net/unix") as f:
            if any(line.split()[-1] == socket and line.split()[6] == inode for line in f.readlines()[1:]
                   if len(line.split()) >= 8):
                os.kill(int(entry), signal.SIGTERM)


def json_lines(path: str, kind: str | None = None) -> list[dict]:
    """The whole JSON lines another process appends to `path` (a bridge's
    output), those whose `kind` is `kind` if given; every line must be JSON."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    rows = [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]
    return [r for r in rows if kind is None or r.get("kind") == kind]


def proc_state(pid: int) -> str | None:
    """A process's state letter (R, S, T, Z...); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class Daemon:
    """vigild with a config and manifests in /tmp, its own cgroup root, and
    example_app.py manifests.  apps: {id: {"declares": [...], "args": [...], "exec": [...] (default
    example_app.py; "--record FILE" follows it),
    "modes": [...] (default ["external-accessory"])}}."""

    def __init__(self, name: str, apps: dict[str, dict[str, Any]], config: str = "",
                 timings: str = "suspend-grace = 0.5\n") -> None:
        for binary in (VIGILD, VIGILCTL):
            if not os.access(binary, os.X_OK):
                raise LabError(f"{binary} is not built: run `swift build` on the host first")
        self.name = name
        self.dir = f"/tmp/vigil-lab-{name}"
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        self.log_path = os.path.join(lab.LOGS, "vigild.log")
        self.cgroup_root = f"/sys/fs/cgroup/vigil-lab-{name}"
        self.records: dict[str, str] = {}
        for app, spec in apps.items():
            self.records[app] = f"{self.dir}/{app}.jsonl"
            exec_ = [*spec.get("exec", [APP_PYTHON, EXAMPLE_APP]), "--record", self.records[app], *spec.get("args", [])]
            with open(f"{self.dir}/apps/{app}.toml", "w") as f:
                f.write(f'id = "{app}"\n'
                        f"exec = {json.dumps(exec_)}\n"
                        f"background-modes = {json.dumps(spec.get('modes', ['external-accessory']))}\n"
                        f"accessory-protocols = {json.dumps(spec.get('declares', []))}\n")
        with open(f"{self.dir}/vigild.toml", "w") as f:
            f.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\n'
                    f'cgroup-root = "{self.cgroup_root}"\nsuspension = "cgroup"\n{config}\n'
                    f"[timings]\n{timings}")
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
        t0 = time.monotonic()
        self.clients: list[ControlClient] = []
        lab.sh("lab_daemon", "vigild", VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml")
        atexit.register(self.stop)
        self.control = self.connect(timeout=60)
        status = self.control.status()
        log(f"vigild up in {time.monotonic() - t0:.1f}s: suspension={status.get('suspension')} "
            f"cgroupRoot={status.get('cgroupRoot')} ({status.get('suspensionDetail')})")
        if status.get("suspension") != "cgroup":
            raise LabError(f"vigild does not use the cgroup freezer in the guest: {status}")
        self.stopped = False

    # -- connections and commands
    @staticmethod
    def alive() -> bool:
        try:
            with open(os.path.join(lab.RUN, "vigild.pid")) as f:
                os.kill(int(f.read().strip()), 0)
            return True
        except (OSError, ValueError):
            return False

    def connect(self, timeout: float = 20) -> ControlClient:
        """A control connection, closed by stop() if the test does not
        (an unclosed one ends the test with asyncio's "Task was destroyed")."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                client = ControlClient(self.socket, timeout=30)
                self.clients.append(client)
                return client
            except (OSError, VigilError) as exc:
                if not self.alive():
                    raise LabError(f"vigild exited: {exc}\n{self.log_tail()}") from None
                if time.monotonic() > deadline:
                    raise LabError(f"vigild's socket {self.socket} not answering after {timeout}s: {exc}\n"
                                   f"{self.log_tail()}") from None
                time.sleep(0.1)

    def vigilctl(self, *args: str) -> Any:
        """Run vigilctl with --json; return the parsed output."""
        p = subprocess.run([VIGILCTL, *args, "--json", "--socket", self.socket],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        if p.returncode != 0:
            raise LabError(f"vigilctl {' '.join(args)} --json failed ({p.returncode}): {p.stderr.strip()}")
        return json.loads(p.stdout)

    def accessories(self) -> list[dict]:
        return self.control.accessories()["accessories"]

    def sessions(self) -> list[dict]:
        return self.control.accessories().get("sessions") or []

    def app(self, app: str) -> dict:
        return next(a for a in self.control.apps() if a["id"] == app)

    def state(self, app: str) -> str:
        return self.app(app)["state"]

    def decisions(self, app: str, action: str | None = None) -> list[dict]:
        return [d for d in self.control.log(app=app) if action is None or d["action"] == action]

    # -- what the apps recorded
    def read(self, app: str) -> list[dict]:
        try:
            with open(self.records[app]) as f:
                text = f.read()
        except FileNotFoundError:
            return []
        # Complete lines only: a long line may be caught while it is written.
        return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]

    def records_of(self, app: str, kind: str) -> list[dict]:
        return [r for r in self.read(app) if r.get("kind") == kind]

    def events(self, app: str, kind: str) -> list[dict]:
        return [r for r in self.read(app) if r.get("kind") == "event" and r.get("eventKind") == kind]

    def received(self, app: str, session: int) -> bytes:
        """The bytes of every session.data event of `session`, in delivery order."""
        return b"".join(bytes.fromhex(e["payloadHex"]) for e in self.events(app, "session.data")
                        if e["attributes"].get("session") == session)

    # -- waiting, with diagnostics on failure
    def wait(self, cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1,
             explain: Callable[[], str] | None = None) -> Any:
        """`lab.wait_for`; a timeout also shows vigild's state, and `explain()` if given."""
        try:
            return lab.wait_for(cond, timeout, what, interval=interval)
        except LabError as exc:
            raise LabError(f"{exc}\n{self.diagnostics()}" + (f"\n{explain()}" if explain else "")) from None

    def wait_state(self, app: str, state: str, timeout: float = 30) -> None:
        self.wait(lambda: self.state(app) == state, timeout, f"{app} to be {state}")

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "vigild log (last lines):\n" + "".join(f.readlines()[-n:])
        except FileNotFoundError:
            return "(no vigild log)"

    def diagnostics(self) -> str:
        parts = [self.log_tail()]
        for app in self.records:
            rows = self.read(app)[-15:]
            for r in rows:
                if len(r.get("payloadHex", "")) > 200:
                    r["payloadHex"] = r["payloadHex"][:200] + "..."
            parts.append(f"{app} records (last {len(rows)}):\n" + "\n".join(json.dumps(r) for r in rows))
        try:
            parts.append("accessories: " + json.dumps(self.control.accessories()))
            parts.append("apps: " + json.dumps([{k: a.get(k) for k in ("id", "state", "queuedEvents",
                         "unacknowledgedEvents", "lastDecision", "lastReason")} for a in self.control.apps()]))
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            parts.append(f"(control request failed: {exc})")
        return "\n".join(parts)

    # -- Bluetooth pushes (control role)
    def push(self, client: ControlClient, kind: str, timeout: float = 60) -> Any:
        """The next blePush of `kind` on `client` (others before it are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = client.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
            if message is not None and message.type == "blePush" and message["kind"] == kind:
                return message
        raise LabError(f"no {kind} from vigild within {timeout} s\n{self.diagnostics()}")

    # -- a daemon crash
    def pid(self) -> int:
        with open(os.path.join(lab.RUN, "vigild.pid")) as f:
            return int(f.read().strip())

    def sigkill(self, before_kill: Callable[[], Any] | None = None) -> Any:
        """SIGSTOPs vigild (it surely does nothing more), calls `before_kill`,
        SIGKILLs it and waits for its death; returns what `before_kill` did."""
        old = self.pid()
        os.kill(old, signal.SIGSTOP)
        lab.wait_for(lambda: proc_state(old) == "T", 10, f"vigild (pid {old}) to stop")
        seen = before_kill() if before_kill else None
        os.kill(old, signal.SIGKILL)
        lab.wait_for(lambda: proc_state(old) in (None, "Z"), 20, f"vigild (pid {old}) to die")
        os.unlink(os.path.join(lab.RUN, "vigild.pid"))  # lab_daemon refuses while a (zombie) pid answers
        try:
            self.control.close()
        except Exception:  # noqa: BLE001 - the connection is dead anyway
            pass
        return seen

    def restart(self, vigild: str = VIGILD) -> int:
        """Starts vigild again on the same config and state; reconnects
        `control`. Returns the log's length before it (its lines follow)."""
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        lab.sh("lab_daemon", "vigild", vigild, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml")
        self.control = self.connect(timeout=60)
        return offset

    def logged_since(self, offset: int, *parts: str) -> bool:
        """A line of vigild's log past `offset` has all of `parts`."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return any(all(p in line for p in parts) for line in f.read().decode(errors="replace").splitlines())

    # -- teardown
    def stop(self) -> None:
        if getattr(self, "stopped", True):
            return
        self.stopped = True
        for client in self.clients:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - the connection is dead anyway
                pass
        self.clients.clear()
        lab.sh("lab_daemon_stop", "vigild")
        # A stop with on-stop = leave leaves the ports with vigild's port
        # keeper for the next daemon (up to 120 s): there is none in this
        # guest, and the next test must find its devices free.
        end_port_keepers(f"{self.dir}/state/port-keeper.sock")
        # The daemon thaws its apps when it stops and they exit when their
        # connection closes; kill whatever is left so nothing leaks into the
        # next test, and remove the cgroups.
        if os.path.isdir(self.cgroup_root):
            for child in os.listdir(self.cgroup_root):
                path = f"{self.cgroup_root}/{child}"
                if not os.path.isdir(path):
                    continue
                try:
                    with open(f"{path}/cgroup.freeze", "w") as f:
                        f.write("0")
                    with open(f"{path}/cgroup.kill", "w") as f:
                        f.write("1")
                    lab.wait_for(lambda: "populated 0" in open(f"{path}/cgroup.events").read(), 20,
                                 f"cgroup {path} to empty")
                    os.rmdir(path)
                except OSError as exc:
                    log(f"cannot clean up {path}: {exc}")
            try:
                os.rmdir(self.cgroup_root)
            except OSError as exc:
                log(f"cannot remove {self.cgroup_root}: {exc}")
        keep = os.path.join(lab.RESULTS, "tests", f"{TEST}.files")
        try:
            shutil.copytree(self.dir, keep, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.sock"))
        except OSError as exc:
            log(f"cannot keep {self.dir} in {keep}: {exc}")


class Bridge:
    """An example app (the heart-rate bridge) under `daemon`: its manifest,
    loaded and checked, and the JSON lines it writes to `daemon.dir/bridge.jsonl`.
    `peer` (a `lab.Peer`, set when it starts) adds its last events to failures."""

    def __init__(self, daemon: Daemon, app: str, exec_: list[str], modes: list[str], extra: str = "") -> None:
        self.daemon = daemon
        self.out = f"{daemon.dir}/bridge.jsonl"
        self.peer: Any = None
        with open(f"{daemon.dir}/apps/{app}.toml", "w") as f:
            f.write(f'id = "{app}"\nexec = {json.dumps(exec_)}\nbackground-modes = {json.dumps(modes)}\n{extra}')
        reloaded = daemon.control.reload()
        if app not in reloaded.get("apps", []) or reloaded.get("problems"):
            raise LabError(f"vigild did not load {app}'s manifest: {reloaded}")
        loaded = daemon.app(app)["backgroundModes"]
        if not set(modes) <= set(loaded):
            raise LabError(f"{app}'s modes: {loaded}, want {modes}")

    def lines(self, kind: str | None = None) -> list[dict]:
        return json_lines(self.out, kind)

    def diagnostics(self) -> str:
        tail = "\n".join(json.dumps(r) for r in self.lines()[-20:])
        sent = "\n".join(json.dumps(e) for e in self.peer.events()[-15:]) if self.peer else "(no peer)"
        return f"bridge lines (last 20):\n{tail}\npeer events (last 15):\n{sent}"

    def wait(self, cond: Callable[[], Any], timeout: float, what: str) -> Any:
        return self.daemon.wait(cond, timeout, what, explain=self.diagnostics)


def wait_ble_powered_on(daemon: Daemon, timeout: float = 60) -> None:
    """Until `vigilctl ble state` says the adapter is poweredOn for vigild."""
    def state() -> str:
        p = subprocess.run([VIGILCTL, "ble", "state", "--json", "--socket", daemon.socket],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        return json.loads(p.stdout).get("state", "") if p.returncode == 0 else f"error: {p.stderr.strip()}"
    daemon.wait(lambda: state() == "poweredOn", timeout, "vigild to report the adapter poweredOn (vigilctl ble state)")


def check_identity(acc: dict, *, serial: str, manufacturer: str, name: str, node: str) -> None:
    """An accessory object as vigild reports it for a lab gadget."""
    want = {"vendorID": f"{VID:04x}", "productID": f"{PID:04x}", "serialNumber": serial,
            "manufacturer": manufacturer, "name": name, "deviceNode": node,
            "protocolStrings": PROTOCOLS, "lineSettings": LINE_SETTINGS,
            # Defaults from the USB descriptors (udev/README): model = product id,
            # firmware = bcdDevice (lab gadgets: 0x0100); hardware from the rule.
            "modelNumber": f"{PID:04x}", "firmwareRevision": "1.00", "hardwareRevision": HARDWARE_REVISION}
    bad = {k: (acc.get(k), v) for k, v in want.items() if acc.get(k) != v}
    if bad:
        raise LabError(f"accessory {serial}: fields differ (got, want): {bad}\nwhole object: {acc}")
    if not isinstance(acc.get("connectionID"), int):
        raise LabError(f"accessory {serial}: connectionID is not an integer: {acc}")
    if not str(acc.get("sysPath", "")).startswith("/sys/"):
        raise LabError(f"accessory {serial}: sysPath {acc.get('sysPath')!r} is not in sysfs")

"""A private vigild for tests, with optional virtual hardware: what the
pytest plugin (`vigil.pytest_plugin`) builds its fixtures from, usable
without pytest too.

    with VigilDaemon(tmpdir) as daemon:          # own socket, state, logs, cgroup root
        daemon.install_app("org.example.logger", [sys.executable, "logger.py"],
                           background_modes=["external-accessory"])
        daemon.launch("org.example.logger")

Virtual hardware comes from a Vigil checkout (found through $VIGIL_REPO, or
above the current folder): the accessory testbed (umockdev, a pty behind a
fake USB serial node) and the BlueZ mock (dbusmock on a private bus).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ._frames import VigilError
from .sync import ControlClient

STARTUP_TIMEOUT = 20.0
DEFAULT_TIMINGS: dict[str, float] = {"suspend-grace": 0.5, "wake-budget": 5.0}
JSON = dict[str, Any]


def find_repo(start: str | os.PathLike[str] | None = None) -> Path | None:
    """A Vigil checkout: $VIGIL_REPO, or the first folder above `start` (the
    current one) holding Tests/python/accessory_testbed.py, or the one this
    package sits in when run from clients/python."""
    candidates: list[Path] = []
    if os.environ.get("VIGIL_REPO"):
        candidates.append(Path(os.environ["VIGIL_REPO"]))
    here = Path(start or os.getcwd()).resolve()
    candidates += [here, *here.parents]
    package = Path(__file__).resolve().parent
    candidates += list(package.parents)
    for candidate in candidates:
        if (candidate / "Tests" / "python" / "accessory_testbed.py").exists():
            return candidate
    return None


def find_vigild() -> str | None:
    """$VIGILD, the checkout's debug build, or `vigild` on PATH."""
    if os.environ.get("VIGILD"):
        return os.environ["VIGILD"]
    repo = find_repo()
    if repo is not None and (repo / ".build" / "debug" / "vigild").exists():
        return str(repo / ".build" / "debug" / "vigild")
    return shutil.which("vigild")


def unified_cgroup() -> str | None:
    """Where a private cgroup root can go (root only), or None (signal fallback)."""
    unified = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    if os.geteuid() == 0 and os.path.exists(os.path.join(unified, "cgroup.procs")):
        return unified
    return None


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


class VirtualAccessory:
    """The fake USB serial accessory of the checkout's testbed
    (Tests/python/accessory_testbed.py: 1209:0001, serial VGL123, protocols
    org.example.sensor and org.example.dfu). vigild runs inside the testbed."""

    PROTOCOLS = ("org.example.sensor", "org.example.dfu")

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def _ask(self, request: str) -> str:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(request + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline().strip()
        if not (reply.startswith("ok") or reply.startswith("data")):
            raise RuntimeError(f"virtual accessory: {request!r} -> {reply!r}")
        return reply

    def write(self, data: bytes) -> None:
        """Bytes from the device to the host (vigild)."""
        self._ask("write " + bytes(data).hex())

    def read(self, count: int) -> bytes:
        """Bytes the host wrote to the device (waits up to 2 s for `count`)."""
        return bytes.fromhex(self._ask(f"read {count}").partition(" ")[2])

    def unplug(self) -> None:
        self._ask("unplug")

    def plug(self) -> str:
        """Plugs it back in; the new device node."""
        return self._ask("plug").partition(" ")[2]


class VigilDaemon:
    """A vigild with everything in `root`: socket, config, manifests, state,
    logs, and (as root, where cgroup v2 is there) a cgroup root of its own,
    removed on stop. `env` is the daemon's environment (e.g. a private D-Bus)."""

    def __init__(self, root: str | os.PathLike[str], *, vigild: str | None = None,
                 timings: Mapping[str, float] | None = None, settings: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None, accessory: bool = False) -> None:
        self.root = Path(root)
        self.vigild = vigild or find_vigild()
        if not self.vigild:
            raise FileNotFoundError("no vigild: set $VIGILD or build it (swift build)")
        self.socket = str(self.root / "vigild.sock")
        self.apps_dir = self.root / "apps"
        self.output = self.root / "vigild.out"
        self.config = self.root / "vigild.toml"
        self.env = dict(env or os.environ)
        self.timings = {**DEFAULT_TIMINGS, **(timings or {})}
        self.settings = dict(settings or {})
        self.with_accessory = accessory
        self.accessory: VirtualAccessory | None = None
        cgroup = unified_cgroup()
        self.cgroup_root = None if cgroup is None else f"{cgroup}/vigil-pytest-{os.getpid()}-{id(self):x}"
        self.process: subprocess.Popen[Any] | None = None
        self._output: IO[Any] | None = None
        for folder in (self.apps_dir, self.root / "state", self.root / "logs"):
            folder.mkdir(parents=True, exist_ok=True)

    # -- configuration

    def write_config(self) -> None:
        lines = [f"manifest-dirs = {_toml([str(self.apps_dir)])}", f"state-dir = {_toml(str(self.root / 'state'))}",
                 f"log-dir = {_toml(str(self.root / 'logs'))}"]
        if self.cgroup_root:
            lines.append(f"cgroup-root = {_toml(self.cgroup_root)}")
        lines += [f"{key} = {_toml(value)}" for key, value in self.settings.items()]
        lines.append("[timings]")
        lines += [f"{key} = {_toml(value)}" for key, value in self.timings.items()]
        self.config.write_text("\n".join(lines) + "\n")

    def install_app(self, app_id: str, command: Iterable[str], *, background_modes: Iterable[str] = (),
                    accessory_protocols: Iterable[str] = (), exits_on_suspend: bool = False,
                    extra: Mapping[str, Any] | None = None) -> Path:
        """Writes the app's manifest (and reloads a running daemon). Returns the manifest's path."""
        fields: dict[str, Any] = {"id": app_id, "exec": list(command), "background-modes": list(background_modes),
                                  "accessory-protocols": list(accessory_protocols),
                                  "exits-on-suspend": exits_on_suspend, **(extra or {})}
        path = self.apps_dir / f"{app_id}.toml"
        path.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in fields.items()))
        if self.running:
            problems = self.control(lambda c: c.reload())["problems"]
            if problems:
                raise ValueError(f"vigild refused the manifest of {app_id}: {problems}")
        return path

    # -- running

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> VigilDaemon:
        self.write_config()
        command = [self.vigild or "vigild", "--socket", self.socket, "--config", str(self.config)]
        command += shlex.split(os.environ.get("VIGILD_ARGS", ""))
        # Never the test runner's own stdout/stderr: apps may outlive the daemon holding them.
        if self._output is not None:
            self._output.close()  # a restart: the same file, appended to
        self._output = open(self.output, "ab")
        if self.with_accessory:
            repo = find_repo()
            if repo is None or not shutil.which("umockdev-wrapper"):
                raise FileNotFoundError("the virtual accessory needs umockdev and a Vigil checkout ($VIGIL_REPO)")
            testbed = str(repo / "Tests" / "python" / "accessory_testbed.py")
            self.process = subprocess.Popen(
                ["umockdev-wrapper", "/usr/bin/python3", testbed, "--", *command], env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._output, text=True, bufsize=1,
                start_new_session=True)
            assert self.process.stdout is not None
            if self.process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the accessory testbed did not start:\n{self.log_tail()}")
            self.accessory = VirtualAccessory(self.process)
        else:
            self.process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=self._output,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vigild exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with ControlClient(self.socket, timeout=2.0):
                    return self
            except (VigilError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"vigild did not answer on {self.socket} within {STARTUP_TIMEOUT} s:\n{self.log_tail()}")

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            try:
                with ControlClient(self.socket, timeout=5.0) as control:
                    for app in control.apps():
                        if app.get("pid"):
                            control.app_action("quit", app["id"])
            except (VigilError, OSError):
                pass
            try:
                if self.with_accessory and isinstance(self.accessory, VirtualAccessory):
                    self.accessory._ask("quit")  # the testbed ends vigild
                else:
                    process.send_signal(signal.SIGTERM)
                process.wait(15)
            except (subprocess.TimeoutExpired, RuntimeError, OSError):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for stream in (getattr(process, "stdin", None), getattr(process, "stdout", None), self._output):
            if stream is not None:
                stream.close()
        self._output = None
        self.remove_cgroups()

    def remove_cgroups(self) -> None:
        """Ends whatever the apps left running and removes the private cgroup root."""
        root = self.cgroup_root
        if not root or not os.path.isdir(root):
            return
        for child in os.listdir(root):
            path = os.path.join(root, child)
            if os.path.isdir(path):
                Path(path, "cgroup.kill").write_text("1")
                deadline = time.monotonic() + 10
                while "populated 1" in Path(path, "cgroup.events").read_text() and time.monotonic() < deadline:
                    time.sleep(0.05)
                os.rmdir(path)
        os.rmdir(root)

    def __enter__(self) -> VigilDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- driving it

    def control(self, action: Callable[[ControlClient], Any]) -> Any:
        """Runs `action(control_client)` on a fresh control connection."""
        with ControlClient(self.socket) as control:
            return action(control)

    def app(self, app_id: str) -> JSON:
        return dict(next(a for a in self.control(lambda c: c.apps()) if a["id"] == app_id))

    def launch(self, app_id: str) -> JSON:
        return dict(self.control(lambda c: c.app_action("launch", app_id)))

    def background(self, app_id: str) -> JSON:
        return dict(self.control(lambda c: c.app_action("background", app_id)))

    def foreground(self, app_id: str) -> JSON:
        return dict(self.control(lambda c: c.app_action("foreground", app_id)))

    def suspend(self, app_id: str, timeout: float = 20.0) -> JSON:
        """Sends the app to the background and waits until the daemon has suspended it."""
        self.background(app_id)
        return self.wait_for_state(app_id, "suspended", timeout)

    def wake(self, app_id: str, kind: str = "test", attributes: Mapping[str, Any] | None = None,
             payload: bytes = b"") -> JSON:
        return dict(self.control(lambda c: c.wake(app_id, kind, attributes, payload)))

    def wait_for_state(self, app_id: str, state: str, timeout: float = 20.0) -> JSON:
        return dict(self.wait_until(lambda: (a := self.app(app_id))["state"] == state and a, f"{app_id} {state}",
                                    timeout))

    def wait_until(self, condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Polls `condition` until it is truthy (and returns it); AssertionError with the daemon's log otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{self.report()}")
            time.sleep(0.05)

    def decision_log(self, limit: int | None = 200) -> list[JSON]:
        return list(self.control(lambda c: c.log(limit=limit)))

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.output, errors="replace") as output:
                return "".join(output.readlines()[-lines:])
        except OSError:
            return "(no daemon output)"

    def report(self) -> str:
        """The decision log (when the daemon answers) and the end of its output, for a failure report."""
        parts = []
        if self.running:
            try:
                decisions = self.decision_log(60)
                parts.append("decision log:\n" + "\n".join(
                    f"  {d.get('app')}: {d.get('action')} ({d.get('reason')}) -> {d.get('state')}" for d in decisions))
            except (VigilError, OSError) as error:
                parts.append(f"decision log unavailable: {error}")
        parts.append("vigild output:\n" + self.log_tail())
        return "\n".join(parts)


class BluetoothMock:
    """The checkout's BlueZ mock (Tests/bluez-mock): a private system-like
    D-Bus with a mock bluetoothd; `env` is for vigild. Needs Debian's
    python3-dbus and python3-dbusmock (importable here: a venv made with
    --system-site-packages)."""

    def __init__(self) -> None:
        repo = find_repo()
        if repo is None:
            raise FileNotFoundError("the BlueZ mock needs a Vigil checkout ($VIGIL_REPO)")
        sys.path.insert(0, str(repo / "Tests" / "bluez-mock"))
        from bluez_mock import MockBlueZ  # type: ignore[import-not-found, import-untyped, unused-ignore]
        self._mock = MockBlueZ()
        self.devices: dict[str, Any] = {}

    def start(self) -> BluetoothMock:
        self._mock.start()
        return self

    def stop(self) -> None:
        self._mock.stop()

    @property
    def env(self) -> dict[str, str]:
        return dict(self._mock.env)

    @property
    def control(self) -> Any:
        """The mock's control interface (org.vigil.BlueZMock; Tests/bluez-mock/README.md)."""
        return self._mock.control

    def add_heart_rate_monitor(self, address: str = "AA:BB:CC:DD:EE:01", name: str = "Vigil HRM") -> str:
        """A heart-rate monitor (0x180D with 0x2A37 notify, 0x2A38 read; 0x180F battery); its D-Bus path."""
        path = str(self.control.AddHeartRateMonitor("hci0", address, name))
        self.devices[address.upper()] = path
        return path

    def notify_heart_rate(self, address: str, bpm: int) -> int:
        """One heart-rate measurement from the monitor; how many ways it was delivered (0: nobody subscribed)."""
        import dbus  # type: ignore[import-not-found, import-untyped, unused-ignore]
        return int(self.control.NotifyHeartRate(self.devices[address.upper()], dbus.UInt16(bpm),
                                                dbus.Array([], signature="q")))

    def served_characteristic(self, uuid: str) -> str | None:
        """The D-Bus path of a characteristic some app (through vigild) published, or None."""
        from .ble import normalize_uuid
        wanted = normalize_uuid(uuid)
        for _owner, _path, tree in self.control.Applications():
            for path, interfaces in tree.items():
                properties = interfaces.get("org.bluez.GattCharacteristic1")
                if properties is not None and str(properties.get("UUID", "")).lower() == wanted:
                    return str(path)
        return None

    def remote_read(self, path: str, timeout: float = 30.0) -> tuple[str, bytes]:
        """A remote central reads a published characteristic: ("", value) or (BlueZ error name, b"").
        Blocks until vigild answers (on a connection of its own, so a test's main one stays free)."""
        import dbus
        import dbus.bus  # type: ignore[import-not-found, import-untyped, unused-ignore]
        bus = dbus.bus.BusConnection(self._mock.address)
        try:
            control = dbus.Interface(bus.get_object("org.bluez", "/org/vigil/mock"), "org.vigil.BlueZMock")
            error, value = control.RemoteRead(path, dbus.UInt16(0), timeout=timeout)
            return str(error), bytes(value)
        finally:
            bus.close()

"""A private vigild for tests, with optional virtual hardware: what the
pytest plugin (`vigil.pytest_plugin`) builds its fixtures from, usable
without pytest too.

    with VigilDaemon(tmpdir) as daemon:          # own socket, state, logs, cgroup root
        daemon.install_app("org.example.logger", [sys.executable, "logger.py"],
                           background_modes=["external-accessory"])
        daemon.launch("org.example.logger")

Virtual hardware ships in the package (vigil/_rig/, copied from the
checkout when the wheel is built; from a source checkout it is found there):
the accessory testbed (umockdev, a pty behind a fake USB serial node) and
the BlueZ mock (dbusmock on a private bus). Both need Debian packages:
`missing_for_accessories()` and `missing_for_bluetooth()` say which.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ._frames import Message, VigilError
from .accessories import Lines
from .records import AppInfo, Decision, DeviceChange, clock
from .sync import ControlClient

#: How long a starting vigild may take to answer: longer in the lab guest, whose emulated CPU
#: (TCG) on a busy host has taken over 20 s.
STARTUP_TIMEOUT = 90.0 if os.environ.get("VIGIL_LAB") == "1" else 20.0
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


#: The rig's files: in the wheel under vigil/_rig/, in a checkout where they live.
_RIG_FILES = {
    "accessory_testbed.py": "Tests/python/accessory_testbed.py",
    "virtual_usb_serial.py": "lab/host/virtual_usb_serial.py",
    "bluez_mock.py": "Tests/bluez-mock/bluez_mock.py",
    "vigil_bluez.py": "Tests/bluez-mock/vigil_bluez.py",
}


def rig_file(name: str) -> Path:
    """One of the rig's files (accessory_testbed.py, bluez_mock.py, ...): the
    copy shipped in this package, else the checkout's (a source tree)."""
    shipped = Path(__file__).resolve().parent / "_rig" / name
    if shipped.is_file():
        return shipped
    repo = find_repo()
    if repo is not None and (repo / _RIG_FILES[name]).is_file():
        return repo / _RIG_FILES[name]
    raise FileNotFoundError(f"{name} is in neither the vigil package (vigil/_rig) nor a Vigil checkout: "
                            "install vigil from its wheel")


#: The interpreter the testbed and the BlueZ mock's dbusmock run in: Debian's (GI bindings, dbusmock).
SYSTEM_PYTHON = "/usr/bin/python3"


@functools.cache
def _system_python_imports(code: str) -> bool:
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return False
    return subprocess.run([SYSTEM_PYTHON, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def missing_for_accessories() -> str | None:
    """Why the virtual accessory cannot run here (naming the Debian packages), or None."""
    if not shutil.which("umockdev-wrapper"):
        return "the virtual accessory needs umockdev-wrapper: apt install umockdev gir1.2-umockdev-1.0 python3-gi"
    if not _system_python_imports("import gi; gi.require_version('UMockdev', '1.0'); "
                                  "from gi.repository import UMockdev"):
        return (f"the virtual accessory needs umockdev's GI binding in {SYSTEM_PYTHON}: "
                "apt install python3 python3-gi gir1.2-umockdev-1.0")
    return None


def missing_for_bluetooth() -> str | None:
    """Why the BlueZ mock cannot run here (naming the Debian packages), or None."""
    if not shutil.which("dbus-daemon"):
        return "the BlueZ mock needs dbus-daemon: apt install dbus-daemon"
    mock_python = os.environ.get("VIGIL_BLUEZ_MOCK_PYTHON", SYSTEM_PYTHON)
    if mock_python == SYSTEM_PYTHON and not _system_python_imports("import dbusmock"):
        return f"the BlueZ mock needs python-dbusmock in {SYSTEM_PYTHON}: apt install python3-dbusmock"
    try:
        import dbus  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: F401
    except ImportError:
        if os.path.realpath(sys.base_prefix) != "/usr":
            return (f"the BlueZ mock needs python3-dbus, which only Debian's python3 imports; this is {sys.executable} "
                    "(from another Python): make the venv with /usr/bin/python3 -m venv --system-site-packages")
        return ("the BlueZ mock needs python3-dbus importable here: apt install python3-dbus, and make the venv "
                "with /usr/bin/python3 -m venv --system-site-packages")
    return None


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


def _clock() -> str:
    """Now as the decision log shows times (UTC, milliseconds)."""
    return clock(time.time())


@dataclasses.dataclass(frozen=True)
class SerialAccessory:
    """A virtual USB serial accessory to plug into the testbed: its USB
    identity, the protocol strings udev gives it (VIGIL_PROTOCOLS), its line
    settings. `name` is how a test picks it (`virtual_accessories[name]`).
    `modem_lines`: the port has modem lines as a USB CDC-ACM port has them
    (the host's DTR, RTS and breaks seen by the device, the device's CTS,
    DSR, DCD and RI set by the test); False: a bare pty's none (vigild
    answers line requests `notSupported`)."""
    name: str = "sensor"
    vendor_id: str = "1209"
    product_id: str = "0001"
    serial: str = "VGL123"
    manufacturer: str = "Vigil Labs"
    product: str = "Vigil Sensor"
    protocols: tuple[str, ...] = ("org.example.sensor", "org.example.dfu")
    line_settings: str = "115200 8N1 rtscts"
    modem_lines: bool = True

    def __post_init__(self) -> None:
        for field in ("vendor_id", "product_id"):
            if not re.fullmatch(r"[0-9a-fA-F]{4}", getattr(self, field)):
                raise ValueError(f"SerialAccessory {self.name}: {field} must be four hex digits")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"SerialAccessory name {self.name!r}: letters, digits, '_', '.', '-' only")
        if not self.protocols:
            raise ValueError(f"SerialAccessory {self.name}: at least one protocol string")
        if not isinstance(self.modem_lines, bool):
            raise ValueError(f"SerialAccessory {self.name}: modem_lines is true or false")
        object.__setattr__(self, "protocols", tuple(self.protocols))

    def testbed_options(self, index: int) -> str:
        """The testbed's --device NAME=JSON (each device its own USB port and ttyACM numbers)."""
        return self.name + "=" + json.dumps({
            "port": f"1-{2 + index}", "first_number": 10 * index, "serial": self.serial,
            "manufacturer": self.manufacturer, "product": self.product, "name": self.product,
            "vendor_id": self.vendor_id.lower(), "product_id": self.product_id.lower(),
            "protocols": " ".join(self.protocols), "line_settings": self.line_settings,
            "modem_lines": self.modem_lines})


@dataclasses.dataclass(frozen=True)
class GattDescriptor:
    """A descriptor of a described peripheral's characteristic."""
    uuid: str
    value: bytes = b""
    flags: tuple[str, ...] = ("read",)


@dataclasses.dataclass(frozen=True)
class GattCharacteristic:
    """A characteristic: `flags` as BlueZ names them (read, write, write-without-response,
    notify, indicate, ...); one that notifies or indicates gets its 0x2902 descriptor."""
    uuid: str
    flags: tuple[str, ...] = ("read",)
    value: bytes = b""
    descriptors: tuple[GattDescriptor, ...] = ()


@dataclasses.dataclass(frozen=True)
class GattService:
    uuid: str
    characteristics: tuple[GattCharacteristic, ...] = ()
    primary: bool = True


@dataclasses.dataclass(frozen=True)
class BlePeripheral:
    """A Bluetooth LE peripheral described by its GATT database, for the BlueZ mock
    (`bluez_mock.add_peripheral`): its address (a static random one, C0:…, as a
    peripheral of one's own has), name, services, and what it advertises (the
    primary services' UUIDs unless `advertised` says otherwise; manufacturer data by
    company id)."""
    address: str
    name: str = ""
    services: tuple[GattService, ...] = ()
    advertised: tuple[str, ...] | None = None
    manufacturer_data: Mapping[int, bytes] = dataclasses.field(default_factory=dict)
    appearance: int | None = None
    address_type: str = "random"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}", self.address):
            raise ValueError(f"BlePeripheral address {self.address!r}: six hex pairs separated by ':'")
        for service in self.services:
            for characteristic in service.characteristics:
                unknown = set(characteristic.flags) - _GATT_FLAGS
                if unknown:
                    raise ValueError(f"BlePeripheral {self.address}: characteristic {characteristic.uuid}: "
                                     f"unknown flags {sorted(unknown)} (BlueZ's: {sorted(_GATT_FLAGS)})")


_GATT_FLAGS = frozenset({"broadcast", "read", "write-without-response", "write", "notify", "indicate",
                         "authenticated-signed-writes", "extended-properties", "reliable-write",
                         "writable-auxiliaries", "encrypt-read", "encrypt-write", "encrypt-authenticated-read",
                         "encrypt-authenticated-write", "secure-read", "secure-write", "authorize"})


@dataclasses.dataclass(frozen=True)
class LineChange:
    """A change of the host's outputs as the device saw it: DTR, RTS and
    whether a break is on, after the change; `time` in seconds since the epoch."""
    time: float
    dtr: bool
    rts: bool
    in_break: bool = False

    def __str__(self) -> str:
        state = f"DTR {'up' if self.dtr else 'down'}, RTS {'up' if self.rts else 'down'}"
        return f"{clock(self.time)} {state}{', break' if self.in_break else ''}"


class ExpectTimeout(AssertionError):
    """`expect` saw no match in time; `received` is what came (and stays buffered)."""

    def __init__(self, message: str, received: bytes) -> None:
        super().__init__(message)
        self.received = received


class ByteStream:
    """read(n, timeout=) and expect(pattern, timeout=) over a source of bytes,
    with a buffer: what a read or an expect did not take stays for the next."""

    def __init__(self) -> None:
        self._buffer = b""
        self.ended = False

    def _more(self, timeout: float) -> bytes:
        """Bytes that came within `timeout` (b"" if none); sets `ended` at the end of the stream."""
        raise NotImplementedError

    def _fill(self, deadline: float) -> bool:
        """Adds what comes before `deadline` to the buffer; False when nothing more can come in time."""
        remaining = deadline - time.monotonic()
        if self.ended or remaining <= 0:
            return False
        data = self._more(min(remaining, 1.0))
        self._buffer += data
        return bool(data) or (not self.ended and time.monotonic() < deadline)

    def read(self, n: int | None = None, timeout: float = 10.0) -> bytes:
        """`n` bytes, or fewer if the stream ended or `timeout` s passed first;
        without `n`, what is there as soon as anything is (b"": nothing in time)."""
        deadline = time.monotonic() + timeout
        wanted = 1 if n is None else n
        while len(self._buffer) < wanted and self._fill(deadline):
            pass
        if n is None and self._buffer and not self.ended:
            self._buffer += self._more(0)  # whatever else is there already
        take = len(self._buffer) if n is None else n
        data, self._buffer = self._buffer[:take], self._buffer[take:]
        return data

    def expect(self, pattern: bytes | str | re.Pattern[bytes], timeout: float = 10.0) -> re.Match[bytes]:
        """Waits until `pattern` (a regular expression; str is UTF-8 encoded) matches what came;
        consumes up to the match's end and returns the match. ExpectTimeout if it did not match
        within `timeout` s or before the stream ended."""
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(
            pattern.encode() if isinstance(pattern, str) else pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self._buffer)
            if match is not None:
                self._buffer = self._buffer[match.end():]
                return match
            if not self._fill(deadline):
                match = regex.search(self._buffer)
                if match is not None:
                    self._buffer = self._buffer[match.end():]
                    return match
                why = "the stream ended" if self.ended else f"{timeout} s passed"
                raise ExpectTimeout(f"expected {regex.pattern!r}, {why}; received {self._buffer!r}", self._buffer)


class VirtualAccessory(ByteStream):
    """A virtual USB serial accessory in the testbed vigild runs in (umockdev,
    a pty behind the node): the device's side. `write` sends to the host
    (vigild), `read`/`expect` take what the host wrote. Every byte both ways
    is logged with its time to `log_path` (a failing test's artifacts)."""

    PROTOCOLS = SerialAccessory.protocols

    def __init__(self, process: subprocess.Popen[str], description: SerialAccessory | None = None,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self._process = process
        self.description = description or SerialAccessory()
        self.log_path = None if log_path is None else Path(log_path)
        self._prefix = "" if description is None else f"@{description.name} "
        self._line_cursor = 0  # line changes expect_lines has consumed

    def _log(self, line: str) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a") as log:
                log.write(f"{_clock()} {line}\n")

    def _ask(self, request: str) -> str:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(self._prefix + request + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline().strip()
        if not (reply.startswith("ok") or reply.startswith("data")):
            raise RuntimeError(f"virtual accessory {self.description.name}: {request!r} -> {reply!r}")
        return reply

    def write(self, data: bytes) -> None:
        """Bytes from the device to the host (vigild)."""
        self._log(f"device -> host {bytes(data)!r}")
        self._ask("write " + bytes(data).hex())

    def _more(self, timeout: float) -> bytes:
        data = bytes.fromhex(self._ask(f"avail 65536 {max(timeout, 0):.3f}").partition(" ")[2])
        if data:
            self._log(f"host -> device {data!r}")
        return data

    def unplug(self) -> None:
        self._log("unplug")
        self._ask("unplug")

    def plug(self) -> str:
        """Plugs it back in; the new device node."""
        self._log("plug")
        self._line_cursor = 0  # a new port: its own line history
        return self._ask("plug").partition(" ")[2]

    # -- modem lines (a SerialAccessory with modem_lines, the default)

    def set_modem_lines(self, *, cts: bool | None = None, dsr: bool | None = None, dcd: bool | None = None,
                        ri: bool | None = None) -> None:
        """Raises (True) or drops (False) the device's lines, the host's inputs; None leaves
        a line as it is. Each change counts (TIOCGICOUNT), so a pulse (up, then down at
        once) reaches a watching session even when shorter than its sampling interval."""
        lines = {name: value for name, value in (("cts", cts), ("dsr", dsr), ("dcd", dcd), ("ri", ri))
                 if value is not None}
        self._log("device lines " + " ".join(f"{name.upper()} {'up' if up else 'down'}" for name, up in lines.items()))
        self._ask("setlines " + json.dumps(lines))

    def pulse_modem_lines(self, *names: str) -> None:
        """Each named device line ("cts", "dsr", "dcd", "ri") flips and flips back at once
        (a ring, a glitch): the line is where it was, only the driver's transition counter
        moved, so a watching session hears of it in `changed` however fast it samples."""
        self._log("device lines pulsed " + " ".join(name.upper() for name in names))
        self._ask("pulselines " + json.dumps(list(names)))

    def modem_lines(self) -> Lines:
        """Every line now, as the port has them: DTR and RTS as the host set them, and the device's."""
        return Lines.from_json(json.loads(self._ask("lines").partition(" ")[2]))

    def _line_changes(self, since: int, timeout: float) -> list[LineChange]:
        changes = json.loads(self._ask(f"linelog {since} {max(timeout, 0):.3f}").partition(" ")[2])
        return [LineChange(c["time"], c["dtr"], c["rts"], c["break"]) for c in changes]

    def line_changes(self) -> list[LineChange]:
        """The host's changes of DTR, RTS and breaks since the device was plugged in, oldest first."""
        return self._line_changes(0, 0)

    def expect_lines(self, *, dtr: bool | None = None, rts: bool | None = None, in_break: bool | None = None,
                     timeout: float = 10.0) -> LineChange:
        """Waits for the host's next change of its outputs that leaves them as given (None:
        either way) and returns it; the changes up to it are consumed, so two calls see a
        reset pulse's drop and then its rise, however long ago they happened.
        ExpectTimeout (an AssertionError) if none came within `timeout` s."""
        wanted = {"dtr": dtr, "rts": rts, "in_break": in_break}
        deadline = time.monotonic() + timeout
        seen: list[LineChange] = []
        while True:
            changes = self._line_changes(self._line_cursor, min(max(deadline - time.monotonic(), 0), 1.0))
            for change in changes:
                self._line_cursor += 1
                seen.append(change)
                if all(value is None or getattr(change, name) == value for name, value in wanted.items()):
                    self._log(f"host lines {change}")
                    return change
            if time.monotonic() >= deadline:
                described = ", ".join(f"{name}={value}" for name, value in wanted.items() if value is not None)
                raise ExpectTimeout(f"expected the host's lines to become {described or 'anything'} within {timeout} s; "
                                    f"changes seen: {[str(c) for c in seen]}", b"")


class ControlSession(ByteStream):
    """A control-role session with an accessory, driven synchronously (the
    `accessory_session` fixture): `write(bytes)`, `read(n, timeout=)`,
    `expect(pattern, timeout=)`, `id`. Not `vigil.AccessorySession`, the
    asyncio session an app or `vigil.Control` opens."""

    def __init__(self, control: ControlClient, session: int) -> None:
        super().__init__()
        self.control = control
        self.id = session
        self.close_reason: str | None = None

    def write(self, data: bytes) -> int:
        return self.control.write(self.id, data)

    # -- serial line control (docs/protocol.md, "Serial line control")

    def lines(self) -> Lines:
        """The modem lines now."""
        return Lines.from_json(self.control.request("sessionLines", session=self.id)["lines"])

    def set_lines(self, *, dtr: bool | None = None, rts: bool | None = None) -> Lines:
        """Raises (True) or drops (False) DTR and/or RTS; None leaves a line as it is."""
        members: dict[str, Any] = {name: bool(value) for name, value in (("dtr", dtr), ("rts", rts))
                                   if value is not None}
        return Lines.from_json(self.control.request("sessionLines", session=self.id, **members)["lines"])

    def reset_pulse(self, milliseconds: int = 100) -> Lines:
        """Drops DTR and RTS for `milliseconds`, then raises them (an Arduino's or ESP32's reset)."""
        self.set_lines(dtr=False, rts=False)
        time.sleep(milliseconds / 1000)
        return self.set_lines(dtr=True, rts=True)

    def send_break(self, milliseconds: int) -> None:
        """Holds the line at space for `milliseconds`; returns when the break is over."""
        self.control.request("sendBreak", session=self.id, milliseconds=int(milliseconds), timeout=None)

    def watch_lines(self, *, interval_ms: int | None = None, enabled: bool = True) -> Lines:
        """Changes of CTS, DSR, DCD and RI then come from `next_lines`."""
        members: dict[str, Any] = {"enabled": enabled}
        if interval_ms is not None:
            members["intervalMilliseconds"] = int(interval_ms)
        return Lines.from_json(self.control.request("watchSessionLines", session=self.id, **members)["lines"])

    def next_lines(self, timeout: float = 10.0) -> Lines | None:
        """The next change of the watched input lines (`changed` names them), or None after `timeout` s."""
        message = self.control.next_of(("sessionLinesChanged",), timeout)
        if message is None:
            return None
        return Lines.from_json(message.get("lines") or {}, message.get("changed"))

    def _more(self, timeout: float) -> bytes:
        message: Message | None = self.control.next_session_output(timeout)
        if message is None:
            return b""
        if message.type != "sessionData":
            self.ended = True
            self.close_reason = str(message.header.get("reason", ""))
            return b""
        return message.body


class VigilDaemon:
    """A vigild with everything in `root`: socket, config, manifests, state,
    logs, and (as root, where cgroup v2 is there) a cgroup root of its own,
    removed on stop. `env` is the daemon's environment (e.g. a private D-Bus).
    `accessory`: run vigild in the accessory testbed with the default virtual
    accessory (True) or the ones described; `bluetooth=False` turns vigild's
    Bluetooth off (no system bus: a test that did not ask for Bluetooth).
    `report_in_errors=False` leaves the decision log out of `wait_until`'s
    AssertionError (the pytest plugin puts it in the report once)."""

    def __init__(self, root: str | os.PathLike[str], *, vigild: str | None = None,
                 timings: Mapping[str, float] | None = None, settings: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None, accessory: bool | Sequence[SerialAccessory] = False,
                 bluetooth: bool = True, report_in_errors: bool = True) -> None:
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
        described = [SerialAccessory()] if accessory is True else list(accessory or [])
        if len({d.name for d in described}) != len(described):
            raise ValueError("virtual accessories need names of their own")
        self.described_accessories = described
        self.with_accessory = bool(described)
        self.bluetooth = bluetooth
        self.report_in_errors = report_in_errors
        #: Where this daemon's folder is kept if its test fails (the pytest plugin may move it).
        self.artifacts = self.root
        #: A BlueZ mock this daemon uses that is not a fixture's (a rig file's `bluez-mock = true`).
        self.bluetooth_mock: BluetoothMock | None = None
        #: The virtual accessories by name (the first is also `accessory`).
        self.accessories: dict[str, VirtualAccessory] = {}
        self.accessory: VirtualAccessory | None = None
        cgroup = unified_cgroup()
        self.cgroup_root = None if cgroup is None else f"{cgroup}/vigil-pytest-{os.getpid()}-{id(self):x}"
        self.process: subprocess.Popen[Any] | None = None
        self._output: IO[Any] | None = None
        for folder in (self.apps_dir, self.root / "state", self.root / "logs", self.root / "devices"):
            folder.mkdir(parents=True, exist_ok=True)

    # -- configuration

    def write_config(self) -> None:
        lines = [f"manifest-dirs = {_toml([str(self.apps_dir)])}", f"state-dir = {_toml(str(self.root / 'state'))}",
                 f"log-dir = {_toml(str(self.root / 'logs'))}"]
        if self.cgroup_root:
            lines.append(f"cgroup-root = {_toml(self.cgroup_root)}")
        defaults: dict[str, Any] = {"app-output": "files"}  # every app's output in logs/<id>.log
        if not self.bluetooth:
            defaults["bluetooth"] = False
        lines += [f"{key} = {_toml(value)}" for key, value in {**defaults, **self.settings}.items()]
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
            missing = missing_for_accessories()
            if missing:
                raise FileNotFoundError(missing)
            testbed = str(rig_file("accessory_testbed.py"))
            devices: list[str] = []
            for index, description in enumerate(self.described_accessories):
                devices += ["--device", description.testbed_options(index)]
            self.process = subprocess.Popen(
                ["umockdev-wrapper", SYSTEM_PYTHON, testbed, *devices, "--", *command], env=self.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._output, text=True, bufsize=1,
                start_new_session=True)
            assert self.process.stdout is not None
            if self.process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the accessory testbed did not start:\n{self.log_tail()}")
            self.accessories = {d.name: VirtualAccessory(self.process, d, self.root / "devices" / f"{d.name}.log")
                                for d in self.described_accessories}
            self.accessory = self.accessories[self.described_accessories[0].name]
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
                    for app in control.app_list():
                        if app.pid:
                            control.app_action("quit", app.id)
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
        """Deprecated: `app_info(app_id)` (typed; `.raw` has the members as sent)."""
        warnings.warn("vigil: VigilDaemon.app(id) is deprecated and will be removed: use VigilDaemon.app_info(id)",
                      DeprecationWarning, stacklevel=2)
        return dict(self.app_info(app_id).raw)

    def app_info(self, app_id: str) -> AppInfo:
        """The app as the daemon sees it (KeyError if it has none of that id)."""
        info: AppInfo = self.control(lambda c: c.app_info(app_id))
        return info

    def launch(self, app_id: str) -> AppInfo:
        return self._action("launch", app_id)

    def background(self, app_id: str) -> AppInfo:
        return self._action("background", app_id)

    def foreground(self, app_id: str) -> AppInfo:
        return self._action("foreground", app_id)

    def _action(self, action: str, app_id: str) -> AppInfo:
        info: AppInfo = self.control(lambda c: c.app_action(action, app_id))
        return info

    def suspend(self, app_id: str, timeout: float = 20.0) -> AppInfo:
        """Sends the app to the background and waits until the daemon has suspended it."""
        self.background(app_id)
        return self.wait_for_state(app_id, "suspended", timeout)

    def wake(self, app_id: str, kind: str = "test", attributes: Mapping[str, Any] | None = None,
             payload: bytes = b"") -> JSON:
        """The wake reply's members: `seq`, `disposition`."""
        return dict(self.control(lambda c: c.wake(app_id, kind, attributes, payload)))

    def wait_for_state(self, app_id: str, state: str, timeout: float = 20.0) -> AppInfo:
        info: AppInfo = self.wait_until(lambda: (a := self.app_info(app_id)).state == state and a,
                                        f"{app_id} {state}", timeout)
        return info

    def wait_until(self, condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Polls `condition` until it is truthy (and returns it); AssertionError with the daemon's log otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                report = f"\n{self.report()}" if self.report_in_errors else ""
                raise AssertionError(f"timed out after {timeout} s waiting for {what}{report}")
            time.sleep(0.05)

    def decision_log(self, limit: int | None = 200) -> list[JSON]:
        """Deprecated: `decisions(limit=)` (typed)."""
        warnings.warn("vigil: VigilDaemon.decision_log() is deprecated and will be removed: use "
                      "VigilDaemon.decisions()", DeprecationWarning, stacklevel=2)
        return [dataclasses.asdict(d) for d in self.decisions(limit=limit)]

    def decisions(self, app: str | None = None, limit: int | None = 200) -> list[Decision]:
        """The decision log, oldest first (of `app` if given)."""
        return list(self.control(lambda c: c.decisions(app=app, limit=limit)))

    def device_changes(self) -> list[DeviceChange]:
        """Devices that came and went, oldest first."""
        return list(self.control(lambda c: c.device_changes()))

    def decision_report(self, limit: int | None = 200) -> str:
        """The timestamped decision log (UTC) and device changes, one per line, as a failure report shows them."""
        decisions = self.decisions(limit=limit)
        lines = [f"  {d}" for d in decisions] or ["  (no decisions)"]
        devices = self.device_changes()
        if devices:
            lines += ["devices:"] + [f"  {d}" for d in devices]
        return "\n".join(lines)

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.output, errors="replace") as output:
                return "".join(output.readlines()[-lines:])
        except OSError:
            return "(no daemon output)"

    def report(self) -> str:
        """The decision log (when the daemon answers; times UTC) and the end of its output, for a failure report."""
        parts = []
        if self.running:
            try:
                parts.append("decision log (UTC):\n" + self.decision_report(60))
            except (VigilError, OSError) as error:
                parts.append(f"decision log unavailable: {error}")
        parts.append("vigild output:\n" + self.log_tail())
        return "\n".join(parts)

    def save_artifacts(self) -> None:
        """Writes what a failing test's artifact folder (the daemon's root) adds to its
        vigild.out, logs/<app>.log and devices/<name>.log: decision-log.txt (while the daemon answers)."""
        text = "(vigild was not running)"
        if self.running:
            try:
                text = self.decision_report(None)
            except (VigilError, OSError) as error:
                text = f"decision log unavailable: {error}"
        (self.root / "decision-log.txt").write_text("decision log (UTC):\n" + text + "\n")


class BluetoothMock:
    """The checkout's BlueZ mock (Tests/bluez-mock): a private system-like
    D-Bus with a mock bluetoothd; `env` is for vigild. Needs Debian's
    python3-dbus and python3-dbusmock (importable here: a venv made with
    --system-site-packages)."""

    def __init__(self) -> None:
        missing = missing_for_bluetooth()
        if missing:
            raise FileNotFoundError(missing)
        folder = str(rig_file("bluez_mock.py").parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        from bluez_mock import MockBlueZ  # type: ignore[import-not-found, import-untyped, unused-ignore]
        self._mock = MockBlueZ()
        self.devices: dict[str, Any] = {}
        self._characteristics: dict[str, dict[str, str]] = {}

    def start(self) -> BluetoothMock:
        self._mock.start()
        return self

    def stop(self, keep_logs_in: str | os.PathLike[str] | None = None) -> None:
        """Stops the mock; with `keep_logs_in`, its bus and mock logs are copied there first."""
        if keep_logs_in is not None and self._mock.dir:
            shutil.copytree(self._mock.dir, keep_logs_in, dirs_exist_ok=True,
                            ignore=lambda folder, names: [n for n in names if n.endswith("_socket")])
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

    def advertise(self, address: str, manufacturer_data: dict[int, bytes], rssi: int = -60) -> None:
        """One advertisement of a broadcast sensor (a device added on first use): one
        PropertiesChanged of its ManufacturerData and RSSI, as bluetoothd emits for new data."""
        import dbus
        key = address.upper()
        if key not in self.devices:
            self.devices[key] = str(self.control.AddLEDevice("hci0", key, "", dbus.Dictionary({}, signature="sv")))
        data = dbus.Dictionary({dbus.UInt16(company): dbus.Array(list(value), signature="y", variant_level=1)
                                for company, value in manufacturer_data.items()}, signature="qv", variant_level=1)
        self.control.SetAdvertisement(self.devices[key], dbus.Dictionary(
            {"ManufacturerData": data, "RSSI": dbus.Int16(rssi, variant_level=1)}, signature="sv"))

    def add_peripheral(self, peripheral: BlePeripheral) -> str:
        """A peripheral built from its GATT description, advertising; its D-Bus path. Its
        characteristics are then `notify(address, uuid, value)`, `set_value(...)`, `value(...)`."""
        import dbus
        from ._gatt import normalize_uuid
        services = [normalize_uuid(s.uuid) for s in peripheral.services if s.primary]
        advertised = services if peripheral.advertised is None else [normalize_uuid(u) for u in peripheral.advertised]
        properties: dict[str, Any] = {"UUIDs": dbus.Array(advertised, signature="s"),
                                      "AddressType": dbus.String(peripheral.address_type)}
        if peripheral.manufacturer_data:
            properties["ManufacturerData"] = dbus.Dictionary(
                {dbus.UInt16(company): dbus.Array(list(data), signature="y")
                 for company, data in peripheral.manufacturer_data.items()}, signature="qv")
        if peripheral.appearance is not None:
            properties["Appearance"] = dbus.UInt16(peripheral.appearance)
        path = str(self.control.AddLEDevice("hci0", peripheral.address, peripheral.name,
                                            dbus.Dictionary(properties, signature="sv")))
        characteristics: dict[str, str] = {}
        for service in peripheral.services:
            service_path = self.control.AddGattService(path, normalize_uuid(service.uuid), service.primary)
            for characteristic in service.characteristics:
                uuid = normalize_uuid(characteristic.uuid)
                char_path = self.control.AddGattCharacteristic(
                    service_path, uuid, dbus.Array(characteristic.flags, signature="s"),
                    dbus.Array(list(characteristic.value), signature="y"))
                characteristics.setdefault(uuid, str(char_path))
                descriptors = list(characteristic.descriptors)
                cccd = normalize_uuid("2902")
                if {"notify", "indicate"} & set(characteristic.flags) and \
                        not any(normalize_uuid(d.uuid) == cccd for d in descriptors):
                    descriptors.insert(0, GattDescriptor("2902", b"\x00\x00", ("read", "write")))
                for descriptor in descriptors:
                    self.control.AddGattDescriptor(char_path, normalize_uuid(descriptor.uuid),
                                                   dbus.Array(descriptor.flags, signature="s"),
                                                   dbus.Array(list(descriptor.value), signature="y"))
        self.devices[peripheral.address.upper()] = path
        self._characteristics[peripheral.address.upper()] = characteristics
        return path

    def _characteristic(self, address: str, uuid: str) -> str:
        from ._gatt import normalize_uuid
        try:
            return self._characteristics[address.upper()][normalize_uuid(uuid)]
        except KeyError:
            raise KeyError(f"no characteristic {uuid} on a described peripheral {address}") from None

    def notify(self, address: str, uuid: str, value: bytes) -> int:
        """A notification (or indication) of a described peripheral's characteristic; how many
        ways it was delivered (0: nobody subscribed, or not connected)."""
        import dbus
        return int(self.control.Notify(self._characteristic(address, uuid), dbus.Array(list(value), signature="y")))

    def set_value(self, address: str, uuid: str, value: bytes) -> None:
        """What a read of the characteristic returns from now on (no notification)."""
        import dbus
        self.control.SetCharacteristicValue(self._characteristic(address, uuid),
                                            dbus.Array(list(value), signature="y"))

    def value(self, address: str, uuid: str) -> bytes:
        """The characteristic's value now: what a central last wrote, or what it was given."""
        import dbus
        import dbus.bus  # type: ignore[import-not-found, import-untyped, unused-ignore]
        bus = dbus.bus.BusConnection(self._mock.address)
        try:
            properties = dbus.Interface(bus.get_object("org.bluez", self._characteristic(address, uuid)),
                                        "org.freedesktop.DBus.Properties")
            return bytes(properties.Get("org.bluez.GattCharacteristic1", "Value"))
        finally:
            bus.close()

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

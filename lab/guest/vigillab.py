"""vigillab: Python helpers for tests that run inside the Vigil lab guest.

    import vigillab as lab
    lab.bt_up()                                   # dbus + btvirt + bluetoothd (hci0)
    hrm = lab.Peer.start("hrm", "heart_rate_monitor.py", "--format", "uint16")
    bz = lab.Bluez()                              # python3-dbus client of bluetoothd
    dev = bz.discover(name="Vigil HRM")
    ...
    lab.udev_up(); lab.usb_init(4)
    host, dev = lab.usb_plug("acc1", 0x1d6b, 0x0104, "Vigil Lab", "Sensor", "SN1")

The bring-up functions call lab/guest/lib.sh (one implementation for bash and
Python).  Every wait has a timeout and raises LabError saying what was
awaited.  PYTHONPATH already contains this folder inside the guest.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import termios
import time
import tty
from typing import Any, Callable, Iterable

REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
LIB_SH = os.path.join(REPO, "lab", "guest", "lib.sh")
PEERS = os.path.join(REPO, "lab", "peers")
RUN = os.environ.get("LAB_RUN", "/run/vigil-lab")
LOGS = os.environ.get("VIGIL_LAB_GUEST_LOGS", "/tmp/vigil-lab-logs")
RESULTS = os.environ.get("VIGIL_LAB_RESULTS", "/tmp")


class LabError(AssertionError):
    """A lab condition was not met (raised as an assertion: tests fail)."""


def log(msg: str) -> None:
    print(f"[lab {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll cond() until it returns something truthy; raise LabError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------ lib.sh ----
def sh(func: str, *args: Any, timeout: float = 120) -> str:
    """Run a lib.sh function; return its stdout (stripped)."""
    cmd = ["bash", "-c", f'. "{LIB_SH}" && {func} "$@"', func, *[str(a) for a in args]]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if p.stderr:
        print(p.stderr, end="", flush=True)
    if p.returncode != 0:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        raise LabError(f"{func} {' '.join(map(str, args))} failed: {last}")
    return p.stdout.strip()


def bt_up(mode: str = "le", fresh: bool = False) -> None:
    """The lab's Bluetooth; `mode="dual"`: BR/EDR/LE controllers (Classic, RFCOMM).
    `fresh`: btvirt and bluetoothd started anew, whatever ran before (lib.sh lab_bt_fresh)."""
    if fresh:
        sh("lab_bt_fresh")
    os.environ["LAB_BT_MODE"] = mode
    try:
        sh("lab_bt_up")
    finally:
        del os.environ["LAB_BT_MODE"]


def udev_up() -> None:
    sh("lab_udev_up")


def usb_init(n: int = 4) -> None:
    sh("lab_usb_init", n)


def usb_plug(name: str, vid: int, pid: int, manufacturer: str, product: str, serial: str,
             udc: str | None = None) -> tuple[str, str]:
    """Plug a CDC-ACM gadget; return (host tty found via udev, gadget tty)."""
    out = sh("lab_usb_plug", name, f"{vid:04x}", f"{pid:04x}", manufacturer, product, serial,
             *([udc] if udc else []))
    host, dev = out.split()
    return host, dev


def usb_unplug(name: str) -> None:
    sh("lab_usb_unplug", name)


def usb_replug(name: str) -> tuple[str, str]:
    host, dev = sh("lab_usb_replug", name).split()
    return host, dev


def usb_remove(name: str) -> None:
    sh("lab_usb_remove", name)


def usb_host_node(serial: str, timeout: float = 30) -> str:
    return sh("lab_usb_host_node", serial, int(timeout))


def udev_properties(path: str) -> dict[str, str]:
    out = subprocess.run(["udevadm", "info", "--query=property", f"--name={path}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise LabError(f"udevadm info {path} failed: {out.stderr.strip()}")
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


# ------------------------------------------------------------- serial ----
def open_raw(path: str, nonblock: bool = False) -> int:
    """Open a tty in raw mode (no echo, no line discipline); return the fd.

    Open it before the other side can send: until the mode is set the tty is
    cooked and echoes whatever arrives back to the sender (an echo it cannot
    write at once is held until the next write on this fd).
    """
    flags = os.O_RDWR | os.O_NOCTTY | (os.O_NONBLOCK if nonblock else 0)
    fd = os.open(path, flags)
    tty.setraw(fd, termios.TCSANOW)
    attrs = termios.tcgetattr(fd)
    # What tty.setraw leaves on and cfmakeraw clears, plus software flow
    # control both ways: any byte value must pass untouched.
    attrs[0] &= ~(termios.IGNBRK | termios.PARMRK | termios.INLCR | termios.IGNCR | termios.IXOFF | termios.IXANY)
    attrs[6][termios.VMIN] = 1
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    return fd


def read_exact(fd: int, n: int, timeout: float, what: str = "data") -> bytes:
    """Read exactly n bytes within timeout (EOF or EIO raise LabError)."""
    buf = bytearray()
    deadline = time.monotonic() + timeout
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LabError(f"timed out after {timeout:g}s reading {what}: got {len(buf)} of {n} bytes")
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        try:
            chunk = os.read(fd, n - len(buf))
        except OSError as exc:
            raise LabError(f"read error while reading {what}: {exc}") from exc
        if not chunk:
            raise LabError(f"EOF while reading {what}: got {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_until(fd: int, terminator: bytes, timeout: float, what: str = "a line") -> bytes:
    buf = bytearray()
    deadline = time.monotonic() + timeout
    while terminator not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LabError(f"timed out after {timeout:g}s waiting for {what} (got {bytes(buf)[:80]!r})")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise LabError(f"EOF while waiting for {what}")
            buf += chunk
    return bytes(buf)


def write_all(fd: int, data: bytes, timeout: float = 30) -> None:
    view = memoryview(data)
    deadline = time.monotonic() + timeout
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LabError(f"timed out writing: {len(view)} bytes left")
        _, w, _ = select.select([], [fd], [], left)
        if w:
            n = os.write(fd, view[:4096])
            view = view[n:]


# --------------------------------------------------------- udev monitor ----
class UdevMonitor:
    """`udevadm monitor --udev --property` in the background; collects events.

    Each event is a dict of its properties (ACTION, DEVPATH, DEVNAME, ID_*...).
    Start it before the action whose events you want to see.
    """

    def __init__(self, subsystem: str | None = "tty") -> None:
        cmd = ["stdbuf", "-oL", "udevadm", "monitor", "--udev", "--property"]
        if subsystem:
            cmd.append(f"--subsystem-match={subsystem}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.events: list[dict[str, str]] = []
        self._buf = b""
        self._cur: dict[str, str] | None = None
        self._listening = False
        # udevadm prints a header once it is listening.
        wait_for(lambda: self._pump(0.1) or self._listening, 15, "udevadm monitor to start",
                 interval=0)

    def _pump(self, timeout: float) -> None:
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        self._buf += data
        while b"\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n", 1)
            line = raw.decode(errors="replace")
            if line.startswith("monitor will print") or line.startswith("UDEV - "):
                self._listening = True
            elif line.startswith("UDEV"):
                self._listening = True
                self._cur = {}
            elif line == "":
                if self._cur:
                    self.events.append(self._cur)
                self._cur = None
            elif self._cur is not None and "=" in line:
                k, v = line.split("=", 1)
                self._cur[k] = v

    def wait(self, action: str, timeout: float = 30, **props: str) -> dict[str, str]:
        """Wait for an event with ACTION=action and the given properties."""
        def match() -> dict[str, str] | None:
            self._pump(0.05)
            for ev in self.events:
                if ev.get("ACTION") == action and all(ev.get(k) == v for k, v in props.items()):
                    return ev
            return None
        desc = " ".join(f"{k}={v}" for k, v in props.items())
        try:
            return wait_for(match, timeout, f"udev '{action}' event {desc}", interval=0)
        except LabError as exc:
            seen = [(e.get("ACTION"), e.get("DEVNAME")) for e in self.events]
            raise LabError(f"{exc}; events seen: {seen}") from None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


# --------------------------------------------------------------- peers ----
def read_events(path: str) -> list[dict]:
    """The JSON lines a peer has appended to `path` so far (none if it does
    not exist yet).  Complete lines only: the peer may be writing the next
    one while we read, and it shows up at the next read."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


class Peer:
    """A scripted peer from lab/peers running in the background."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events_path = os.path.join(LOGS, f"{name}.events.jsonl")
        self.control_path = os.path.join(RUN, f"{name}.control")
        self.log_path = os.path.join(LOGS, f"{name}.log")

    @classmethod
    def start(cls, name: str, script: str, *args: str, timeout: float = 60) -> "Peer":
        self = cls(name)
        if os.path.exists(self.events_path):
            os.unlink(self.events_path)
        env = dict(os.environ, LAB_PEER_TIMEOUT=str(int(timeout)))
        p = subprocess.run(["bash", "-c", f'. "{LIB_SH}" && lab_peer_start "$@"', "lab_peer_start",
                            name, script, "--events", self.events_path,
                            "--control", self.control_path, *args],
                           env=env, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            print(p.stderr, end="")
            raise LabError(f"peer {name} ({script}) did not start: "
                           f"{(p.stderr.strip().splitlines() or ['?'])[0]}")
        return self

    def events(self, kind: str | None = None) -> list[dict]:
        return [e for e in read_events(self.events_path) if kind is None or e.get("event") == kind]

    def wait_event(self, kind: str, timeout: float = 30, **fields: Any) -> dict:
        def find():
            for e in self.events(kind):
                if all(e.get(k) == v for k, v in fields.items()):
                    return e
            return None
        return wait_for(find, timeout, f"peer {self.name} event '{kind}' {fields or ''}")

    def next_event(self, kind: str, before: int, timeout: float = 40) -> dict:
        """The first `kind` event after the first `before` of them (this
        attempt's, not an earlier one's: count them before acting)."""
        wait_for(lambda: len(self.events(kind)) > before, timeout, f"peer {self.name}: a new '{kind}' event")
        return self.events(kind)[before]

    def command(self, cmd: str) -> None:
        fd = os.open(self.control_path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, (cmd + "\n").encode())
        finally:
            os.close(fd)

    def stop(self) -> None:
        sh("lab_daemon_stop", self.name)


# --------------------------------------------------------------- BlueZ ----
class Bluez:
    """A small synchronous python3-dbus client of bluetoothd (org.bluez).

    Signals are collected by pumping the GLib main context while waiting.
    """

    def __init__(self, adapter: str = "hci0") -> None:
        import dbus
        import dbus.mainloop.glib
        from gi.repository import GLib

        dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        self.dbus = dbus
        self.GLib = GLib
        self.bus = dbus.SystemBus()
        self.adapter_path = f"/org/bluez/{adapter}"
        self.notifications: dict[str, list[bytes]] = {}
        self.prop_changes: list[tuple[str, str, dict]] = []
        self.bus.add_signal_receiver(self._on_props, "PropertiesChanged",
                                     "org.freedesktop.DBus.Properties", "org.bluez",
                                     path_keyword="path")

    def _on_props(self, iface, changed, invalidated, path=None) -> None:
        changed = {str(k): v for k, v in changed.items()}
        self.prop_changes.append((str(path), str(iface), changed))
        if iface == "org.bluez.GattCharacteristic1" and "Value" in changed:
            self.notifications.setdefault(str(path), []).append(bytes(changed["Value"]))

    def pump(self, seconds: float = 0.0) -> None:
        ctx = self.GLib.MainContext.default()
        deadline = time.monotonic() + seconds
        while True:
            while ctx.pending():
                ctx.iteration(False)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    def wait(self, cond: Callable[[], Any], timeout: float, what: str) -> Any:
        def poll():
            self.pump()
            return cond()
        return wait_for(poll, timeout, what, interval=0.02)

    def obj(self, path: str, iface: str):
        return self.dbus.Interface(self.bus.get_object("org.bluez", path), iface)

    def objects(self) -> dict[str, dict[str, dict]]:
        om = self.dbus.Interface(self.bus.get_object("org.bluez", "/"),
                                 "org.freedesktop.DBus.ObjectManager")
        return {str(p): {str(i): dict(v) for i, v in ifs.items()}
                for p, ifs in om.GetManagedObjects().items()}

    def prop(self, path: str, iface: str, name: str):
        return self.obj(path, "org.freedesktop.DBus.Properties").Get(iface, name)

    # ---- discovery / connection
    def devices(self) -> dict[str, dict]:
        return {p: ifs["org.bluez.Device1"] for p, ifs in self.objects().items()
                if "org.bluez.Device1" in ifs and p.startswith(self.adapter_path + "/")}

    def discover(self, name: str | None = None, uuid: str | None = None,
                 address: str | None = None, timeout: float = 30) -> str:
        """Scan (LE) until a device matching name/uuid/address shows up; return its path."""
        ad = self.obj(self.adapter_path, "org.bluez.Adapter1")
        filt: dict[str, Any] = {"Transport": "le", "DuplicateData": False}
        if uuid:
            filt["UUIDs"] = self.dbus.Array([uuid], signature="s")
        ad.SetDiscoveryFilter(filt)
        ad.StartDiscovery()

        def match():
            for p, d in self.devices().items():
                if name and str(d.get("Name", d.get("Alias", ""))) != name:
                    continue
                if uuid and uuid.lower() not in [str(u).lower() for u in d.get("UUIDs", [])]:
                    continue
                if address and str(d.get("Address", "")).upper() != address.upper():
                    continue
                return p
            return None
        what = "a device with " + ", ".join(
            f"{k}={v}" for k, v in (("name", name), ("uuid", uuid), ("address", address)) if v)
        try:
            return self.wait(match, timeout, what + " in BlueZ discovery")
        finally:
            try:
                ad.StopDiscovery()
            except self.dbus.DBusException:
                pass

    def connect(self, dev_path: str, timeout: float = 60) -> None:
        """Device1.Connect, then wait for ServicesResolved."""
        dev = self.obj(dev_path, "org.bluez.Device1")
        deadline = time.monotonic() + timeout
        while True:
            try:
                dev.Connect(timeout=max(1, deadline - time.monotonic()))
                break
            except self.dbus.DBusException as exc:
                name = exc.get_dbus_name()
                if name.endswith("AlreadyConnected"):
                    break
                if name.endswith(("InProgress", "Failed")) and time.monotonic() < deadline - 2:
                    log(f"Connect: {name}: {exc.get_dbus_message()}; retrying")
                    self.pump(1.0)
                    continue
                raise LabError(f"Connect {dev_path} failed: {name}: {exc.get_dbus_message()}")
        self.wait(lambda: bool(self.prop(dev_path, "org.bluez.Device1", "ServicesResolved")),
                  max(1, deadline - time.monotonic()), f"ServicesResolved on {dev_path}")

    def disconnect(self, dev_path: str) -> None:
        try:
            self.obj(dev_path, "org.bluez.Device1").Disconnect()
        except self.dbus.DBusException:
            pass

    def remove_device(self, dev_path: str) -> None:
        try:
            self.obj(self.adapter_path, "org.bluez.Adapter1").RemoveDevice(dev_path)
        except self.dbus.DBusException:
            pass

    def forget_all(self) -> None:
        for p in list(self.devices()):
            self.remove_device(p)

    # ---- GATT
    def characteristic(self, dev_path: str, uuid: str) -> str:
        uuid = full_uuid(uuid)
        for p, ifs in self.objects().items():
            c = ifs.get("org.bluez.GattCharacteristic1")
            if c and p.startswith(dev_path + "/") and str(c["UUID"]).lower() == uuid:
                return p
        raise LabError(f"characteristic {uuid} not found under {dev_path}")

    def read(self, char_path: str) -> bytes:
        return bytes(self.obj(char_path, "org.bluez.GattCharacteristic1").ReadValue({}))

    def write(self, char_path: str, value: bytes, kind: str = "request") -> None:
        self.obj(char_path, "org.bluez.GattCharacteristic1").WriteValue(
            self.dbus.Array(value, signature="y"), {"type": kind})

    def start_notify(self, char_path: str) -> None:
        self.notifications.setdefault(char_path, [])
        self.obj(char_path, "org.bluez.GattCharacteristic1").StartNotify()

    def stop_notify(self, char_path: str) -> None:
        try:
            self.obj(char_path, "org.bluez.GattCharacteristic1").StopNotify()
        except self.dbus.DBusException:
            pass

    def wait_notifications(self, char_path: str, n: int, timeout: float, what: str) -> list[bytes]:
        try:
            self.wait(lambda: len(self.notifications.get(char_path, [])) >= n, timeout, what)
        except LabError as exc:
            got = len(self.notifications.get(char_path, []))
            raise LabError(f"{exc} (received {got} of {n})") from None
        return self.notifications[char_path][:n]


def full_uuid(u: str | int) -> str:
    if isinstance(u, int):
        return f"{u:08x}-0000-1000-8000-00805f9b34fb"
    u = u.lower()
    if len(u) == 4:
        return f"0000{u}-0000-1000-8000-00805f9b34fb"
    if len(u) == 8:
        return f"{u}-0000-1000-8000-00805f9b34fb"
    return u


def decode_heart_rate(data: bytes) -> dict:
    """Decode a Heart Rate Measurement (0x2A37) per the HRS spec."""
    if len(data) < 2:
        raise LabError(f"heart rate measurement too short: {data.hex()}")
    flags = data[0]
    off = 1
    if flags & 0x01:
        hr = int.from_bytes(data[off:off + 2], "little"); off += 2
        fmt = "uint16"
    else:
        hr = data[off]; off += 1
        fmt = "uint8"
    contact = "none"
    if flags & 0x04:
        contact = "yes" if flags & 0x02 else "no"
    energy = None
    if flags & 0x08:
        energy = int.from_bytes(data[off:off + 2], "little"); off += 2
    rr: list[int] = []
    if flags & 0x10:
        if (len(data) - off) % 2:
            raise LabError(f"odd RR interval bytes in {data.hex()}")
        rr = [int.from_bytes(data[i:i + 2], "little") for i in range(off, len(data), 2)]
    elif off != len(data):
        raise LabError(f"{len(data) - off} trailing bytes in {data.hex()}")
    return {"hr": hr, "format": fmt, "contact": contact, "energy": energy, "rr": rr}

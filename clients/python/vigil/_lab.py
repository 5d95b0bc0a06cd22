"""Real hardware for the pytest plugin's fixtures inside the Vigil lab guest
(docs/lab.md): a USB CDC-ACM gadget instead of the umockdev accessory, and
bluetoothd with a Bumble heart-rate monitor instead of the BlueZ mock. The
same fixture methods, so a test moves from virtual to lab hardware with
`--vigil-hardware=lab`. Imports the lab's own helpers (lab/guest/vigillab.py)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .testing import ByteStream, SerialAccessory, VirtualAccessory

RULES_DIR = "/run/udev/rules.d"


def in_guest() -> bool:
    return os.environ.get("VIGIL_LAB") == "1"


def _lab(repo: Path) -> Any:
    sys.path.insert(0, str(repo / "lab" / "guest"))
    import vigillab  # type: ignore[import-not-found]
    return vigillab


def _udev_value(text: str) -> str:
    # A udev rule's value is a double-quoted string: no quotes or backslashes inside.
    return text.replace("\\", "_").replace('"', "_")


class LabAccessory(VirtualAccessory):
    """A USB CDC-ACM gadget with a described accessory's identity (vendor and
    product id, strings, serial number) and, from a udev rule of its own, its
    protocol strings, line settings and name: vigild sees it through the
    guest's real udev (the node as `/dev/ttyACMn`). The virtual accessory's
    methods (read, expect, write, unplug, plug); not its modem lines (the
    gadget's tty is told nothing of DTR/RTS: Tests/Lab/54-* reads them on the wire)."""

    def __init__(self, repo: Path, description: SerialAccessory | None = None, count: int = 1,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        ByteStream.__init__(self)
        self.description = description = description or SerialAccessory()
        self.log_path = None if log_path is None else Path(log_path)
        self._line_cursor = 0
        self.name = f"vigil-pytest-{description.name}"
        self._lab = lab = _lab(repo)
        lab.udev_up()
        lab.usb_init(max(2, count))
        os.makedirs(RULES_DIR, exist_ok=True)
        self._rules = [os.path.join(RULES_DIR, "70-vigil-accessories.rules"),
                       os.path.join(RULES_DIR, f"69-{self.name}.rules")]
        shutil.copyfile(repo / "udev" / "70-vigil-accessories.rules", self._rules[0])
        Path(self._rules[1]).write_text(
            f'SUBSYSTEM=="tty", SUBSYSTEMS=="usb", ATTRS{{idVendor}}=="{description.vendor_id.lower()}", '
            f'ATTRS{{idProduct}}=="{description.product_id.lower()}", '
            f'ATTRS{{serial}}=="{_udev_value(description.serial)}", ENV{{VIGIL_ACCESSORY}}="1", '
            f'ENV{{VIGIL_PROTOCOLS}}="{" ".join(description.protocols)}", '
            f'ENV{{VIGIL_SERIAL}}="{_udev_value(description.line_settings)}", '
            f'ENV{{VIGIL_NAME}}="{_udev_value(description.product)}"\n')
        subprocess.run(["udevadm", "control", "--reload"], check=True)
        self._fd = -1
        self.plug()

    def plug(self) -> str:
        """Plugs the gadget in (again); the host's node."""
        self._log("plug")
        if self._fd < 0:
            d = self.description
            host, gadget = self._lab.usb_plug(self.name, int(d.vendor_id, 16), int(d.product_id, 16),
                                              d.manufacturer, d.product, d.serial)
        else:
            os.close(self._fd)
            host, gadget = self._lab.usb_replug(self.name)
        self._fd = self._lab.open_raw(gadget)
        return str(host)

    def unplug(self) -> None:
        self._log("unplug")
        self._lab.usb_unplug(self.name)

    def write(self, data: bytes) -> None:
        self._log(f"device -> host {bytes(data)!r}")
        self._lab.write_all(self._fd, bytes(data))

    def _more(self, timeout: float) -> bytes:
        if select.select([self._fd], [], [], max(timeout, 0))[0]:
            data = os.read(self._fd, 65536)
            self._log(f"host -> device {data!r}")
            return data
        return b""

    def _no_lines(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError("in the lab the accessory is a USB gadget whose tty is told nothing of the "
                                  "modem lines (f_acm); virtual modem lines are on the host (--vigil-hardware=virtual)")

    set_modem_lines = pulse_modem_lines = modem_lines = line_changes = expect_lines = _no_lines

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            self._lab.usb_remove(self.name)
        finally:
            if os.path.exists(self._rules[1]):
                os.unlink(self._rules[1])
            subprocess.run(["udevadm", "control", "--reload"])


class LabBluetooth:
    """bluetoothd on the guest's first controller and Bumble heart-rate
    monitors on the second; vigild uses the real system bus."""

    def __init__(self, repo: Path) -> None:
        self._lab = _lab(repo)
        self._lab.bt_up()
        self._peers: dict[str, Any] = {}
        self.env = dict(os.environ)

    def add_heart_rate_monitor(self, address: str = "C0:DE:00:00:00:01", name: str = "Vigil HRM") -> str:
        """A Bumble heart-rate monitor advertising as `address` (a static random one: C0:…)."""
        peer = self._lab.Peer.start(f"hrm-{len(self._peers)}", "heart_rate_monitor.py", "--address", address,
                                    "--name", name, "--interval", "0.5")
        self._peers[address.upper()] = peer
        return address

    def add_peripheral(self, peripheral: Any) -> str:
        raise NotImplementedError("a peripheral described by its GATT database is the BlueZ mock's "
                                  "(--vigil-hardware=virtual); the lab has Bumble's heart-rate monitor only")

    def notify_heart_rate(self, address: str, bpm: int) -> int:
        """The monitor notifies every 0.5 s while subscribed; from now on with `bpm`."""
        self._peers[address.upper()].command(f"set-rate {bpm}")
        return 1

    def stop(self) -> None:
        for peer in self._peers.values():
            peer.stop()

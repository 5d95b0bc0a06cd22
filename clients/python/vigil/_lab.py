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

#: What the host testbed's accessory is (Tests/python/accessory_testbed.py), made a gadget.
VENDOR, PRODUCT, SERIAL = 0x1209, 0x0001, "VGL123"
PROTOCOLS = "org.example.sensor org.example.dfu"
RULES_DIR = "/run/udev/rules.d"


def in_guest() -> bool:
    return os.environ.get("VIGIL_LAB") == "1"


def _lab(repo: Path) -> Any:
    sys.path.insert(0, str(repo / "lab" / "guest"))
    import vigillab  # type: ignore[import-not-found]
    return vigillab


class LabAccessory(VirtualAccessory):
    """A USB CDC-ACM gadget with the testbed accessory's identity; vigild sees
    it through the guest's real udev (the node as `/dev/ttyACMn`). The
    virtual accessory's methods (read, expect, write, unplug, plug)."""

    NAME = "vigil-pytest"

    def __init__(self, repo: Path) -> None:
        ByteStream.__init__(self)
        self.description = SerialAccessory()
        self.log_path = None
        self._lab = lab = _lab(repo)
        lab.udev_up()
        lab.usb_init(2)
        os.makedirs(RULES_DIR, exist_ok=True)
        self._rules = [os.path.join(RULES_DIR, "70-vigil-accessories.rules"),
                       os.path.join(RULES_DIR, "69-vigil-pytest.rules")]
        shutil.copyfile(repo / "udev" / "70-vigil-accessories.rules", self._rules[0])
        Path(self._rules[1]).write_text(
            f'SUBSYSTEM=="tty", SUBSYSTEMS=="usb", ATTRS{{idVendor}}=="{VENDOR:04x}", '
            f'ATTRS{{idProduct}}=="{PRODUCT:04x}", ENV{{VIGIL_ACCESSORY}}="1", ENV{{VIGIL_PROTOCOLS}}="{PROTOCOLS}"\n')
        subprocess.run(["udevadm", "control", "--reload"], check=True)
        self._fd = -1
        self.plug()

    def plug(self) -> str:
        """Plugs the gadget in (again); the host's node."""
        if self._fd < 0:
            host, gadget = self._lab.usb_plug(self.NAME, VENDOR, PRODUCT, "Vigil Labs", "Vigil Sensor", SERIAL)
        else:
            os.close(self._fd)
            host, gadget = self._lab.usb_replug(self.NAME)
        self._fd = self._lab.open_raw(gadget)
        return str(host)

    def unplug(self) -> None:
        self._lab.usb_unplug(self.NAME)

    def write(self, data: bytes) -> None:
        self._lab.write_all(self._fd, bytes(data))

    def _more(self, timeout: float) -> bytes:
        if select.select([self._fd], [], [], max(timeout, 0))[0]:
            return os.read(self._fd, 65536)
        return b""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            self._lab.usb_remove(self.NAME)
        finally:
            for path in self._rules:
                if os.path.exists(path):
                    os.unlink(path)
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

    def notify_heart_rate(self, address: str, bpm: int) -> int:
        """The monitor notifies every 0.5 s while subscribed; from now on with `bpm`."""
        self._peers[address.upper()].command(f"set-rate {bpm}")
        return 1

    def stop(self) -> None:
        for peer in self._peers.values():
            peer.stop()

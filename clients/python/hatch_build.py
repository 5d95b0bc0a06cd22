"""Build hook: the wheel (and the sdist) carry the rig's virtual hardware,
copied from the checkout at build time so the checkout keeps one copy of each:
the accessory testbed and its fake USB serial device (umockdev), and the BlueZ
mock with its dbusmock template. They land in vigil/_rig/, where
vigil.testing finds them without a checkout. Building from an sdist, the
copies are already in vigil/_rig/ and ship as package files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

RIG_FILES = {
    "Tests/python/accessory_testbed.py": "vigil/_rig/accessory_testbed.py",
    "lab/host/virtual_usb_serial.py": "vigil/_rig/virtual_usb_serial.py",
    "Tests/bluez-mock/bluez_mock.py": "vigil/_rig/bluez_mock.py",
    "Tests/bluez-mock/vigil_bluez.py": "vigil/_rig/vigil_bluez.py",
}


class RigFilesHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        repo = root.parent.parent
        for source, target in RIG_FILES.items():
            if (repo / source).is_file():
                build_data["force_include"][str(repo / source)] = target
            elif not (root / target).is_file():
                raise FileNotFoundError(f"vigil build: neither {repo / source} (a checkout) nor {root / target} "
                                        "(an sdist) is there")

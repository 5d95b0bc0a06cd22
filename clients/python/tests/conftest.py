"""Helpers for the package's tests (the fixtures come from the vigil pytest plugin)."""

import json
import os
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest

import vigil
from vigil.testing import BluetoothMock, VigilDaemon

APPS = Path(__file__).parent / "apps"
HRM = "AA:BB:CC:DD:EE:01"  # the BlueZ mock's heart rate monitor (an LE device, random address)


class Recorder:
    """A test app (tests/apps/recorder.py) under vigild and the JSON lines it writes."""

    def __init__(self, daemon: VigilDaemon, app_id: str, path: Path) -> None:
        self.daemon, self.app_id, self.path = daemon, app_id, path

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 20.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            return next((r for r in self.records() if predicate(r)), None)
        found = self.daemon.wait_until(find, f"{what}; records: {self.records()}", timeout)
        assert isinstance(found, dict)
        return found


@pytest.fixture
def recorder(vigild: VigilDaemon, tmp_path: Path) -> Callable[..., Recorder]:
    def install(app_id: str = "org.example.py.recorder", *arguments: str, **manifest: Any) -> Recorder:
        path = tmp_path / f"{app_id}.jsonl"
        # env(1) execs in place: the recorder is the process vigild launched.
        vigild.install_app(app_id, ["/usr/bin/env", f"VIGIL_RECORD={path}", f"PYTHONPATH={os.pathsep.join(sys.path)}",
                                    sys.executable, str(APPS / "recorder.py"), *arguments], **manifest)
        return Recorder(vigild, app_id, path)
    return install


def kernel_has_bluetooth(kind: int, proto: int) -> bool:
    """Whether this kernel offers Bluetooth sockets of `kind` and `proto`
    (without them vigild answers `unavailable`)."""
    try:
        socket.socket(socket.AF_BLUETOOTH, kind, proto).close()
        return True
    except (OSError, AttributeError):
        return False


@asynccontextmanager
async def powered_central(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> AsyncIterator[tuple[vigil.Control, Any]]:
    """A control client and its central, the BlueZ mock's heart rate monitor
    (HRM) known and the adapter powered."""
    bluez_mock.add_heart_rate_monitor(HRM)
    async with vigil.Control(vigild.socket) as control:
        central = await control.central()
        await central.wait_powered_on(20)
        yield control, central

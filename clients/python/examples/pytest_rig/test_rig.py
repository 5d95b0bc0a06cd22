"""An example test suite for a rig, on the vigil pytest plugin (docs/testing-with-vigil.md).

Each test gets a private vigild; the examples next to this folder are the
apps under test, against the virtual accessory and the BlueZ mock, or with
--vigil-hardware=lab against a USB gadget, bluetoothd and a Bumble
heart-rate monitor in the lab guest."""

import os
import sys
from pathlib import Path

import pytest

import vigil
from vigil.testing import BluetoothMock, ControlSession, SerialAccessory, VigilDaemon, VirtualAccessory

EXAMPLES = Path(__file__).resolve().parent.parent
#: Two accessories of a rig, each with its own USB identity and protocol (in the lab: two USB gadgets).
GAUGE = SerialAccessory(name="gauge", vendor_id="abcd", product_id="0042", serial="G-0001", manufacturer="Acme",
                        product="Pressure Gauge", protocols=("com.acme.gauge",))
PUMP = SerialAccessory(name="pump", vendor_id="abcd", product_id="0043", serial="P-0001", manufacturer="Acme",
                       product="Pump", protocols=("com.acme.pump", "com.acme.dfu"), line_settings="9600 8N1")
HRM = "C0:DE:00:00:00:01"  # a static random address: also a Bumble peer's in the lab


def python_app(script: str, *arguments: str) -> list[str]:
    """The command of an app written with the vigil package (this interpreter, this sys.path)."""
    return ["/usr/bin/env", f"PYTHONPATH={os.pathsep.join(sys.path)}", sys.executable, str(EXAMPLES / script),
            *arguments]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sensor_logger_stores_what_the_device_sends_while_suspended(
        vigild: VigilDaemon, virtual_accessory: VirtualAccessory, tmp_path: Path) -> None:
    log = tmp_path / "sensor.log"
    vigild.install_app("org.example.sensor-logger", python_app("sensor_logger.py", "org.example.sensor", str(log)),
                       background_modes=["external-accessory"], accessory_protocols=["org.example.sensor"])
    vigild.launch("org.example.sensor-logger")
    vigild.wait_until(lambda: vigild.control(lambda c: c.accessories()["sessions"]), "the app's session")
    vigild.suspend("org.example.sensor-logger")
    virtual_accessory.write(b"1,0.5,21.5\n2,1.0,21.6\n")
    vigild.wait_until(lambda: lines(log) == ["1,0.5,21.5", "2,1.0,21.6"], "the records in the log")
    vigild.wait_for_state("org.example.sensor-logger", "suspended")  # it finished processing


@pytest.mark.vigil(timings={"suspend-grace": 0.5, "wake-budget": 5.0})
def test_heart_rate_logger_is_woken_by_notifications(
        bluez_mock: BluetoothMock, vigild: VigilDaemon, tmp_path: Path) -> None:
    bluez_mock.add_heart_rate_monitor(HRM)
    log = tmp_path / "hrm.csv"
    vigild.install_app("org.example.hrm-logger", python_app("heart_rate_logger.py", HRM, str(log)),
                       background_modes=["bluetooth-central"])
    vigild.launch("org.example.hrm-logger")
    vigild.wait_until(lambda: bluez_mock.notify_heart_rate(HRM, 60), "the subscription at BlueZ")
    vigild.wait_until(lambda: lines(log), "a first value")
    vigild.suspend("org.example.hrm-logger")
    bluez_mock.notify_heart_rate(HRM, 75)
    # The mock sends 75; the lab's monitor 75 and up (75 + n % 7) every 0.5 s.
    vigild.wait_until(lambda: int(lines(log)[-1].split(",")[1]) >= 75, "the value logged by the woken app")
    vigild.wait_for_state("org.example.hrm-logger", "suspended")


async def test_a_control_client_sees_the_rig(vigild: VigilDaemon, accessory_session: ControlSession) -> None:
    async with vigil.Control(vigild.socket) as control:
        status = await control.accessory_status()
        assert status["sessions"][0]["session"] == accessory_session.id
    accessory_session.write(b"ping\n")
    assert vigild.accessory is not None and vigild.accessory.expect(b"ping\n", timeout=10)
    vigild.accessory.write(b"pong 1\n")
    assert accessory_session.expect(rb"pong (\d+)\n", timeout=10).group(1) == b"1"


@pytest.mark.vigil(accessories=[GAUGE, PUMP])
async def test_described_accessories_each_with_its_identity(
        vigild: VigilDaemon, virtual_accessories: dict[str, VirtualAccessory], accessory_session: ControlSession,
        tmp_path: Path) -> None:
    async with vigil.Control(vigild.socket) as control:
        seen = {a.serial_number: a for a in await control.accessories()}
    assert set(seen) == {"G-0001", "P-0001"}
    pump = seen["P-0001"]
    assert (pump.vendor_id, pump.product_id, pump.manufacturer) == ("abcd", "0043", "Acme")
    assert pump.protocol_strings == ("com.acme.pump", "com.acme.dfu") and pump.line_settings.startswith("9600 8N1")
    # The session is on the first one, the gauge: what the host sends reaches it, not the pump.
    accessory_session.write(b"READ?\r\n")
    virtual_accessories["gauge"].expect(rb"READ\?\r\n", timeout=10)
    virtual_accessories["gauge"].write(b"PRESSURE 1013 hPa\r\n")
    assert int(accessory_session.expect(rb"PRESSURE (\d+)", timeout=10).group(1)) == 1013
    # An app for the pump's protocol gets the pump's records while suspended.
    log = tmp_path / "pump.log"
    vigild.install_app("com.acme.pump-logger", python_app("sensor_logger.py", "com.acme.pump", str(log)),
                       background_modes=["external-accessory"], accessory_protocols=["com.acme.pump"])
    vigild.launch("com.acme.pump-logger")
    vigild.wait_until(lambda: len(vigild.control(lambda c: c.accessories()["sessions"])) == 2, "the app's session")
    vigild.suspend("com.acme.pump-logger")
    virtual_accessories["pump"].write(b"3,2.0,19.5\n")
    vigild.wait_until(lambda: lines(log) == ["3,2.0,19.5"], "the pump's record in the log")
    assert virtual_accessories["gauge"].read(timeout=0.2) == b""  # nothing of the app's reached the gauge

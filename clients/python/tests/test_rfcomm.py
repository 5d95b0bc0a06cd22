"""RFCOMM channels through a real vigild and the BlueZ mock: what the host can
show without Bluetooth in its kernel (the lab tier, Tests/Lab/65-vigild-rfcomm.py,
opens real channels)."""

import socket

import pytest

import vigil
from vigil.testing import BluetoothMock, VigilDaemon

from conftest import HRM, kernel_has_bluetooth, powered_central


async def test_refusals_name_the_problem(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    async with powered_central(bluez_mock, vigild) as (control, central):
        with pytest.raises(vigil.VigilError) as error:
            await control.open_rfcomm_channel(HRM, 31)
        assert error.value.code == "invalidArgument" and "1-30" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_rfcomm_channel(HRM)
        assert error.value.code == "invalidArgument" and "uuid" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_rfcomm_channel(HRM, uuid="serial")
        assert error.value.code == "invalidArgument" and "UUID" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_rfcomm_channel(HRM, 1)
        assert error.value.code == "invalidArgument" and "LE device" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_rfcomm_channel("00:AA:BB:CC:DD:EE", uuid="0x1101", reopen=True)
        assert error.value.code == "notFound" and "pair it first" in error.value.message

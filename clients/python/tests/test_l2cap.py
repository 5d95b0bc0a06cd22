"""L2CAP channels through a real vigild and the BlueZ mock: what the host can
show without Bluetooth in its kernel (the lab tier, Tests/Lab/58-vigild-l2cap.py,
opens real channels)."""

import socket

import pytest

import vigil
from vigil.testing import BluetoothMock, VigilDaemon

from conftest import HRM, kernel_has_bluetooth, powered_central


async def test_refusals_name_the_problem(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    async with powered_central(bluez_mock, vigild) as (control, central):
        with pytest.raises(vigil.VigilError) as error:
            await control.open_l2cap_channel(HRM, 0)
        assert error.value.code == "invalidArgument" and "LE PSM" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_l2cap_channel(HRM, 0x80, coalesce_ms=1001)
        assert error.value.code == "invalidArgument" and "coalesceMilliseconds" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.open_l2cap_channel(HRM, 0x80, coalesce_ms=0)
        assert error.value.code == "notConnected"
        with pytest.raises(vigil.VigilError) as error:
            await control.unpublish_l2cap_channel(0x80)
        assert error.value.code == "notFound"
        if kernel_has_bluetooth(socket.SOCK_SEQPACKET, socket.BTPROTO_L2CAP):
            return
        async with central.connect(HRM, timeout=20):
            with pytest.raises(vigil.VigilError) as error:
                await control.open_l2cap_channel(HRM, 0x80, security="medium")
            assert error.value.code == "unavailable" and "Bluetooth unavailable" in error.value.message
        with pytest.raises(vigil.VigilError) as error:
            await control.publish_l2cap_channel()
        assert error.value.code == "unavailable"
        assert control.l2cap_channel(1) is None

"""RFCOMM channels through a real vigild and the BlueZ mock: what the host can
show without Bluetooth in its kernel (the lab tier, Tests/Lab/65-vigild-rfcomm.py,
opens real channels)."""

import asyncio
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


async def test_a_published_service_gets_the_devices_that_connect(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    import dbus

    spp = bluez_mock.control.AddLEDevice("hci0", "00:AA:01:00:00:23", "Vigil SPP",
                                         dbus.Dictionary({"AddressType": dbus.String("public")}, signature="sv"))
    async with powered_central(bluez_mock, vigild) as (control, _central):
        uuid = await control.publish_rfcomm_service(channel=2, name="Test port")
        assert uuid == "00001101-0000-1000-8000-00805f9b34fb"
        # The reply comes at once; vigild registers the profile with bluetoothd next.
        for _ in range(400):
            if any(str(u) == uuid for _o, _p, u, _opts in bluez_mock.control.Profiles()):
                break
            await asyncio.sleep(0.05)
        ours, theirs = socket.socketpair()
        with ours:
            await asyncio.to_thread(bluez_mock.control.ConnectProfile, spp, uuid, dbus.types.UnixFd(theirs.fileno()))
            theirs.close()
            ours.sendall(b"hello from the device")
            channel = await control.next_rfcomm_channel(timeout=20)
            assert channel is not None and control.rfcomm_channel(channel.id) is channel
            assert (channel.peer, channel.channel) == ("00:AA:01:00:00:23", 2)
            received = b""
            async for chunk in channel:
                received += chunk
                if len(received) >= 21:
                    break
            assert received == b"hello from the device"
            await channel.write(b"ATZ\r")
            assert await asyncio.to_thread(ours.recv, 16) == b"ATZ\r"
        await control.unpublish_rfcomm_service("0x1101")
        with pytest.raises(vigil.VigilError) as error:
            await control.unpublish_rfcomm_service("0x1101")
        assert error.value.code == "notFound"

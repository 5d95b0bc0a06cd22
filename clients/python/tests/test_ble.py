"""Bluetooth LE through a real vigild, against the BlueZ mock on a private D-Bus."""

import asyncio

import vigil
from vigil.testing import BluetoothMock, VigilDaemon

HRM = "AA:BB:CC:DD:EE:01"


async def test_scan_connect_discover_read_and_notify(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    bluez_mock.add_heart_rate_monitor(HRM)
    async with vigil.Control(vigild.socket) as control:
        central = await control.central()
        await central.wait_powered_on(20)
        found = await central.find_device_by_address(HRM, timeout=20, services=["180d"])
        assert found is not None and found.name == "Vigil HRM"
        values: asyncio.Queue[bytes] = asyncio.Queue()
        async with central.connect(HRM, timeout=20) as client:
            services = await client.get_services()
            assert services.get_service("180d") is not None
            assert await client.read_gatt_char("2a38") == bytearray(b"\x01")  # chest
            await client.start_notify("2a37", lambda char, data: values.put_nowait(bytes(data)))

            async def notified(bpm: int) -> bytes:
                while bluez_mock.notify_heart_rate(HRM, bpm) == 0:  # until the subscription is on at BlueZ
                    await asyncio.sleep(0.05)
                return await asyncio.wait_for(values.get(), 20)

            assert (await notified(72))[1] == 72
            iterator = client.notifications("2a37")
            bluez_mock.notify_heart_rate(HRM, 80)
            value = await asyncio.wait_for(anext(iterator), 20)
            assert value.characteristic == vigil.normalize_uuid("2a37")
        assert not client.is_connected


def test_an_app_peripheral_answers_reads_and_is_woken_for_them(bluez_mock: BluetoothMock, vigild: VigilDaemon,
                                                               recorder) -> None:
    app = recorder("org.example.py.server", "--serve", background_modes=["bluetooth-peripheral"])
    vigild.launch(app.app_id)
    app.wait_for(lambda r: r["kind"] == "serving", "the service published")
    path = vigild.wait_until(lambda: bluez_mock.served_characteristic("2a39"), "the characteristic at BlueZ")
    fixed = vigild.wait_until(lambda: bluez_mock.served_characteristic("2a38"), "the fixed one")
    assert bluez_mock.remote_read(path) == ("", b"value-1")  # answered in the foreground
    vigild.suspend(app.app_id)
    assert bluez_mock.remote_read(fixed) == ("", b"\x02")  # the daemon answers: no wake
    assert vigild.app_info(app.app_id).state == "suspended"
    assert bluez_mock.remote_read(path) == ("", b"value-2")  # wakes the app, which answers
    vigild.wait_for_state(app.app_id, "suspended")  # it acknowledged and finished processing

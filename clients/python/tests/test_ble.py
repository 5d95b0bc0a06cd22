"""Bluetooth LE through a real vigild, against the BlueZ mock on a private D-Bus."""

import asyncio

import vigil
from vigil.testing import BlePeripheral, BluetoothMock, GattCharacteristic, GattDescriptor, GattService, VigilDaemon

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


async def test_a_monitor_gives_found_every_advertisement_in_bleaks_shape_and_lost(
        bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    sensor, other = "C0:DE:00:00:00:62", "C0:DE:00:00:00:63"
    async with vigil.Control(vigild.socket) as control:
        central = await control.central()
        await central.wait_powered_on(20)
        pattern = vigil.pattern("manufacturer", company=0x0499, prefix=b"\x05")
        async with central.monitor("ruuvi", [pattern], lost_timeout=1) as monitor:
            items = monitor.items()
            bluez_mock.advertise(other, {0x004C: b"\x05\x01"})  # another company: no match
            for n in range(1, 4):
                bluez_mock.advertise(sensor, {0x0499: bytes([5, n])})
            seen = [await asyncio.wait_for(anext(items), 20) for _ in range(4)]
            assert seen[0] == vigil.Found(sensor, -60, None)
            readings = [item for item in seen[1:] if isinstance(item, vigil.AdvertisementData)]
            assert [r.manufacturer_data[0x0499] for r in readings] == [b"\x05\x01", b"\x05\x02", b"\x05\x03"]
            assert all(r.address == sensor and r.rssi == -60 for r in readings)
            assert await asyncio.wait_for(anext(items), 20) == vigil.Lost(sensor)
            listed = await central.monitors()
            assert [(m["monitor"], m["delivered"], m["lost"]) for m in listed] == [("ruuvi", 3, 0)]


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


THERMOMETER = BlePeripheral(
    address="C0:DE:00:00:00:42", name="Acme Thermometer", manufacturer_data={0xFFFF: b"\x01\x02"},
    services=(GattService("181a", (GattCharacteristic("2a6e", ("read", "notify"), b"\x34\x08"),)),  # 21.00 °C
              GattService("a0b10001-0000-4000-8000-00805f9b34fb", (
                  GattCharacteristic("a0b10002-0000-4000-8000-00805f9b34fb", ("read", "write"), b"idle",
                                     (GattDescriptor("2901", b"mode"),)),))))


async def test_a_peripheral_described_by_its_gatt_database(bluez_mock: BluetoothMock, vigild: VigilDaemon) -> None:
    bluez_mock.add_peripheral(THERMOMETER)
    mode = "a0b10002-0000-4000-8000-00805f9b34fb"
    async with vigil.Control(vigild.socket) as control:
        central = await control.central()
        await central.wait_powered_on(20)
        found = await central.find_device_by_address(THERMOMETER.address, timeout=20, services=["181a"])
        assert found is not None and found.name == "Acme Thermometer"
        async with central.connect(THERMOMETER.address, timeout=20) as client:
            services = await client.get_services()
            assert services.get_service("181a") is not None
            assert services.get_service("a0b10001-0000-4000-8000-00805f9b34fb") is not None
            assert await client.read_gatt_char("2a6e") == bytearray(b"\x34\x08")
            await client.write_gatt_char(mode, b"fast", response=True)
            assert bluez_mock.value(THERMOMETER.address, mode) == b"fast"
            assert await client.read_gatt_char(mode) == bytearray(b"fast")
            bluez_mock.set_value(THERMOMETER.address, "2a6e", b"\x98\x08")
            assert await client.read_gatt_char("2a6e") == bytearray(b"\x98\x08")
            values: asyncio.Queue[bytes] = asyncio.Queue()
            await client.start_notify("2a6e", lambda char, data: values.put_nowait(bytes(data)))
            while bluez_mock.notify(THERMOMETER.address, "2a6e", b"\xfc\x08") == 0:  # until subscribed at BlueZ
                await asyncio.sleep(0.05)
            assert await asyncio.wait_for(values.get(), 20) == b"\xfc\x08"
    try:
        BlePeripheral(address="C0:DE:00:00:00:43", services=(GattService("180f", (
            GattCharacteristic("2a19", ("read", "notifyy")),)),))
    except ValueError as error:
        assert "notifyy" in str(error)
    else:
        raise AssertionError("an unknown flag was taken")

"""Bluetooth LE through vigild: central (scan, connect, GATT, notifications)
and peripheral (publish services, advertise, answer requests). The same
objects work for an app (events come queued, and are acknowledged) and for a
control client (events come as `blePush` frames), as docs/protocol.md describes.

Names follow Bleak where the concepts match:

    central = await app.central()
    async with central.connect("AA:BB:CC:DD:EE:01") as client:
        await client.start_notify("2a37", lambda char, data: print(data.hex()))
        body = await client.read_gatt_char("2a38")
"""

from ._gatt import (
    BASE_UUID_TAIL, Characteristic, CharacteristicSpecifier, Descriptor, Device, Service, Services, normalize_uuid,
)
from .central import BLEClient, Central, NotifyCallback, Scanner
from .peripheral import (
    PeripheralManager, PeripheralRequest, UpdateResult, characteristic_definition, service_definition,
)

__all__ = [
    "BASE_UUID_TAIL", "Characteristic", "CharacteristicSpecifier", "Descriptor", "Device", "Service", "Services",
    "normalize_uuid", "BLEClient", "Central", "NotifyCallback", "Scanner", "PeripheralManager", "PeripheralRequest",
    "UpdateResult", "characteristic_definition", "service_definition",
]

#!/usr/bin/env python3
"""A Bumble Environmental Sensing peripheral with two Temperature
characteristics of one UUID (0x2A6E, indoor then outdoor), for
63-vigild-ble-adapters (not a test: the runner only runs files named NN-name).

Service 0x181A holds, in handle order:
  indoor   0x2A6E read, notify          value --indoor  (sint16 LE, 0.01 C)
  outdoor  0x2A6E read, write, notify   value --outdoor, with a writable User
           Description (0x2901, "outdoor")
Events: "connected", "disconnected", "written" (which characteristic or
descriptor, hex), "notified" (which, hex), "subscription" (which,
notify: a CCCD write). Commands (FIFO):
  notify indoor|outdoor HEX    notify the subscriber of that characteristic
  quit
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "peers"))
import _peerlib  # noqa: E402

from bumble import data_types, hci  # noqa: E402
from bumble.core import UUID, AdvertisingData  # noqa: E402
from bumble.device import Device  # noqa: E402
from bumble.gatt import Characteristic, CharacteristicValue, Descriptor, Service  # noqa: E402

ESS, TEMPERATURE, USER_DESCRIPTION = "181A", "2A6E", "2901"


class ESSPeer:
    def __init__(self, args, events: _peerlib.Events) -> None:
        self.a = args
        self.ev = events
        self.device: Device | None = None
        self.values = {"indoor": bytes.fromhex(args.indoor), "outdoor": bytes.fromhex(args.outdoor)}
        read, write, notify = (Characteristic.Properties.READ, Characteristic.Properties.WRITE,
                               Characteristic.Properties.NOTIFY)
        readable = Characteristic.Permissions.READABLE
        writable = Characteristic.Permissions.WRITEABLE
        self.label = Descriptor(UUID(USER_DESCRIPTION), readable | writable,
                                CharacteristicValue(read=lambda _c: self.label_value, write=self.on_label))
        self.label_value = b"outdoor"
        self.characteristics = {
            "indoor": Characteristic(UUID(TEMPERATURE), read | notify, readable,
                                     CharacteristicValue(read=lambda _c: self.values["indoor"])),
            "outdoor": Characteristic(UUID(TEMPERATURE), read | write | notify, readable | writable,
                                      CharacteristicValue(read=lambda _c: self.values["outdoor"],
                                                          write=lambda _c, v: self.on_write("outdoor", v)),
                                      descriptors=[self.label]),
        }
        self.service = Service(UUID(ESS), [self.characteristics["indoor"], self.characteristics["outdoor"]])
        for which, characteristic in self.characteristics.items():
            # A test notifies only once the subscriber's CCCD write has landed.
            characteristic.on("subscription", lambda _connection, notify, _indicate, which=which: self.ev.emit(
                "subscription", which=which, notify=bool(notify)))

    def on_write(self, which: str, value: bytes) -> None:
        self.values[which] = bytes(value)
        self.ev.emit("written", which=which, value=bytes(value).hex())

    def on_label(self, _connection, value: bytes) -> None:
        self.label_value = bytes(value)
        self.ev.emit("written", which="outdoor/2901", value=bytes(value).hex())

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        self.ev.emit("command", command=cmd)
        if len(parts) == 3 and parts[0] == "notify" and parts[1] in self.characteristics:
            value = bytes.fromhex(parts[2])
            self.values[parts[1]] = value
            await self.device.notify_subscribers(self.characteristics[parts[1]], value)
            self.ev.emit("notified", which=parts[1], value=value.hex())
        elif parts[:1] == ["quit"]:
            return False
        else:
            self.ev.emit("unknown-command", command=cmd)
        return True

    async def advertise(self) -> None:
        if self.device.is_advertising:
            return
        await self.device.start_advertising(auto_restart=False, advertising_data=bytes(AdvertisingData([
            data_types.Flags(AdvertisingData.Flags.LE_GENERAL_DISCOVERABLE_MODE | AdvertisingData.Flags.BR_EDR_NOT_SUPPORTED),
            data_types.CompleteLocalName(self.a.name),
            data_types.IncompleteListOf16BitServiceUUIDs([UUID(ESS)])])))

    def on_connection(self, connection) -> None:
        self.ev.emit("connected", address=str(connection.peer_address))

        def on_disconnection(reason) -> None:
            self.ev.emit("disconnected", reason=int(reason))
            asyncio.ensure_future(self.advertise())  # ready for the central to come back
        connection.on("disconnection", on_disconnection)

    async def run(self) -> None:
        a = self.a
        transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            self.device = Device.with_hci(a.name, hci.Address(a.address), transport.source, transport.sink)
            self.device.add_service(self.service)
            self.device.on("connection", self.on_connection)
            await self.device.power_on()
            await self.advertise()
            handles = {k: c.handle for k, c in self.characteristics.items()}
            self.ev.emit("handles", **handles)
            _peerlib.mark_ready(a.ready_file)
            await asyncio.gather(
                _peerlib.control_loop(a.control, self.command),
                _peerlib.refresh_advertising_loop(self.device, a.adv_refresh, lambda: True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _peerlib.add_common_args(p)
    p.add_argument("--transport", default="hci-socket:2")
    p.add_argument("--address", default="C0:DE:00:00:00:63")
    p.add_argument("--name", default="Vigil ESS")
    p.add_argument("--indoor", default="3408", help="hex")
    p.add_argument("--outdoor", default="2c01", help="hex")
    p.add_argument("--adv-refresh", type=float, default=1.0)
    a = p.parse_args()
    asyncio.run(ESSPeer(a, _peerlib.Events(a.events)).run())


if __name__ == "__main__":
    main()

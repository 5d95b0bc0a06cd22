#!/usr/bin/env python3
"""Bumble peripheral that requires pairing, for the Vigil lab (issue 27).

GATT: Heart Rate Service 0x180D with 0x2A38 Body Sensor Location (read),
readable only over an encrypted link (--security encrypted: Just Works
suffices) or an authenticated one (--security authenticated: MITM, i.e.
passkey entry or numeric comparison). SMP: LE Secure Connections (or legacy
with --legacy), bonding, the I/O capability --io (none: Just Works;
display: it shows a passkey the central types; keyboard: it types the
passkey the central shows, --passkey, or with --passkey -1 what the control
command `type NNNNNN` gives; yesno: numeric comparison, accepted).
Keys live in memory for the peer's life, so a reconnect is encrypted with
the stored LTK, without pairing again.

--hrm: the service also has 0x2A37 Heart Rate Measurement (notify) whose
Client Characteristic Configuration can be written only over an encrypted
link (the security --security names), so a central must pair before it
subscribes; the control command `notify N` sends N measurements (uint8
rates 60, 61, ...), each logged as `notify` (seq, hr, data) before it is
sent, then `burst-done`.

--privacy: it advertises and connects under a resolvable private address
made from its IRK (which pairing hands to the central with the identity
address --address), never under the identity; the control command
`rotate` disconnects and advertises under a new one (Bumble's own periodic
rotation sets the old address again, so it is done here).

Events: connected, disconnected, subscription (notify, encrypted), notify,
burst-done, passkey (the number it displays), compare,
passkey-asked (keyboard), typed,
paired (keys, authenticated), pairing-failed, encrypted, read, advertising
(the address advertised).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peerlib  # noqa: E402

from bumble import data_types, hci  # noqa: E402
from bumble.core import UUID, AdvertisingData  # noqa: E402
from bumble.device import Device  # noqa: E402
from bumble.gatt import (GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR, Characteristic,  # noqa: E402
                         CharacteristicValue, Descriptor, Service)
from bumble.keys import MemoryKeyStore  # noqa: E402
from bumble.pairing import PairingConfig, PairingDelegate  # noqa: E402

IO = {
    "none": PairingDelegate.IoCapability.NO_OUTPUT_NO_INPUT,
    "display": PairingDelegate.IoCapability.DISPLAY_OUTPUT_ONLY,
    "keyboard": PairingDelegate.IoCapability.KEYBOARD_INPUT_ONLY,
    "yesno": PairingDelegate.IoCapability.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
}


class Delegate(PairingDelegate):
    def __init__(self, io: str, passkey: int, events: _peerlib.Events) -> None:
        super().__init__(io_capability=IO[io])
        self.passkey = passkey
        self.events = events
        self.typed: asyncio.Future | None = None

    async def display_number(self, number: int, digits: int) -> None:
        self.events.emit("passkey", passkey=number)

    async def compare_numbers(self, number: int, digits: int) -> bool:
        self.events.emit("compare", passkey=number)
        return True

    async def get_number(self) -> int | None:
        self.events.emit("passkey-asked")
        if self.passkey >= 0:
            return self.passkey
        # Typed by its user: the control command `type NNNNNN`.
        self.typed = asyncio.get_running_loop().create_future()
        return await self.typed

    def type(self, passkey: int) -> bool:
        if self.typed is None or self.typed.done():
            return False
        self.typed.set_result(passkey)
        return True


async def run(a: argparse.Namespace, events: _peerlib.Events) -> None:
    transport = await _peerlib.open_transport_retry(a.transport)
    async with transport:
        device = Device.with_hci(a.name, hci.Address(a.address), transport.source, transport.sink)
        device.keystore = MemoryKeyStore()
        permission = (Characteristic.READ_REQUIRES_AUTHENTICATION if a.security == "authenticated"
                      else Characteristic.READ_REQUIRES_ENCRYPTION)

        def on_read(connection) -> bytes:
            events.emit("read", uuid="2a38", encrypted=bool(connection.is_encrypted))
            return bytes([a.location])
        location = Characteristic(UUID.from_16_bits(0x2A38), Characteristic.Properties.READ, permission,
                                  CharacteristicValue(read=on_read))
        characteristics = [location]
        measurement = None
        if a.hrm:
            measurement = Characteristic(UUID.from_16_bits(0x2A37), Characteristic.Properties.NOTIFY, 0, b"")
            # Bumble's own CCCD is writable without encryption; this one is not (descriptors
            # given are kept), so subscribing is what makes the central pair.
            cccd_permission = (Characteristic.WRITE_REQUIRES_AUTHENTICATION if a.security == "authenticated"
                               else Characteristic.WRITE_REQUIRES_ENCRYPTION)
            measurement.descriptors = [*measurement.descriptors, Descriptor(
                GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR,
                Characteristic.READABLE | Characteristic.WRITEABLE | cccd_permission,
                device.gatt_server.make_descriptor_value(measurement))]
            measurement.on("subscription", lambda connection, notify, indicate: events.emit(
                "subscription", notify=bool(notify), encrypted=bool(connection.is_encrypted)))
            characteristics.append(measurement)
        device.add_service(Service(UUID.from_16_bits(0x180D), characteristics))
        sent = [0]

        async def notify(count: int) -> None:
            for _ in range(count):
                hr = 60 + sent[0] % 190
                data = bytes([0x00, hr])          # flags: uint8 rate, no contact, energy or RR
                events.emit("notify", seq=sent[0], hr=hr, data=data.hex())
                sent[0] += 1
                await device.notify_subscribers(measurement, data)
                await asyncio.sleep(a.interval)
            events.emit("burst-done", sent=sent[0])
        delegates: list[Delegate] = []

        def delegate() -> Delegate:
            delegates[:] = [Delegate(a.io, a.passkey, events)]
            return delegates[0]
        device.pairing_config_factory = lambda connection: PairingConfig(
            sc=not a.legacy, mitm=a.io != "none", bonding=True, delegate=delegate(),
            # The identity pairing hands out is --address (else Bumble gives the controller's public one).
            identity_address_type=hci.Address.RANDOM_DEVICE_ADDRESS if a.privacy else None)

        def on_connection(connection) -> None:
            events.emit("connected", peer=str(connection.peer_address))
            def on_pairing(keys) -> None:
                # Secure Connections: one LTK; legacy pairing: each side distributes its own.
                ltk = keys.ltk or keys.ltk_peripheral or keys.ltk_central
                events.emit("paired", authenticated=bool(ltk and ltk.authenticated))
            connection.on("pairing", on_pairing)
            connection.on("pairing_failure", lambda reason: events.emit("pairing-failed", reason=int(reason)))
            connection.on("connection_encryption_change", lambda: events.emit(
                "encrypted", on=bool(connection.is_encrypted)))

            def on_disconnection(reason) -> None:
                events.emit("disconnected", reason=int(reason))
                asyncio.ensure_future(advertise())
            connection.on("disconnection", on_disconnection)
        device.on("connection", on_connection)
        # The resolvable private address to take at the next advertising start.
        next_rpa: list[hci.Address] = []

        # Held while advertising is switched (here or by the refresh loop), so
        # a rotation and a refresh toggle never interleave.
        advertising_lock = asyncio.Lock()

        async def advertise() -> None:
            async with advertising_lock:
                await switch_advertising()

        async def switch_advertising() -> None:
            if device.is_advertising:
                if not next_rpa:
                    return
                await device.stop_advertising()
            if next_rpa:
                rpa = next_rpa.pop()
                await device.send_sync_command(hci.HCI_LE_Set_Random_Address_Command(random_address=rpa))
                device.random_address = rpa
            if device.connections:
                return
            await device.start_advertising(auto_restart=False, advertising_data=bytes(AdvertisingData([
                data_types.Flags(AdvertisingData.Flags.LE_GENERAL_DISCOVERABLE_MODE
                                 | AdvertisingData.Flags.BR_EDR_NOT_SUPPORTED),
                data_types.CompleteListOf16BitServiceUUIDs([UUID.from_16_bits(0x180D)]),
                data_types.CompleteLocalName(a.name)])))
            events.emit("advertising", address=str(device.random_address).split("/")[0])

        async def command(line: str) -> bool:
            if line == "rotate" and a.privacy:
                next_rpa[:] = [hci.Address.generate_private_address(device.irk)]
                if device.connections:
                    for connection in list(device.connections.values()):
                        await connection.disconnect()  # its disconnection advertises anew
                else:
                    await advertise()
            elif line.startswith("notify ") and measurement is not None and line[7:].strip().isdigit():
                asyncio.ensure_future(notify(int(line[7:])))
            elif line.startswith("type ") and line[5:].strip().isdigit():
                typed = bool(delegates) and delegates[0].type(int(line[5:]))
                events.emit("typed", passkey=int(line[5:]), asked=typed)
            else:
                events.emit("unknown-command", command=line)
            return True

        await device.power_on()
        if a.privacy:
            next_rpa[:] = [hci.Address.generate_private_address(device.irk)]
        await advertise()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        _peerlib.mark_ready(a.ready_file)
        refresh = asyncio.ensure_future(_peerlib.refresh_advertising_loop(device, a.adv_refresh, lambda: True,
                                                                          lock=advertising_lock))
        commands = asyncio.ensure_future(_peerlib.control_loop(a.control, command))
        await stop.wait()
        refresh.cancel()
        commands.cancel()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", default="hci-socket:1")
    p.add_argument("--name", default="Vigil Bonded")
    p.add_argument("--address", default="C0:DE:00:00:00:27")
    p.add_argument("--io", choices=sorted(IO), default="none")
    p.add_argument("--passkey", type=int, default=0, help="what --io keyboard types (-1: the `type N` command's number)")
    p.add_argument("--security", choices=["encrypted", "authenticated"], default="encrypted")
    p.add_argument("--legacy", action="store_true", help="legacy pairing instead of LE Secure Connections")
    p.add_argument("--privacy", action="store_true",
                   help="advertise under resolvable private addresses (`rotate` takes a new one)")
    p.add_argument("--location", type=int, default=1)
    p.add_argument("--hrm", action="store_true",
                   help="add 0x2A37 (notify) whose subscription needs the --security link; `notify N` sends")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between the measurements `notify N` sends")
    p.add_argument("--adv-refresh", type=float, default=1.0)
    _peerlib.add_common_args(p)
    args = p.parse_args()
    events = _peerlib.Events(args.events)
    try:
        asyncio.run(run(args, events))
    except OSError as exc:
        _peerlib.die(str(exc))


if __name__ == "__main__":
    main()

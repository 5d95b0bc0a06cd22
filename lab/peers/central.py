#!/usr/bin/env python3
"""Bumble BLE central for the Vigil lab: scan, connect, read, write,
subscribe, print what happened as JSON lines on stdout (and --events).

  central.py [--transport hci-socket:1] (--name N | --service UUID | --address A)
             [--read UUID]... [--write UUID=HEX]... [--subscribe UUID]...
             [--notifications N] [--timeout SECS] [--pair none|yesno|display]

Steps, in this order: scan until an advertiser matches (name or service UUID
in its advertising data or scan response, or its address), connect, discover
GATT, do every --read, every --write (with response), subscribe to every
--subscribe, wait for --notifications notifications in total, disconnect.
With --pair, a read refused for want of encryption or authentication pairs
(LE Secure Connections, bonding; I/O capability none: Just Works, yesno:
numeric comparison, the number accepted) and is tried once more, as a
phone's stack does.

Events: found, connected, services, read {uuid, value(hex), text}, write,
subscribed, notification {uuid, value}, disconnected, done / error {message};
with --pair: refused {uuid, error}, compare {number}, passkey {number} (display:
the passkey to type at the peripheral), paired {authenticated}.
Exit status 0 only if every step succeeded within --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peerlib  # noqa: E402

from bumble import att, hci  # noqa: E402
from bumble.core import UUID, AdvertisingData  # noqa: E402
from bumble.device import Device, Peer  # noqa: E402
from bumble.keys import MemoryKeyStore  # noqa: E402
from bumble.pairing import PairingConfig, PairingDelegate  # noqa: E402

PAIRING_IO = {
    "none": PairingDelegate.IoCapability.NO_OUTPUT_NO_INPUT,
    "yesno": PairingDelegate.IoCapability.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
    "display": PairingDelegate.IoCapability.DISPLAY_OUTPUT_ONLY,
}
REFUSALS = (att.ErrorCode.INSUFFICIENT_ENCRYPTION, att.ErrorCode.INSUFFICIENT_AUTHENTICATION)


class ComparingDelegate(PairingDelegate):
    def __init__(self, io: str, events: _peerlib.Events) -> None:
        super().__init__(io_capability=PAIRING_IO[io])
        self.events = events

    async def compare_numbers(self, number: int, digits: int) -> bool:
        self.events.emit("compare", number=number)
        return True

    async def display_number(self, number: int, digits: int) -> None:
        self.events.emit("passkey", number=number)  # the peripheral's user types it

UUID_LIST_TYPES = (
    AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
    AdvertisingData.INCOMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
    AdvertisingData.COMPLETE_LIST_OF_32_BIT_SERVICE_CLASS_UUIDS,
    AdvertisingData.INCOMPLETE_LIST_OF_32_BIT_SERVICE_CLASS_UUIDS,
    AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS,
    AdvertisingData.INCOMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS,
)


def parse_uuid(s: str) -> UUID:
    s = s.strip()
    if len(s) in (4, 8) and all(c in "0123456789abcdefABCDEF" for c in s):
        return UUID.from_16_bits(int(s, 16)) if len(s) == 4 else UUID.from_32_bits(int(s, 16))
    return UUID(s)


class Central:
    def __init__(self, args, events: _peerlib.Events) -> None:
        self.a = args
        self.ev = events
        self.seen: dict[str, dict] = {}
        self.notes = 0
        self.enough = asyncio.Event()

    def matches(self, adv) -> bool:
        key = str(adv.address)
        info = self.seen.setdefault(key, {"names": set(), "uuids": set()})
        for t in (AdvertisingData.COMPLETE_LOCAL_NAME, AdvertisingData.SHORTENED_LOCAL_NAME):
            for n in adv.data.get_all(t):
                info["names"].add(n if isinstance(n, str) else n.decode(errors="replace"))
        for t in UUID_LIST_TYPES:
            for lst in adv.data.get_all(t):
                for u in lst:
                    info["uuids"].add(str(u).lower())
        a = self.a
        if a.address and adv.address.to_string(False).upper() != a.address.upper():
            return False
        if a.name and a.name not in info["names"]:
            return False
        if a.service and str(parse_uuid(a.service)).lower() not in info["uuids"]:
            return False
        return True

    async def run(self) -> None:
        a = self.a
        transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            device = Device.with_hci("Vigil Central", hci.Address(a.own_address),
                                     transport.source, transport.sink)
            if a.pair:
                device.keystore = MemoryKeyStore()
                device.pairing_config_factory = lambda connection: PairingConfig(
                    sc=True, mitm=a.pair != "none", bonding=True, delegate=ComparingDelegate(a.pair, self.ev))
            await device.power_on()
            found: asyncio.Future = asyncio.get_running_loop().create_future()

            def on_adv(adv) -> None:
                if not found.done() and self.matches(adv):
                    found.set_result(adv)
            device.on("advertisement", on_adv)
            await device.start_scanning(filter_duplicates=False)
            _peerlib.mark_ready(a.ready_file)
            try:
                adv = await asyncio.wait_for(found, a.scan_timeout)
            except asyncio.TimeoutError:
                raise RuntimeError(f"no advertiser matched within {a.scan_timeout}s; seen: "
                                   + str({k: {kk: sorted(vv) for kk, vv in v.items()}
                                          for k, v in self.seen.items()}))
            await device.stop_scanning()
            info = self.seen[str(adv.address)]
            self.ev.emit("found", address=str(adv.address), names=sorted(info["names"]),
                         uuids=sorted(info["uuids"]), rssi=adv.rssi)

            conn = await device.connect(adv.address, timeout=a.timeout)
            self.ev.emit("connected", address=str(adv.address))
            disconnected = asyncio.Event()
            conn.on("disconnection", lambda reason: (self.ev.emit("disconnected", reason=int(reason)),
                                                     disconnected.set()))
            peer = Peer(conn)
            await peer.discover_services()
            for s in peer.services:
                await s.discover_characteristics()
            self.ev.emit("services", services=[str(s.uuid) for s in peer.services])

            def char(u: str):
                cs = peer.get_characteristics_by_uuid(parse_uuid(u))
                if not cs:
                    raise RuntimeError(f"characteristic {u} not found")
                return cs[0]

            for u in a.read:
                try:
                    v = bytes(await char(u).read_value())
                except att.ATT_Error as refusal:
                    if not a.pair or refusal.error_code not in REFUSALS:
                        raise
                    self.ev.emit("refused", uuid=u, error=att.ErrorCode(refusal.error_code).name)
                    paired: asyncio.Future = asyncio.get_running_loop().create_future()
                    conn.on("pairing", lambda keys: paired.done() or paired.set_result(keys))
                    await asyncio.wait_for(conn.pair(), a.timeout)
                    keys = await asyncio.wait_for(paired, a.timeout)
                    ltk = keys.ltk or keys.ltk_central or keys.ltk_peripheral
                    self.ev.emit("paired", authenticated=bool(ltk and ltk.authenticated))
                    v = bytes(await char(u).read_value())
                self.ev.emit("read", uuid=u, value=v.hex(), text=v.decode(errors="replace"))
            for w in a.write:
                u, hexv = w.split("=", 1)
                await char(u).write_value(bytes.fromhex(hexv), with_response=True)
                self.ev.emit("write", uuid=u, value=hexv)
            for u in a.subscribe:
                def make(uu: str):
                    def on_value(value) -> None:
                        self.notes += 1
                        self.ev.emit("notification", uuid=uu, value=bytes(value).hex())
                        if self.notes >= a.notifications:
                            self.enough.set()
                    return on_value
                await char(u).subscribe(make(u))
                self.ev.emit("subscribed", uuid=u)
            if a.subscribe and a.notifications:
                try:
                    await asyncio.wait_for(self.enough.wait(), a.timeout)
                except asyncio.TimeoutError:
                    raise RuntimeError(f"received {self.notes} of {a.notifications} notifications "
                                       f"within {a.timeout}s")
            if not disconnected.is_set():
                await conn.disconnect()
            self.ev.emit("done", notifications=self.notes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", default="hci-socket:1")
    p.add_argument("--own-address", default="C0:DE:00:00:00:02", help="our static random address")
    p.add_argument("--name", help="match advertisers with this local name")
    p.add_argument("--service", help="match advertisers listing this service UUID")
    p.add_argument("--address", help="match this address")
    p.add_argument("--read", action="append", default=[], metavar="UUID")
    p.add_argument("--write", action="append", default=[], metavar="UUID=HEX")
    p.add_argument("--subscribe", action="append", default=[], metavar="UUID")
    p.add_argument("--notifications", type=int, default=1, help="notifications to wait for in total")
    p.add_argument("--scan-timeout", type=float, default=30)
    p.add_argument("--timeout", type=float, default=30, help="per-step timeout")
    p.add_argument("--pair", choices=sorted(PAIRING_IO), help="pair when a read needs it (I/O capability)")
    _peerlib.add_common_args(p)
    a = p.parse_args()
    if not (a.name or a.service or a.address):
        p.error("give --name, --service or --address")
    ev = _peerlib.Events(a.events)
    try:
        asyncio.run(Central(a, ev).run())
    except Exception as exc:  # report every failure as an event, exit 1
        ev.emit("error", message=f"{type(exc).__name__}: {exc}")
        sys.exit(1)


if __name__ == "__main__":
    main()

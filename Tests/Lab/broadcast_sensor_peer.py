#!/usr/bin/env python3
"""A broadcast-only sensor for 62-vigild-ble-monitor (not a test: the runner
only runs files named NN-name): a Bumble device on hci1 that never accepts
a connection and puts its readings in manufacturer data, as a RuuviTag does
(company 0x0499, data format 5; the measurement sequence number counts).

Commands (one per line on the --control FIFO):
  send N SECONDS   N advertisements, one every SECONDS: each with the next
                   sequence number, logged {"event": "advert", "seq": n,
                   "data": hex} *before* it goes on air; then
                   {"event": "burst-done", "seq": n}
  repeat N SECONDS N advertisements with the same data as the last one
                   (each logged {"event": "repeat", "seq": n}): does BlueZ
                   signal a repeat?  Then {"event": "repeat-done"}
  stop             stop advertising ({"event": "stopped"})
  quit             exit

btvirt's controllers send an advertising report only when advertising is
enabled, never periodically (lab/peers/_peerlib.py), so each advertisement
here is new data followed by advertising off and on: one report each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys

print("broadcast_sensor_peer: importing Bumble", flush=True)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "peers"))
import _peerlib  # noqa: E402

from bumble import hci  # noqa: E402
from bumble.device import Device  # noqa: E402

RUUVI = 0x0499


def ruuvi_format5(seq: int, mac: bytes) -> bytes:
    """RuuviTag data format 5 (RAWv2), 24 bytes: 21.5 C, 45 %, 1000 hPa,
    acceleration 0/0/1000 mG, 2.9 V at +4 dBm, movement counter seq % 256,
    measurement sequence number seq."""
    temperature = round(21.5 / 0.005)
    humidity = round(45.0 / 0.0025)
    pressure = 100000 - 50000
    power = ((2900 - 1600) << 5) | ((4 + 40) // 2)
    return struct.pack(">BhHHhhhHBH6s", 5, temperature, humidity, pressure, 0, 0, 1000, power, seq % 256,
                       seq & 0xFFFF, mac)


class Broadcaster:
    def __init__(self, args: argparse.Namespace, events: _peerlib.Events) -> None:
        self.args = args
        self.events = events
        self.device: Device | None = None
        self.seq = 0
        self.mac = bytes.fromhex(args.address.replace(":", ""))

    def advertising_data(self) -> bytes:
        flags = bytes([2, 0x01, 0x06])
        manufacturer = struct.pack("<H", RUUVI) + ruuvi_format5(self.seq, self.mac)
        return flags + bytes([len(manufacturer) + 1, 0xFF]) + manufacturer

    async def hci(self, command) -> None:
        await self.device.send_sync_command_raw(command)

    async def send(self, count: int, interval: float, repeat: bool = False) -> None:
        for _ in range(count):
            if not repeat:
                self.seq += 1
            data = self.advertising_data()
            self.events.emit("repeat" if repeat else "advert", seq=self.seq, data=data.hex())
            await self.hci(hci.HCI_LE_Set_Advertising_Enable_Command(advertising_enable=0))
            await self.hci(hci.HCI_LE_Set_Advertising_Data_Command(advertising_data=data))
            await self.hci(hci.HCI_LE_Set_Advertising_Enable_Command(advertising_enable=1))
            await asyncio.sleep(interval)  # the broadcaster's period, not a wait for a condition
        self.events.emit("repeat-done" if repeat else "burst-done", seq=self.seq)

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        self.events.emit("command", command=cmd)
        if parts[:1] in (["send"], ["repeat"]) and len(parts) == 3:
            asyncio.ensure_future(self.send(int(parts[1]), float(parts[2]), repeat=parts[0] == "repeat"))
        elif parts == ["stop"]:
            await self.hci(hci.HCI_LE_Set_Advertising_Enable_Command(advertising_enable=0))
            self.events.emit("stopped", seq=self.seq)
        elif parts == ["quit"]:
            return False
        else:
            self.events.emit("unknown-command", command=cmd)
        return True

    async def run(self) -> None:
        a = self.args
        print(f"broadcast_sensor_peer: opening {a.transport}", flush=True)
        transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            self.device = Device.with_hci("Ruuvi", hci.Address(a.address), transport.source, transport.sink)
            await self.device.power_on()
            # Non-connectable undirected (ADV_NONCONN_IND), 100 ms, from the static random address.
            await self.hci(hci.HCI_LE_Set_Random_Address_Command(random_address=hci.Address(a.address)))
            await self.hci(hci.HCI_LE_Set_Advertising_Parameters_Command(
                advertising_interval_min=160, advertising_interval_max=160, advertising_type=0x03,
                own_address_type=hci.OwnAddressType.RANDOM, peer_address_type=0, peer_address=hci.Address.ANY,
                advertising_channel_map=7, advertising_filter_policy=0))
            _peerlib.mark_ready(a.ready_file)
            self.events.emit("ready", address=a.address)
            await _peerlib.control_loop(a.control, self.command)
            self.events.emit("exit", sent=self.seq)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", default="hci-socket:1", help="Bumble transport (default hci-socket:1)")
    p.add_argument("--address", default="C0:DE:00:00:00:62", help="static random address")
    _peerlib.add_common_args(p)
    args = p.parse_args()
    try:
        asyncio.run(Broadcaster(args, _peerlib.Events(args.events)).run())
    except OSError as exc:
        _peerlib.die(str(exc))


if __name__ == "__main__":
    main()

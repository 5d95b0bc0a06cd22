#!/usr/bin/env python3
"""The Bumble central of the Bluetooth LE peripheral benchmark
(lab/bench/91-bench-ble-peripheral.py; not a test itself: the runner only
runs files named NN-name).  It scans (hci1) for an advertiser listing
--service, connects, discovers GATT, marks itself ready and stays connected,
doing what the control FIFO asks, one command per line:

  read UUID N INTERVAL   N reads of characteristic UUID, INTERVAL s apart;
                         emits {"event": "reads", "uuid", "ns": [...],
                         "values": [first 3 hex], "errors": [...]}; ns[i] is
                         CLOCK_MONOTONIC from just before Peer.read_value's
                         ATT request to just after its response
  subscribe UUID         subscribes (CCCD write); emits "subscribed"; every
                         notification is kept as (CLOCK_MONOTONIC ns, uint32
                         LE seq of the first 4 bytes, or -1)
  collect N IDLE         waits until N notifications arrived since the last
                         collect, or none arrived for IDLE s; emits
                         {"event": "collected", "t": [...], "seq": [...]}
  disconnect             disconnects and exits

Nothing is logged per read or notification.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "peers"))
import _peerlib  # noqa: E402
from central import Central, parse_uuid  # noqa: E402  (the lab central's advertiser matching)

from bumble import hci  # noqa: E402
from bumble.device import Device, Peer  # noqa: E402


async def run(a, ev: _peerlib.Events) -> None:
    matcher = Central(a, ev)
    transport = await _peerlib.open_transport_retry(a.transport)
    async with transport:
        device = Device.with_hci("Vigil Bench Central", hci.Address(a.own_address), transport.source, transport.sink)
        await device.power_on()
        found: asyncio.Future = asyncio.get_running_loop().create_future()

        def on_adv(adv) -> None:
            if not found.done() and matcher.matches(adv):
                found.set_result(adv)
        device.on("advertisement", on_adv)
        await device.start_scanning(filter_duplicates=False)
        adv = await asyncio.wait_for(found, a.scan_timeout)
        await device.stop_scanning()
        conn = await device.connect(adv.address, timeout=a.timeout)
        done = asyncio.Event()
        conn.on("disconnection", lambda reason: (ev.emit("disconnected", reason=int(reason)), done.set()))
        peer = Peer(conn)
        await peer.discover_services()
        for s in peer.services:
            await s.discover_characteristics()
        ev.emit("connected", address=str(adv.address), services=[str(s.uuid) for s in peer.services])

        def char(u: str):
            cs = peer.get_characteristics_by_uuid(parse_uuid(u))
            if not cs:
                raise RuntimeError(f"characteristic {u} not found")
            return cs[0]

        notes: list[tuple[int, int]] = []
        arrived = asyncio.Event()
        taken = [0]

        def on_value(value) -> None:
            t = time.monotonic_ns()
            v = bytes(value)
            notes.append((t, struct.unpack_from("<I", v)[0] if len(v) >= 4 else -1))
            arrived.set()

        async def handle(cmd: str) -> bool:
            parts = cmd.split()
            if not parts:
                return True
            if parts[0] == "read":
                c, n, interval = char(parts[1]), int(parts[2]), float(parts[3])
                ns, values, errors = [], [], []
                for i in range(n):
                    try:
                        t0 = time.monotonic_ns()
                        v = await c.read_value()
                        ns.append(time.monotonic_ns() - t0)
                        if len(values) < 3:
                            values.append(bytes(v).hex())
                    except Exception as exc:  # noqa: BLE001 - reported to the benchmark
                        errors.append(f"{type(exc).__name__}: {exc}")
                    if interval > 0 and i + 1 < n:
                        await asyncio.sleep(interval)
                ev.emit("reads", uuid=parts[1], ns=ns, values=values, errors=errors)
            elif parts[0] == "subscribe":
                await char(parts[1]).subscribe(on_value)
                ev.emit("subscribed", uuid=parts[1])
            elif parts[0] == "collect":
                want, idle = int(parts[1]), float(parts[2])
                while len(notes) - taken[0] < want:
                    arrived.clear()
                    try:
                        await asyncio.wait_for(arrived.wait(), idle)
                    except asyncio.TimeoutError:
                        break
                got = notes[taken[0]:]
                taken[0] = len(notes)
                ev.emit("collected", t=[t for t, _ in got], seq=[s for _, s in got])
            elif parts[0] == "disconnect":
                if not done.is_set():
                    await conn.disconnect()
                return False
            return True

        _peerlib.mark_ready(a.ready_file)
        control = asyncio.ensure_future(_peerlib.control_loop(a.control, handle))
        await asyncio.wait([control, asyncio.ensure_future(done.wait())], return_when=asyncio.FIRST_COMPLETED)
        if control.done() and control.exception():
            raise control.exception()
        ev.emit("done")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", default="hci-socket:1")
    p.add_argument("--own-address", default="C0:DE:00:00:00:02")
    p.add_argument("--service", required=True)
    p.add_argument("--scan-timeout", type=float, default=60)
    p.add_argument("--timeout", type=float, default=40)
    _peerlib.add_common_args(p)
    a = p.parse_args()
    a.name = a.address = None
    ev = _peerlib.Events(a.events)
    try:
        asyncio.run(run(a, ev))
    except Exception as exc:  # noqa: BLE001
        ev.emit("error", message=f"{type(exc).__name__}: {exc}")
        sys.exit(1)


if __name__ == "__main__":
    main()

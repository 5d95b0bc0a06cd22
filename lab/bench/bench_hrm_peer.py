#!/usr/bin/env python3
"""The lab's heart-rate monitor (lab/peers/heart_rate_monitor.py) as the
sending end of the Bluetooth LE central benchmark (lab/bench/90-bench-ble-central.py;
not a test itself: the runner only runs files named NN-name).

Same options, GATT, advertising and commands as the stock peer, except that it
notifies only on command and stamps every notification:

  send N INTERVAL    notify N measurements, INTERVAL seconds apart (0: as fast
                     as the controller takes them: the peer waits only for
                     HCI flow control, i.e. for btvirt's free ACL buffers).
                     When the last one has left (HCI flow control drained)
                     it emits one event
                       {"event": "burst-done", "first": SEQ, "count": N,
                        "t0": [...], "t1": [...], "tw": [...]}
                     t0[i] = CLOCK_MONOTONIC (ns) just before measurement
                     first+i is handed to Bumble, t1[i] just after that call
                     returned, tw[i] just before the ACL packet carrying it
                     was written to the HCI socket (hci1's user channel):
                     the moment it leaves the peer.  tw is empty if the
                     number of ACL packets written during the burst was not
                     N (other ATT traffic).  Nothing is logged per
                     notification (a JSON line per send would slow the
                     sender down).

Every measurement is uint16 heart rate 60 + seq % 7 with two RR intervals
carrying the sequence number: rr[0] = seq & 0xFFFF, rr[1] = seq >> 16, so a
receiver can match what it got with the stamp of its sending.  The guest is
one kernel, so the peer's clock and the receivers' are the same CLOCK_MONOTONIC.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "peers"))
import heart_rate_monitor as stock  # noqa: E402


def encode(seq: int) -> bytes:
    """Flags: uint16 rate + RR present; then rate, rr0, rr1."""
    return struct.pack("<BHHH", stock.FLAG_UINT16 | stock.FLAG_RR, 60 + seq % 7, seq & 0xFFFF, seq >> 16)


def decode_seq(value: bytes) -> int | None:
    """The sequence number in a value encode() made (None for anything else)."""
    if len(value) != 7 or value[0] != (stock.FLAG_UINT16 | stock.FLAG_RR):
        return None
    _, _, lo, hi = struct.unpack("<BHHH", value)
    return lo | (hi << 16)


class StampingSink:
    """The HCI sink, stamping every ACL data packet just before it is written."""

    def __init__(self, sink, stamps: list[int]) -> None:
        self.sink = sink
        self.stamps = stamps

    def on_packet(self, packet: bytes) -> None:
        if packet[:1] == b"\x02":          # HCI ACL data packet indicator
            self.stamps.append(time.monotonic_ns())
        self.sink.on_packet(packet)

    def __getattr__(self, name):
        return getattr(self.sink, name)


class BenchMonitor(stock.HeartRateMonitor):
    def __init__(self, args, events) -> None:
        super().__init__(args, events)
        self.bursts: asyncio.Queue = asyncio.Queue()
        self.wire: list[int] = []

    async def wait_for_flow(self) -> None:
        """Hold the next notification while every controller ACL buffer is in flight."""
        host = self.device.host
        queue = host.le_acl_packet_queue or host.acl_packet_queue
        if queue is None:
            return
        while queue.pending >= queue.max_in_flight:
            flowed = asyncio.get_running_loop().create_future()

            def on_flow() -> None:
                if not flowed.done():
                    flowed.set_result(None)
            queue.once("flow", on_flow)
            await flowed

    async def drain(self) -> None:
        host = self.device.host
        queue = host.le_acl_packet_queue or host.acl_packet_queue
        for connection in list(self.subscribers):
            try:
                await asyncio.wait_for(queue.drain(connection.handle), 30)
            except (ValueError, asyncio.TimeoutError):
                pass

    async def notify_loop(self) -> None:
        host = self.device.host
        host.hci_sink = StampingSink(host.hci_sink, self.wire)
        while True:
            count, interval = await self.bursts.get()
            while not self.subscribers or not self.powered:
                self.wake.clear()
                await self.wake.wait()
            first = self.seq
            t0: list[int] = []
            t1: list[int] = []
            self.wire.clear()
            for i in range(count):
                if interval <= 0:
                    await self.wait_for_flow()
                data = encode(self.seq)
                t0.append(time.monotonic_ns())
                await self.device.notify_subscribers(self.hrm, data)
                t1.append(time.monotonic_ns())
                self.seq += 1
                if i + 1 < count:
                    await asyncio.sleep(interval)
            await self.drain()
            tw = list(self.wire) if len(self.wire) == count else []
            self.events.emit("burst-done", first=first, count=count, interval=interval, t0=t0, t1=t1, tw=tw,
                             acl=len(self.wire))

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        if parts and parts[0] == "send" and len(parts) in (2, 3):
            self.events.emit("command", command=cmd)
            self.bursts.put_nowait((int(parts[1]), float(parts[2]) if len(parts) == 3 else self.args.interval))
            return True
        return await super().command(cmd)


if __name__ == "__main__":
    # The stock main() builds the parser and runs `HeartRateMonitor(args, events)`.
    stock.HeartRateMonitor = BenchMonitor
    stock.main()

#!/usr/bin/env python3
"""The lab's heart-rate monitor (lab/peers/heart_rate_monitor.py) made to send
a known sequence on command, for 60-hrm-bridge-frozen (not a test: the runner
only runs files named NN-name).

Same options, GATT, advertising, events and commands as the stock peer, plus:
  send N                 notify exactly N more measurements (at --interval),
                         as soon as a central is subscribed; then emit
                         {"event": "burst-done", "seq": ...}.  Nothing is
                         sent without it: the peer starts with a budget of 0.
  configure K=V ...      change what the next measurements carry:
                         format=uint8|uint16  rate=N  contact=none|yes|no
                         energy=N|none  rr=N (intervals per measurement)
                         emits {"event": "configured", ...} or
                         {"event": "configure-rejected", "error": ...}
Each notification is logged as the stock peer logs it ("notify": seq, hr,
format, contact, energy, rr, data), so a test compares against that.  It is
logged *before* it is sent: vigild and the bridge can write a measurement
before this process resumes from the send, and 60-hrm-bridge-frozen fails at
once on a measurement the log does not show (issue 33: it did, for a value
the peer logged a moment later).  "burst-done" follows the burst's last send.

Start it with lab.Peer.start("hrm", "<path to this file>", ...): lib.sh's
lab_peer_start takes a path as well as a name in lab/peers.
"""

from __future__ import annotations

import asyncio
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "peers"))
import heart_rate_monitor as stock  # noqa: E402


class SequenceMonitor(stock.HeartRateMonitor):
    def __init__(self, args, events) -> None:
        super().__init__(args, events)
        self.budget = 0

    async def notify_loop(self) -> None:
        a = self.args
        while True:
            if not self.subscribers or not self.powered or self.budget <= 0:
                self.wake.clear()
                await self.wake.wait()
                continue
            data, info = self.next_measurement()
            self.events.emit("notify", **info)   # before sending: see the docstring
            await self.device.notify_subscribers(self.hrm, data)
            self.seq += 1
            self.budget -= 1
            if self.energy is not None:
                self.energy = (self.energy + 1) & 0xFFFF
            if self.budget == 0:
                self.events.emit("burst-done", seq=self.seq)
            await asyncio.sleep(a.interval)

    def configure(self, pairs: list[str]) -> dict:
        new = {"format": self.args.format, "rate": self.rate, "contact": self.args.contact,
               "energy": self.energy, "rr": self.args.rr}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in new:
                raise ValueError(f"bad setting {pair!r}")
            if key == "format":
                if value not in ("uint8", "uint16"):
                    raise ValueError(f"format {value!r}")
                new[key] = value
            elif key == "contact":
                if value not in ("none", "yes", "no"):
                    raise ValueError(f"contact {value!r}")
                new[key] = value
            elif key == "energy":
                new[key] = None if value == "none" else int(value) & 0xFFFF
            else:
                new[key] = int(value)
        if new["format"] == "uint8" and new["rate"] + 6 > 255:
            raise ValueError("uint8 format needs rate + 6 <= 255")
        if new["rate"] < 0 or new["rate"] + 6 > 0xFFFF or new["rr"] < 0:
            raise ValueError(f"out of range: {new}")
        self.args.format, self.rate, self.args.contact, self.energy, self.args.rr = (
            new["format"], new["rate"], new["contact"], new["energy"], new["rr"])
        return new

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        name = parts[0] if parts else ""
        if name == "send" and len(parts) == 2:
            self.events.emit("command", command=cmd)
            self.budget += int(parts[1])
            self.wake.set()
            return True
        if name == "configure":
            self.events.emit("command", command=cmd)
            try:
                self.events.emit("configured", **self.configure(parts[1:]))
            except ValueError as exc:
                self.events.emit("configure-rejected", command=cmd, error=str(exc))
            return True
        return await super().command(cmd)


if __name__ == "__main__":
    # The stock main() builds the parser and runs `HeartRateMonitor(args, events)`.
    stock.HeartRateMonitor = SequenceMonitor
    stock.main()

#!/usr/bin/env python3
"""A Bumble peer for L2CAP connection-oriented channels (LE credit-based),
for 58-vigild-l2cap (not a test: the runner only runs files named NN-name).

Two roles:
  --role server   an LE peripheral (advertising --name) that listens on
                  --psm: what vigild's central opens a channel to.
  --role client   an LE central that scans for --target-name, connects and
                  opens a channel to --psm (a PSM vigild published).

On a channel, whatever arrives is checked against the bulk pattern
byte[i] = (i + 7) % 253 (a different one from the serial peers', so a
mix-up shows) and counted: {"event": "received", "bytes": N, "ok": true}
every 64 KiB and at --expect bytes ("received-all"). Commands (FIFO):
  send N        write N bytes of the pattern i % 251 (continuing where the
                last send on this channel stopped); {"event": "sent", "bytes": total}
                once drained
  close         disconnect the channel (the link stays)
  disconnect    drop the link
  advertise     (server) advertise again
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

from bumble import data_types, hci, l2cap  # noqa: E402
from bumble.core import AdvertisingData  # noqa: E402
from bumble.device import Device  # noqa: E402


def inbound(start: int, n: int) -> bytes:
    """What the peer expects to receive: byte[i] = (i + 7) % 253."""
    return bytes((i + 7) % 253 for i in range(start, start + n))


def outbound(start: int, n: int) -> bytes:
    """What the peer sends: byte[i] = i % 251."""
    return bytes(i % 251 for i in range(start, start + n))


class L2CAPPeer:
    def __init__(self, args, events: _peerlib.Events) -> None:
        self.a = args
        self.ev = events
        self.device: Device | None = None
        self.channel = None
        self.connection = None
        self.received = 0
        self.ok = True
        self.sent = 0
        self.sdus = 0

    def on_sdu(self, sdu: bytes) -> None:
        expected = inbound(self.received, len(sdu))
        if sdu != expected and self.ok:
            first = next(i for i in range(len(sdu)) if sdu[i] != expected[i])
            self.ok = False
            self.ev.emit("mismatch", at=self.received + first, got=sdu[first], expected=expected[first])
        before = self.received
        self.received += len(sdu)
        self.sdus += 1
        if self.received // 65536 != before // 65536:
            self.ev.emit("received", bytes=self.received, sdus=self.sdus, ok=self.ok)
        if self.a.expect and before < self.a.expect <= self.received:
            self.ev.emit("received-all", bytes=self.received, sdus=self.sdus, ok=self.ok)

    def adopt(self, channel) -> None:
        self.channel = channel
        self.sent = 0  # each channel starts both patterns and the counts at 0
        self.received = 0
        self.sdus = 0
        self.ok = True
        channel.sink = self.on_sdu
        channel.on("close", lambda: self.ev.emit("channel-closed", received=self.received, ok=self.ok))
        self.ev.emit("channel-open", psm=self.a.psm, mtu=channel.mtu, peer_mtu=channel.peer_mtu,
                     peer_mps=channel.peer_mps)

    def on_connection(self, connection) -> None:
        self.connection = connection
        self.ev.emit("connected", address=str(connection.peer_address))
        def on_disconnection(reason) -> None:
            self.connection = None
            self.ev.emit("disconnected", reason=int(reason))
            if self.a.role == "server":
                asyncio.ensure_future(self.advertise())  # ready for the central to come back
        connection.on("disconnection", on_disconnection)

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        name = parts[0] if parts else ""
        self.ev.emit("command", command=cmd)
        if name == "send" and len(parts) == 2:
            if self.channel is None:
                self.ev.emit("send-failed", error="no channel")
                return True
            total = int(parts[1])
            step = 16384
            for start in range(self.sent, self.sent + total, step):
                self.channel.write(outbound(start, min(step, self.sent + total - start)))
                await self.channel.drain()
            self.sent += total
            self.ev.emit("sent", bytes=self.sent)
        elif name == "close" and self.channel is not None:
            await self.channel.disconnect()
        elif name == "disconnect" and self.connection is not None:
            await self.connection.disconnect(hci.HCI_REMOTE_USER_TERMINATED_CONNECTION_ERROR)
        elif name == "advertise" and self.device is not None:
            await self.advertise()
        elif name == "quit":
            return False
        else:
            self.ev.emit("unknown-command", command=cmd)
        return True

    async def advertise(self) -> None:
        if self.device.is_advertising:
            return
        await self.device.start_advertising(auto_restart=False, advertising_data=bytes(AdvertisingData([
            data_types.Flags(AdvertisingData.Flags.LE_GENERAL_DISCOVERABLE_MODE | AdvertisingData.Flags.BR_EDR_NOT_SUPPORTED),
            data_types.CompleteLocalName(self.a.name)])))

    async def run(self) -> None:
        a = self.a
        transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            self.device = Device.with_hci(a.name, hci.Address(a.address), transport.source, transport.sink)
            self.device.on("connection", self.on_connection)
            await self.device.power_on()
            spec = l2cap.LeCreditBasedChannelSpec(psm=a.psm, mtu=a.mtu, mps=a.mps,
                                                  max_credits=a.credits)
            tasks = [asyncio.ensure_future(_peerlib.control_loop(a.control, self.command))]
            if a.role == "server":
                self.device.create_l2cap_server(spec=spec, handler=self.adopt)
                await self.advertise()
                tasks.append(asyncio.ensure_future(_peerlib.refresh_advertising_loop(
                    self.device, a.adv_refresh, lambda: True)))
                _peerlib.mark_ready(a.ready_file)
            else:
                _peerlib.mark_ready(a.ready_file)
                found: asyncio.Future = asyncio.get_running_loop().create_future()

                def on_adv(adv) -> None:
                    names = [n if isinstance(n, str) else n.decode(errors="replace")
                             for t in (AdvertisingData.COMPLETE_LOCAL_NAME, AdvertisingData.SHORTENED_LOCAL_NAME)
                             for n in adv.data.get_all(t)]
                    if not found.done() and a.target_name in names:
                        found.set_result(adv)
                self.device.on("advertisement", on_adv)
                await self.device.start_scanning(filter_duplicates=False)
                adv = await asyncio.wait_for(found, a.timeout)
                await self.device.stop_scanning()
                self.ev.emit("found", address=str(adv.address))
                connection = await self.device.connect(adv.address, timeout=a.timeout)
                try:
                    channel = await connection.create_l2cap_channel(spec=spec)
                except Exception as error:  # noqa: BLE001 - reported for the test
                    self.ev.emit("channel-refused", error=str(error))
                else:
                    self.adopt(channel)
            await asyncio.gather(*tasks)
            self.ev.emit("exit", received=self.received, sent=self.sent, ok=self.ok)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _peerlib.add_common_args(p)
    p.add_argument("--transport", default="hci-socket:1")
    p.add_argument("--role", choices=["server", "client"], default="server")
    p.add_argument("--address", default="C0:DE:00:00:00:20")
    p.add_argument("--name", default="Vigil L2CAP")
    p.add_argument("--target-name", default="Vigil L2CAP App")
    p.add_argument("--psm", type=lambda s: int(s, 0), default=0x80)
    p.add_argument("--mtu", type=int, default=2048)
    p.add_argument("--mps", type=int, default=247)
    p.add_argument("--credits", type=int, default=64)
    p.add_argument("--expect", type=int, default=0, help="bytes to receive before emitting received-all")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--adv-refresh", type=float, default=1.0)
    a = p.parse_args()
    asyncio.run(L2CAPPeer(a, _peerlib.Events(a.events)).run())


if __name__ == "__main__":
    main()

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
                last send on this channel stopped), in the background;
                {"event": "sent", "bytes": total} once drained, "send-failed"
                if the channel ended first
  notify N      (with --stream-service) the same pattern as notifications of
                the stream characteristic, each as long as the link's ATT MTU
                allows (MTU - 3), as fast as the controller takes them,
                continuing where the last notify on this link stopped;
                {"event": "notified", "bytes": total, "mtu": M, "values": V}
                once drained
  att-mtu N     the largest ATT MTU this GATT server accepts on links
                exchanged from now on (Bumble's default 517; 23 is the
                smallest, 20-byte values); {"event": "att-mtu", "mtu": N}
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
from bumble.core import UUID, AdvertisingData  # noqa: E402
from bumble.device import Device  # noqa: E402
from bumble.gatt import Characteristic, Service  # noqa: E402


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
        self.stream = None  # the notify characteristic of --stream-service
        self.stream_service = None
        self.subscriber = None  # the connection subscribed to it
        self.notified = 0
        if args.stream_service:
            self.stream = Characteristic(UUID(args.stream_characteristic), Characteristic.Properties.NOTIFY,
                                         Characteristic.Permissions(0), b"")
            self.stream_service = Service(UUID(args.stream_service), [self.stream])
            self.stream.on("subscription", self.on_subscription)

    def on_subscription(self, connection, notify_enabled: bool, indicate_enabled: bool) -> None:
        self.subscriber = connection if notify_enabled else None
        self.notified = 0  # each subscription starts the pattern at 0
        self.ev.emit("subscription", notify=notify_enabled, mtu=connection.att_mtu)

    async def send(self, channel, total: int) -> None:
        first = self.sent
        self.sent += total
        step, start = 16384, first
        try:
            for start in range(first, first + total, step):
                if self.channel is not channel:
                    raise ConnectionError("the channel closed")
                channel.write(outbound(start, min(step, first + total - start)))
                await channel.drain()
        except Exception as exc:  # noqa: BLE001 - reported, the peer goes on
            self.ev.emit("send-failed", error=str(exc) or type(exc).__name__, at=start)
            return
        self.ev.emit("sent", bytes=first + total)

    async def notify(self, total: int) -> None:
        """`total` bytes of the pattern as notifications of MTU - 3 bytes, each
        handed to Bumble once the controller has a free ACL buffer."""
        connection = self.subscriber
        if connection is None:
            self.ev.emit("notify-failed", error="no subscriber")
            return
        size, values = connection.att_mtu - 3, 0
        queue = self.device.host.le_acl_packet_queue or self.device.host.acl_packet_queue
        for start in range(self.notified, self.notified + total, size):
            while queue.pending >= queue.max_in_flight:
                flowed = asyncio.get_running_loop().create_future()
                queue.once("flow", lambda: flowed.done() or flowed.set_result(None))
                await flowed
            await self.device.notify_subscriber(connection, self.stream,
                                                outbound(start, min(size, self.notified + total - start)))
            values += 1
        await queue.drain(connection.handle)
        self.notified += total
        self.ev.emit("notified", bytes=self.notified, mtu=connection.att_mtu, values=values)

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
            if self.subscriber is connection:
                self.subscriber = None
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
            # In the background: other commands (disconnect) are taken while
            # it waits for credits, and a channel that ends mid-send (vigild
            # killed) reports it instead of stopping the command loop.
            asyncio.ensure_future(self.send(self.channel, int(parts[1])))
        elif name == "notify" and len(parts) == 2:
            await self.notify(int(parts[1]))
        elif name == "att-mtu" and len(parts) == 2 and self.device is not None:
            self.device.gatt_server.max_mtu = int(parts[1])
            self.ev.emit("att-mtu", mtu=int(parts[1]))
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
            if self.stream_service is not None:
                self.device.add_service(self.stream_service)
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
    p.add_argument("--stream-service", metavar="UUID", help="serve a GATT service with a notify characteristic (notify N)")
    p.add_argument("--stream-characteristic", metavar="UUID", default="7e1a0002-5d3c-4c1b-9a3e-76a9e0c1b001")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--adv-refresh", type=float, default=1.0)
    a = p.parse_args()
    asyncio.run(L2CAPPeer(a, _peerlib.Events(a.events)).run())


if __name__ == "__main__":
    main()

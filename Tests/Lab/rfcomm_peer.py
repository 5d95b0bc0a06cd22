#!/usr/bin/env python3
"""A Bumble Bluetooth Classic serial device (SPP over RFCOMM) on hci1, for
65-vigild-rfcomm (not a test: the runner only runs files named NN-name).
Needs the lab's dual-mode controllers (`lab.bt_up("dual")`).

Connectable and discoverable over BR/EDR, with an SDP record for the Serial
Port service (0x1101) on --channel. Whatever arrives on a channel is checked
against byte[i] = (i + 7) % 253 and counted ("received" every 64 KiB,
"received-all" at --expect bytes; with --echo the pattern it sends itself,
for a peer that echoes). Events: "ready" (with the controller's
public address, the one BlueZ sees), "connected", "dlc-open",
"dlc-closed", "disconnected". Commands (FIFO):
  send N        write N bytes of the pattern i % 251 (continuing where the
                last send on this channel stopped), in the background;
                "sent" once drained, "send-failed" if the channel ended first
  connect ADDR  as a client: connect to ADDR over BR/EDR, pair (authenticate,
                encrypt), find its Serial Port service by SDP and open a
                channel to it ("dlc-out" with the channel, or "connect-failed")
  close         close the RFCOMM channel (the link stays)
  disconnect    drop the link
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

from bumble import hci, keys, rfcomm  # noqa: E402
from bumble.core import UUID, PhysicalTransport  # noqa: E402
from bumble.device import Device  # noqa: E402

SERIAL_PORT = UUID.from_16_bits(0x1101, "Serial Port")


def inbound(start: int, n: int) -> bytes:
    return bytes((i + 7) % 253 for i in range(start, start + n))


def outbound(start: int, n: int) -> bytes:
    return bytes(i % 251 for i in range(start, start + n))


class SPPPeer:
    def __init__(self, args, events: _peerlib.Events) -> None:
        self.a = args
        self.ev = events
        self.dlc = None
        self.connection = None
        self.received = 0
        self.ok = True
        self.sent = 0
        self.device = None
        self.transport = None

    def on_data(self, data: bytes) -> None:
        expected = (outbound if self.a.echo else inbound)(self.received, len(data))
        if data != expected and self.ok:
            first = next(i for i in range(len(data)) if data[i] != expected[i])
            self.ok = False
            self.ev.emit("mismatch", at=self.received + first, got=data[first], expected=expected[first],
                         hci_drops=_peerlib.transport_drops(self.transport))
        before = self.received
        self.received += len(data)
        if self.received // 65536 != before // 65536:
            self.ev.emit("received", bytes=self.received, ok=self.ok)
        if self.a.expect and before < self.a.expect <= self.received:
            self.ev.emit("received-all", bytes=self.received, ok=self.ok, hci_drops=_peerlib.transport_drops(self.transport))

    def adopt(self, dlc) -> None:
        self.dlc = dlc
        self.sent = 0  # each channel starts both patterns at 0
        self.received = 0
        self.ok = True
        dlc.sink = self.on_data
        dlc.on("close", lambda: self.ev.emit("dlc-closed", received=self.received, ok=self.ok))
        self.ev.emit("dlc-open", channel=self.a.channel)

    async def send(self, dlc, total: int) -> None:
        first = self.sent
        self.sent += total
        step, start = 8192, first
        try:
            for start in range(first, first + total, step):
                if self.dlc is not dlc:
                    raise ConnectionError("the channel closed")
                dlc.write(outbound(start, min(step, first + total - start)))
                await dlc.drain()
        except Exception as exc:  # noqa: BLE001 - reported, the peer goes on
            self.ev.emit("send-failed", error=str(exc) or type(exc).__name__, at=start)
            return
        self.ev.emit("sent", bytes=first + total)

    async def connect_out(self, address: str) -> None:
        try:
            connection = await self.device.connect(address, transport=PhysicalTransport.BR_EDR)
            await connection.authenticate()
            await connection.encrypt()
            channel = await rfcomm.find_rfcomm_channel_with_uuid(connection, SERIAL_PORT)
            if channel is None:
                self.ev.emit("connect-failed", error=f"{address} has no Serial Port service in its SDP records")
                return
            multiplexer = await rfcomm.Client(connection).start()
            self.adopt(await multiplexer.open_dlc(channel))
            self.ev.emit("dlc-out", channel=channel)
        except Exception as exc:  # noqa: BLE001 - reported, the peer goes on
            self.ev.emit("connect-failed", error=str(exc) or type(exc).__name__)

    def on_connection(self, connection) -> None:
        self.connection = connection
        self.ev.emit("connected", address=str(connection.peer_address))

        def on_disconnection(reason) -> None:
            self.connection = None
            self.dlc = None
            self.ev.emit("disconnected", reason=int(reason))
        connection.on("disconnection", on_disconnection)

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        name = parts[0] if parts else ""
        self.ev.emit("command", command=cmd)
        if name == "send" and len(parts) == 2:
            if self.dlc is None:
                self.ev.emit("send-failed", error="no channel")
                return True
            asyncio.ensure_future(self.send(self.dlc, int(parts[1])))
        elif name == "connect" and len(parts) == 2:
            asyncio.ensure_future(self.connect_out(parts[1]))
        elif name == "close" and self.dlc is not None:
            await self.dlc.disconnect()
        elif name == "disconnect" and self.connection is not None:
            await self.connection.disconnect(hci.HCI_REMOTE_USER_TERMINATED_CONNECTION_ERROR)
        elif name == "quit":
            return False
        else:
            self.ev.emit("unknown-command", command=cmd)
        return True

    async def run(self) -> None:
        a = self.a
        transport = self.transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            device = self.device = Device.with_hci(a.name, hci.Address("C0:DE:00:00:00:65"), transport.source, transport.sink)
            device.classic_enabled = True
            # The link key of the pairing through vigild's agent, for the reconnections after it.
            device.keystore = keys.MemoryKeyStore()
            device.le_enabled = False
            device.on("connection", self.on_connection)
            server = rfcomm.Server(device)
            channel = server.listen(self.adopt, a.channel)
            device.sdp_service_records = {0x00010001: rfcomm.make_service_sdp_records(0x00010001, channel, SERIAL_PORT)}
            await device.power_on()
            await device.set_discoverable(True)
            await device.set_connectable(True)
            self.ev.emit("ready", address=str(device.public_address).replace("/P", ""), channel=channel)
            _peerlib.mark_ready(a.ready_file)
            await _peerlib.control_loop(a.control, self.command)
            self.ev.emit("exit", received=self.received, sent=self.sent, ok=self.ok)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _peerlib.add_common_args(p)
    p.add_argument("--transport", default="hci-socket:1")
    p.add_argument("--name", default="Vigil SPP")
    p.add_argument("--channel", type=int, default=3)
    p.add_argument("--expect", type=int, default=0, help="bytes to receive before emitting received-all")
    p.add_argument("--echo", action="store_true", help="check what arrives against the pattern this peer sends")
    a = p.parse_args()
    asyncio.run(SPPPeer(a, _peerlib.Events(a.events)).run())


if __name__ == "__main__":
    main()

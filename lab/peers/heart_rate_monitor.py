#!/usr/bin/env python3
"""Bumble heart-rate monitor peer (BLE peripheral) for the Vigil lab.

GATT: Heart Rate Service 0x180D with
  0x2A37 Heart Rate Measurement  notify   (format chosen with the options)
  0x2A38 Body Sensor Location    read     (--location, default 1 = chest)
  0x2A39 Heart Rate Control Point write   (0x01 resets Energy Expended to 0;
                                           anything else: ATT error 0x80)
Advertises connectable with Flags, the 0x180D service UUID and --name, from
the static random address --address.

Measurement n (0-based, counted over the peer's life) carries
  heart rate      = --rate + (n % 7)
  energy expended = kJ, starts at --energy, +1 per notification (if --energy)
  RR intervals    = --rr values, each round(61440 / hr) + k  (1/1024 s units)
  sensor contact  = --contact (none | yes | no)
Every notification is logged as an event {"event": "notify", "seq", "hr",
"energy", "rr", "contact", "data"} before it is sent, so that a test can
compare what a central received with this log at any moment: nothing reaches
a central before its record is in the log.

Commands (one per line on the --control FIFO; SIGUSR1 = power-off,
SIGUSR2 = power-on):
  power-off          stop advertising, disconnect everyone with reason 0x15
                     ("remote device terminated connection due to power off")
  power-on           advertise again
  disconnect         disconnect everyone (reason 0x13), keep advertising
  stop-notify        stop sending notifications / start-notify: resume
  set-rate N         change the base heart rate
  adv-refresh on|off re-announce advertising every --adv-refresh s (on, the
                     default) or not; event "adv-refresh" once no toggle is
                     under way. A central that connects again and again
                     turns it off once it has found the monitor (see
                     _peerlib.refresh_advertising_loop)
  quit               exit

--no-notify (alias --broken) accepts subscriptions but never notifies: used to
prove that a test notices missing data.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peerlib  # noqa: E402

from bumble import att, data_types, hci  # noqa: E402
from bumble.core import UUID, AdvertisingData  # noqa: E402
from bumble.device import Device  # noqa: E402
from bumble.gatt import Characteristic, CharacteristicValue, Service  # noqa: E402

HRS = 0x180D
HRM = 0x2A37
BSL = 0x2A38
HRCP = 0x2A39

FLAG_UINT16 = 0x01
FLAG_CONTACT_DETECTED = 0x02
FLAG_CONTACT_SUPPORTED = 0x04
FLAG_ENERGY = 0x08
FLAG_RR = 0x10


def encode_measurement(hr: int, fmt: str, contact: str, energy: int | None,
                       rr: list[int]) -> bytes:
    flags = 0
    if fmt == "uint16":
        flags |= FLAG_UINT16
        body = struct.pack("<H", hr)
    else:
        if hr > 255:
            raise ValueError("uint8 format cannot carry heart rate > 255")
        body = struct.pack("<B", hr)
    if contact != "none":
        flags |= FLAG_CONTACT_SUPPORTED
        if contact == "yes":
            flags |= FLAG_CONTACT_DETECTED
    if energy is not None:
        flags |= FLAG_ENERGY
        body += struct.pack("<H", energy & 0xFFFF)
    if rr:
        flags |= FLAG_RR
        body += b"".join(struct.pack("<H", v & 0xFFFF) for v in rr)
    return bytes([flags]) + body


class HeartRateMonitor:
    def __init__(self, args: argparse.Namespace, events: _peerlib.Events) -> None:
        self.args = args
        self.events = events
        self.rate = args.rate
        self.energy = args.energy
        self.seq = 0
        self.notifying = not args.no_notify
        self.powered = True
        self.refreshing = True
        self.refresh_lock = asyncio.Lock()
        self.subscribers: set = set()
        self.device: Device | None = None
        self.wake = asyncio.Event()

        self.hrm = Characteristic(
            UUID.from_16_bits(HRM), Characteristic.Properties.NOTIFY,
            Characteristic.Permissions(0), b"")
        self.bsl = Characteristic(
            UUID.from_16_bits(BSL), Characteristic.Properties.READ,
            Characteristic.READABLE, CharacteristicValue(read=self.on_bsl_read))
        self.hrcp = Characteristic(
            UUID.from_16_bits(HRCP), Characteristic.Properties.WRITE,
            Characteristic.WRITEABLE, CharacteristicValue(write=self.on_control_point))
        self.service = Service(UUID.from_16_bits(HRS), [self.hrm, self.bsl, self.hrcp])
        self.hrm.on("subscription", self.on_subscription)

    # ---- GATT callbacks
    def on_bsl_read(self, connection) -> bytes:
        self.events.emit("read", uuid="2a38", value=self.args.location)
        return bytes([self.args.location])

    def on_control_point(self, connection, value: bytes) -> None:
        if bytes(value) == b"\x01":
            self.energy = 0 if self.energy is not None else None
            self.events.emit("energy-reset")
            return
        self.events.emit("control-point-rejected", value=bytes(value).hex())
        raise att.ATT_Error(0x80, message="control point opcode not supported")

    def on_subscription(self, connection, notify_enabled: bool, indicate_enabled: bool) -> None:
        if notify_enabled:
            self.subscribers.add(connection)
        else:
            self.subscribers.discard(connection)
        self.events.emit("subscription", peer=str(connection.peer_address), notify=notify_enabled)
        self.wake.set()

    def on_connection(self, connection) -> None:
        self.events.emit("connected", peer=str(connection.peer_address))

        def on_disconnection(reason) -> None:
            self.subscribers.discard(connection)
            self.events.emit("disconnected", peer=str(connection.peer_address), reason=int(reason))
            # We restart advertising ourselves (not Bumble's auto_restart), so
            # that a powered-off monitor stays silent.
            if self.powered:
                asyncio.ensure_future(self.advertise())
        connection.on("disconnection", on_disconnection)

    # ---- measurement generator
    def next_measurement(self) -> tuple[bytes, dict]:
        a = self.args
        hr = self.rate + (self.seq % 7)
        rr = [round(61440 / hr) + k for k in range(a.rr)]
        energy = self.energy
        data = encode_measurement(hr, a.format, a.contact, energy, rr)
        info = {"seq": self.seq, "hr": hr, "format": a.format, "contact": a.contact,
                "energy": energy, "rr": rr, "data": data.hex()}
        return data, info

    async def notify_loop(self) -> None:
        a = self.args
        while True:
            if (not self.subscribers or not self.notifying or not self.powered
                    or (a.count and self.seq >= a.count)):
                self.wake.clear()
                await self.wake.wait()
                continue
            data, info = self.next_measurement()
            # Logged first: a central may see the value before this coroutine
            # resumes, and a test compares what it saw with this log.
            self.events.emit("notify", **info)
            await self.device.notify_subscribers(self.hrm, data)
            self.seq += 1
            if self.energy is not None:
                self.energy = (self.energy + 1) & 0xFFFF
            if a.count and self.seq >= a.count:
                self.events.emit("count-reached", count=a.count)
            await asyncio.sleep(a.interval)

    # ---- advertising / power
    def advertising_data(self) -> bytes:
        return bytes(AdvertisingData([
            data_types.Flags(AdvertisingData.Flags.LE_GENERAL_DISCOVERABLE_MODE
                             | AdvertisingData.Flags.BR_EDR_NOT_SUPPORTED),
            data_types.CompleteListOf16BitServiceUUIDs([UUID.from_16_bits(HRS)]),
            data_types.CompleteLocalName(self.args.name),
        ]))

    async def advertise(self) -> None:
        if self.device.is_advertising:
            return
        await self.device.start_advertising(
            auto_restart=False, advertising_data=self.advertising_data(),
            advertising_interval_min=self.args.adv_interval,
            advertising_interval_max=self.args.adv_interval)
        self.events.emit("advertising", name=self.args.name, address=self.args.address)

    async def disconnect_all(self, reason: int) -> None:
        for conn in list(self.device.connections.values()):
            try:
                await conn.disconnect(reason)
            except Exception as exc:  # already gone
                self.events.emit("disconnect-failed", error=str(exc))

    async def command(self, cmd: str) -> bool:
        parts = cmd.split()
        name = parts[0] if parts else ""
        self.events.emit("command", command=cmd)
        if name == "power-off":
            self.powered = False
            if self.device.is_advertising:
                try:
                    await self.device.stop_advertising()
                except hci.HCI_Error as exc:
                    self.events.emit("stop-advertising-failed", error=str(exc))
            await self.disconnect_all(hci.HCI_REMOTE_DEVICE_TERMINATED_CONNECTION_DUE_TO_POWER_OFF_ERROR)
            self.events.emit("powered", on=False)
        elif name == "power-on":
            self.powered = True
            await self.advertise()
            self.events.emit("powered", on=True)
            self.wake.set()
        elif name == "disconnect":
            await self.disconnect_all(hci.HCI_REMOTE_USER_TERMINATED_CONNECTION_ERROR)
        elif name == "stop-notify":
            self.notifying = False
        elif name == "start-notify":
            self.notifying = True
            self.wake.set()
        elif name == "set-rate" and len(parts) == 2:
            self.rate = int(parts[1])
        elif name == "adv-refresh" and len(parts) == 2 and parts[1] in ("on", "off"):
            self.refreshing = parts[1] == "on"
            async with self.refresh_lock:  # a toggle under way ends first
                pass
            self.events.emit("adv-refresh", on=self.refreshing)
        elif name == "quit":
            return False
        else:
            self.events.emit("unknown-command", command=cmd)
        return True

    async def run(self) -> None:
        a = self.args
        transport = await _peerlib.open_transport_retry(a.transport)
        async with transport:
            self.device = Device.with_hci(a.name, hci.Address(a.address), transport.source,
                                          transport.sink)
            self.device.add_service(self.service)
            self.device.on("connection", self.on_connection)
            await self.device.power_on()
            await self.advertise()
            stop = asyncio.Event()
            _peerlib.install_signal_commands(
                {signal.SIGUSR1: "power-off", signal.SIGUSR2: "power-on"}, self.command, stop)
            _peerlib.mark_ready(a.ready_file)
            tasks = [asyncio.ensure_future(self.notify_loop()),
                     asyncio.ensure_future(_peerlib.refresh_advertising_loop(
                         self.device, a.adv_refresh, lambda: self.powered and self.refreshing,
                         self.refresh_lock)),
                     asyncio.ensure_future(_peerlib.control_loop(a.control, self.command)),
                     asyncio.ensure_future(stop.wait())]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in pending:
                t.cancel()
            for t in done:
                if t.exception():
                    raise t.exception()
            self.events.emit("exit", sent=self.seq)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", default="hci-socket:1", help="Bumble transport (default hci-socket:1)")
    p.add_argument("--name", default="Vigil HRM", help="advertised and GAP name")
    p.add_argument("--address", default="C0:DE:00:00:00:01", help="static random address")
    p.add_argument("--format", choices=["uint8", "uint16"], default="uint8")
    p.add_argument("--rate", type=int, default=60, help="base heart rate (bpm)")
    p.add_argument("--contact", choices=["none", "yes", "no"], default="none",
                   help="sensor contact: not supported / detected / not detected")
    p.add_argument("--energy", type=int, default=None, help="include Energy Expended, starting here (kJ)")
    p.add_argument("--rr", type=int, default=0, help="RR intervals per notification (0 = none)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between notifications")
    p.add_argument("--count", type=int, default=0, help="stop notifying after N (0 = never)")
    p.add_argument("--location", type=int, default=1, help="Body Sensor Location value (1 = chest)")
    p.add_argument("--adv-interval", type=float, default=100.0, help="advertising interval (ms)")
    p.add_argument("--adv-refresh", type=float, default=1.0,
                   help="re-announce advertising every SECS for btvirt's one-shot reports (0 = off,"
                        " for a real radio)")
    p.add_argument("--no-notify", "--broken", dest="no_notify", action="store_true",
                   help="never send notifications (a broken sensor)")
    _peerlib.add_common_args(p)
    args = p.parse_args()
    if args.format == "uint8" and args.rate + 6 > 255:
        _peerlib.die("--rate too high for uint8 format (rate + 6 must be <= 255)")
    events = _peerlib.Events(args.events)
    try:
        asyncio.run(HeartRateMonitor(args, events).run())
    except OSError as exc:
        _peerlib.die(str(exc))


if __name__ == "__main__":
    main()

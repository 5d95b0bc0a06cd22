"""Shared plumbing for the lab's scripted peers (run in the lab venv).

Every peer takes the same housekeeping options:

  --ready-file PATH   created once the peer is up (advertising, open, ...);
                      lab_peer_start / vigillab.Peer wait for it
  --events PATH       JSON lines of what the peer did (also printed to stdout)
  --control PATH      a FIFO the peer creates and reads commands from, one per
                      line (each peer documents its commands)

Events are machine-readable so a test can compare what it observed with
what the peer really sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import struct
import sys
import time
from typing import Any, Awaitable, Callable


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ready-file", help="create this file once ready")
    parser.add_argument("--events", help="append JSON-line events to this file")
    parser.add_argument("--control", help="create a FIFO here and read commands from it")


class Events:
    """JSON-lines event sink: stdout plus, optionally, a file."""

    def __init__(self, path: str | None) -> None:
        self._file = open(path, "a", buffering=1) if path else None

    def emit(self, event: str, **fields: Any) -> None:
        rec = {"event": event, "t": round(time.time(), 6), **fields}
        line = json.dumps(rec, sort_keys=False)
        print(line, flush=True)
        if self._file:
            self._file.write(line + "\n")
            self._file.flush()


def mark_ready(path: str | None) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)


# An HCI user channel has no controller-to-host flow control: btvirt writes
# every packet into the socket, and when the peer's Python is slow (TCG, a GC)
# a burst overflows the default receive buffer (~208 KiB of skb truesize, about
# 64 KiB of ACL fragments), the kernel drops a fragment silently and Bumble's
# L2CAP reassembly drops the whole PDU: lab 65 lost one 2000-byte RFCOMM frame
# that way, twice. 16 MiB holds any burst a lab test sends.
RECEIVE_BUFFER = 16 << 20
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_MEMINFO = 55  # <asm-generic/socket.h>; SK_MEMINFO_DROPS is its ninth u32


def grow_receive_buffer(transport) -> None:
    """Sets an HCI socket transport's receive buffer to RECEIVE_BUFFER (root:
    past net.core.rmem_max); other transports are left as they are."""
    sock = getattr(transport, "socket", None)
    if not isinstance(sock, socket.socket):
        return
    # Not root: SO_RCVBUF, capped at net.core.rmem_max. Neither failing may
    # fail the open (open_transport_retry would report it as a busy controller).
    for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, RECEIVE_BUFFER)
            return
        except OSError:
            continue


def transport_drops(transport) -> int | None:
    """Packets the kernel dropped at the HCI socket's receive queue (SO_MEMINFO), or None."""
    sock = getattr(transport, "socket", None)
    if not isinstance(sock, socket.socket):
        return None
    try:
        return struct.unpack("9I", sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 36))[8]
    except (OSError, struct.error):
        return None


async def open_transport_retry(spec: str, timeout: float = 30.0):
    """Open a Bumble transport; retry while the controller is busy.

    An HCI user channel (hci-socket:N) can only be bound while the kernel is
    not using the controller (EBUSY while it is powered or still being set up
    after a previous user let go), so retry for a while.
    """
    from bumble.transport import open_transport

    deadline = time.monotonic() + timeout
    while True:
        try:
            transport = await open_transport(spec)
            grow_receive_buffer(transport)
            return transport
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENODEV, errno.EAGAIN) or time.monotonic() > deadline:
                raise OSError(exc.errno, f"cannot open transport {spec}: {exc.strerror}"
                              " (is the controller powered or used by bluetoothd?"
                              " see docs/lab.md)") from exc
            await asyncio.sleep(0.2)


async def control_loop(path: str | None, handle: Callable[[str], Awaitable[bool]]) -> None:
    """Read commands from a FIFO at `path`; `handle` returns False to stop."""
    if not path:
        await asyncio.Event().wait()
        return
    if os.path.exists(path):
        os.unlink(path)
    os.mkfifo(path)
    loop = asyncio.get_running_loop()
    # O_RDWR keeps the FIFO open even when no writer is attached.
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    buf = b""
    queue: asyncio.Queue[str] = asyncio.Queue()

    def on_readable() -> None:
        nonlocal buf
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                queue.put_nowait(line.decode(errors="replace").strip())

    loop.add_reader(fd, on_readable)
    try:
        while True:
            cmd = await queue.get()
            if not await handle(cmd):
                return
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def install_signal_commands(mapping: dict[int, str], handle: Callable[[str], Awaitable[bool]],
                            stop: asyncio.Event) -> None:
    """Map signals to control commands (e.g. SIGUSR1 -> 'power-off')."""
    loop = asyncio.get_running_loop()

    def make(cmd: str):
        def cb() -> None:
            async def run() -> None:
                if not await handle(cmd):
                    stop.set()
            asyncio.ensure_future(run())
        return cb

    for sig, cmd in mapping.items():
        loop.add_signal_handler(sig, make(cmd))
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)


async def refresh_advertising_loop(device, interval: float, active: Callable[[], bool],
                                   lock: "asyncio.Lock | None" = None) -> None:
    """Re-announce a Bumble device's legacy advertising every `interval` s.

    The lab's emulated controllers (btvirt) send an advertising report only
    at the moment advertising or scanning is enabled, never periodically.
    The kernel drops a report that arrives while it is still switching to
    discovery, and then a scanner only sees the device at BlueZ's next scan
    restart (every ~10 s).  Toggling advertising off and on makes the peer
    behave like a real periodic advertiser.  Use 0 with a real radio.

    The cost: for the few milliseconds between off and on the peer is not
    connectable, and btvirt fails an LE Create Connection that lands there
    at once (0x3e), where a real controller would keep initiating. The
    guest's kernel (Debian 6.1) never finishes such a connection: BlueZ's
    Connect goes unanswered and hci0 connects to nothing until btvirt is
    laid out again (btvirt also refuses the cancel). A peer that a central
    connects to many times should stop refreshing once it has been found
    (`active` false); `lock` is held while a toggle is under way, so a
    caller can wait for one in flight to end.
    """
    if interval <= 0:
        await asyncio.Event().wait()
        return
    from bumble import hci

    while True:
        await asyncio.sleep(interval)  # a period, not a wait for a condition
        if not active() or device.connections or not getattr(device, "legacy_advertiser", None):
            continue
        async with lock or contextlib.nullcontext():
            for enable in (0, 1):
                try:
                    await device.send_sync_command_raw(
                        hci.HCI_LE_Set_Advertising_Enable_Command(advertising_enable=enable))
                except Exception:  # a connection raced us: Bumble handles it
                    pass


def die(msg: str, code: int = 1) -> None:
    print(f"{os.path.basename(sys.argv[0])}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)

#!/usr/bin/env python3
"""Serial accessory peer: runs on the gadget side (/dev/ttyGSn) of a lab USB
CDC-ACM gadget (or on any tty / pty end) and behaves like a device.

Modes:
  records  write line records "seq,timestamp,value\\n" at --rate per second,
           --count of them (0 = forever); value = (seq * 37) % 1000 / 10,
           printed with one decimal; timestamp = seconds since start (6 dp).
  echo     write back everything read, until EOF/EIO or --count bytes.
  bulk     throughput: write --bytes bytes of the pattern byte[i] = i % 251
           as fast as the port takes them, then report bytes/s.
  sink     throughput the other way: read --bytes bytes, check the same
           pattern, report bytes/s.
  hrm      a serial heart-rate sensor (vigil-hrm-bridge --serial-protocol):
           writes the lines of a fixed sequence (HRM_SEQUENCE, cycled), in
           the bridge's line format "hr=72 contact=1 energy=105 rr=812,799\n",
           but only on command: "send N" writes the next N lines, --rate per
           second, then emits "burst-done".  Each line written is logged as
           an "hrm" event: seq, line, and either expected (what a decoder of
           the 0x2A37 value must find: hr, format, contact, energy, rr, as
           vigillab.decode_heart_rate returns it) or malformed=true (a line
           the bridge must reject).

Events (JSON lines, --events): "open", "record" (records mode, every one),
"done" with counts and bytes_per_s, "eof"/"error" when the port goes away.
A "record" or "hrm" line is logged *before* its bytes are written, so the
host side can never hold bytes the log does not show yet (a test compares
the two while they arrive); "done" and "burst-done" follow the last write.
Commands on --control: "pause", "resume", "quit" (and "send N" in hrm mode).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import termios
import time
import tty

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peerlib  # noqa: E402


def pattern(n: int, start: int = 0) -> bytes:
    return bytes((i % 251) for i in range(start, start + n))


# hrm mode: both rate formats, the three contact states, energy present,
# absent and at its limits, 0-4 RR intervals, and one malformed line.
HRM_SEQUENCE = [
    "hr=72 contact=1 energy=105 rr=812,799",
    "hr=75 contact=1 energy=106",
    "hr=300 contact=0 rr=200,201,202",
    "hr=64",
    "hr=bad contact=1",
    "hr=255 energy=65535 rr=1024",
    "hr=256 contact=1 energy=0 rr=60000,1,2,3",
    "hr=61 contact=0 energy=7",
]


def hrm_expected(line: str) -> dict | None:
    """What decode_heart_rate must return for the bridge's value of `line`; None: malformed."""
    fields = dict(f.split("=", 1) for f in line.split())
    try:
        hr = int(fields["hr"])
    except ValueError:
        return None
    contact = {"1": "yes", "0": "no"}.get(fields.get("contact", ""), "none")
    energy = int(fields["energy"]) if "energy" in fields else None
    rr = [int(v) for v in fields["rr"].split(",")] if "rr" in fields else []
    return {"hr": hr, "format": "uint16" if hr > 255 else "uint8", "contact": contact, "energy": energy, "rr": rr}


def record(seq: int, t: float) -> bytes:
    value = (seq * 37) % 1000 / 10
    return f"{seq},{t:.6f},{value:.1f}\n".encode()


class Accessory:
    def __init__(self, args, events: _peerlib.Events) -> None:
        self.a = args
        self.ev = events
        self.paused = False
        self.ctl = None
        if args.control:
            if os.path.exists(args.control):
                os.unlink(args.control)
            os.mkfifo(args.control)
            self.ctl = os.open(args.control, os.O_RDWR | os.O_NONBLOCK)
        self.ctl_buf = b""
        self.budget = 0  # hrm mode: lines still to send

    def poll_control(self) -> bool:
        """Handle pending commands; False = quit."""
        if self.ctl is None:
            return True
        try:
            self.ctl_buf += os.read(self.ctl, 4096)
        except BlockingIOError:
            pass
        while b"\n" in self.ctl_buf:
            line, self.ctl_buf = self.ctl_buf.split(b"\n", 1)
            cmd = line.decode().strip()
            self.ev.emit("command", command=cmd)
            if cmd == "pause":
                self.paused = True
            elif cmd == "resume":
                self.paused = False
            elif cmd == "quit":
                return False
            elif cmd.startswith("send "):
                self.budget += int(cmd.split()[1])
        return True

    def open(self) -> int:
        fd = os.open(self.a.device, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(fd, termios.TCSANOW)
        attrs = termios.tcgetattr(fd)
        # What tty.setraw leaves on and cfmakeraw clears, plus software flow
        # control both ways: any byte value must pass untouched.
        attrs[0] &= ~(termios.IGNBRK | termios.PARMRK | termios.INLCR | termios.IGNCR | termios.IXOFF | termios.IXANY)
        attrs[6][termios.VMIN] = 1
        attrs[6][termios.VTIME] = 0
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        self.ev.emit("open", device=self.a.device, mode=self.a.mode)
        return fd

    def wait_fds(self, fd: int, write: bool, timeout: float = 0.5) -> bool:
        rl = [self.ctl] if self.ctl is not None else []
        wl = [fd] if write else []
        if not write:
            rl.append(fd)
        r, w, _ = select.select(rl, wl, [], timeout)
        return fd in r or fd in w

    def write_all(self, fd: int, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            if not self.poll_control():
                return False
            if self.paused or not self.wait_fds(fd, True):
                continue
            n = os.write(fd, view[:4096])
            view = view[n:]
        return True

    def run_records(self, fd: int) -> None:
        a = self.a
        t0 = time.monotonic()
        seq = 0
        period = 1.0 / a.rate if a.rate > 0 else 0
        while not a.count or seq < a.count:
            due = t0 + seq * period
            while True:
                if not self.poll_control():
                    return
                now = time.monotonic()
                if now >= due and not self.paused:
                    break
                time.sleep(min(0.05, max(0.0, due - now)) if not self.paused else 0.05)
            line = record(seq, time.monotonic() - t0)
            self.ev.emit("record", seq=seq, line=line.decode().strip())  # logged before written
            if not self.write_all(fd, line):
                return
            seq += 1
        self.ev.emit("done", mode="records", count=seq)

    def run_hrm(self, fd: int) -> None:
        period = 1.0 / self.a.rate if self.a.rate > 0 else 0
        seq = 0
        while True:
            if not self.poll_control():
                return
            if self.budget <= 0 or self.paused:
                time.sleep(0.05)
                continue
            text = HRM_SEQUENCE[seq % len(HRM_SEQUENCE)]
            expected = hrm_expected(text)
            if expected is None:   # logged before written, as the records
                self.ev.emit("hrm", seq=seq, line=text, malformed=True)
            else:
                self.ev.emit("hrm", seq=seq, line=text, expected=expected)
            if not self.write_all(fd, (text + "\n").encode()):
                return
            seq += 1
            self.budget -= 1
            if self.budget == 0:
                self.ev.emit("burst-done", seq=seq - 1)
            deadline = time.monotonic() + period
            while time.monotonic() < deadline:
                if not self.poll_control():
                    return
                time.sleep(0.02)

    def run_echo(self, fd: int) -> None:
        total = 0
        while not self.a.count or total < self.a.count:
            if not self.poll_control():
                return
            if not self.wait_fds(fd, False):
                continue
            data = os.read(fd, 4096)
            if not data:
                self.ev.emit("eof", echoed=total)
                return
            if not self.write_all(fd, data):
                return
            total += len(data)
        self.ev.emit("done", mode="echo", bytes=total)

    def run_bulk(self, fd: int) -> None:
        n = self.a.bytes
        t0 = time.monotonic()
        sent = 0
        chunk = 4096
        while sent < n:
            if not self.poll_control():
                return
            if self.paused or not self.wait_fds(fd, True):
                continue
            k = os.write(fd, pattern(min(chunk, n - sent), sent))
            sent += k
        termios.tcdrain(fd)
        dt = time.monotonic() - t0
        self.ev.emit("done", mode="bulk", bytes=sent, seconds=round(dt, 6),
                     bytes_per_s=round(sent / dt if dt else 0))

    def run_sink(self, fd: int) -> None:
        n = self.a.bytes
        got = 0
        t0 = None
        bad = 0
        while got < n:
            if not self.poll_control():
                return
            if not self.wait_fds(fd, False):
                continue
            data = os.read(fd, 65536)
            if not data:
                self.ev.emit("eof", received=got)
                return
            if t0 is None:
                t0 = time.monotonic()
            if data != pattern(len(data), got):
                bad += 1
            got += len(data)
        dt = time.monotonic() - (t0 or time.monotonic())
        self.ev.emit("done", mode="sink", bytes=got, pattern_errors=bad, seconds=round(dt, 6),
                     bytes_per_s=round(got / dt if dt else 0))

    def run(self) -> int:
        fd = self.open()
        _peerlib.mark_ready(self.a.ready_file)
        try:
            getattr(self, f"run_{self.a.mode}")(fd)
        except OSError as exc:
            # Unplugged: the gadget side reports EIO / hang-up.
            self.ev.emit("error", error=exc.strerror, errno=exc.errno)
            return 1
        finally:
            os.close(fd)
        return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True, help="tty to act on, e.g. /dev/ttyGS0")
    p.add_argument("--mode", choices=["records", "echo", "bulk", "sink", "hrm"], default="records")
    p.add_argument("--rate", type=float, default=10.0, help="records (records mode) or lines (hrm mode) per second")
    p.add_argument("--count", type=int, default=0, help="records (records) or bytes (echo); 0 = forever")
    p.add_argument("--bytes", type=int, default=1 << 20, help="bytes to send/receive (bulk, sink)")
    _peerlib.add_common_args(p)
    args = p.parse_args()
    sys.exit(Accessory(args, _peerlib.Events(args.events)).run())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Serial line control through vigild on a real USB CDC-ACM link (issue 29):
the host's cdc_acm driver turns DTR/RTS, breaks and the line coding into
control requests on the bus, which usbmon shows as the gadget receives
them (f_acm takes SET_CONTROL_LINE_STATE but tells its tty nothing, so the
wire is where the device side sees them); the gadget's DSR/DCD follow its
own tty being opened (f_acm's SERIAL_STATE notifications).

1. a session's lines read through `sessionLines` (DTR and RTS up after the open);
2. a DTR/RTS reset pulse: SET_CONTROL_LINE_STATE 0 then 3 on the wire;
3. a break: SEND_BREAK 0xffff then 0 on the wire, or `notSupported` when the
   driver refuses it (cdc_acm does without the ACM break capability);
4. RS-485 on cdc_acm: `notSupported`;
5. `watchSessionLines`: the device opening and closing its tty (DSR and DCD
   up, then down) pushed as `sessionLinesChanged`;
6. `vigilctl accessory open --baud 250000 --no-hupcl --reset-pulse 150`:
   SET_LINE_CODING with 250000 bit/s (BOTHER), the pulse, and no drop of
   DTR at the close (HUPCL cleared); then a session with `hupcl` does drop it;
7. an app watching its lines with `wake`, frozen: the device opening its tty
   wakes it with `session.lines` (DSR and DCD up).
"""
# lab-timeout: 240
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import VigilError, log  # noqa: E402

SERIAL = "VL-LINES-01"
WATCHER_APP = "org.vigil.lab.linewatcher"
PROTOCOL = "org.vigil.sensor"


class UsbMon:
    """The control requests (bmRequestType 0x21) sent to one device, from usbmon's text interface."""

    def __init__(self, bus: int, device: int) -> None:
        subprocess.run(["modprobe", "usbmon"], check=True)
        if not os.path.isdir("/sys/kernel/debug/usb"):
            subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"], check=False)
        self.tag = f"Co:{bus}:{device:03d}:0"
        self.requests: list[tuple[str, str, str]] = []  # (bRequest, wValue, data words)
        self.lock = threading.Lock()
        self.file = open(f"/sys/kernel/debug/usb/usbmon/{bus}u")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.file:
            words = line.split()
            # URB TIME S Co:B:DDD:0 s 21 22 0003 0000 0000 0 [= data]
            if len(words) > 10 and words[2] == "S" and words[3] == self.tag and words[4] == "s" and words[5] == "21":
                data = "".join(words[words.index("=") + 1:]) if "=" in words else ""
                with self.lock:
                    self.requests.append((words[6], words[7], data))

    def seen(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return list(self.requests)

    def wait_for(self, wanted: list[tuple[str, str]], since: int, timeout: float, what: str) -> list:
        """Waits until (bRequest, wValue) pairs appear in this order after index `since`."""
        def found():
            pairs = [(r, v) for r, v, _ in self.seen()[since:]]
            i = 0
            for pair in pairs:
                if i < len(wanted) and pair == wanted[i]:
                    i += 1
            return i == len(wanted)
        lab.wait_for(found, timeout, f"{what}: {wanted} on the wire (seen {self.seen()[since:]})")
        return self.seen()[since:]


lab.udev_up()
lab.usb_init(2)
rules = acc.install_udev_rules()
daemon = acc.Daemon("54", apps={
    WATCHER_APP: {"declares": ["org.vigil.sensor"],
                  "args": ["--accessory-protocol", "org.vigil.sensor", "--watch-lines", "wake"]},
})
ctl = daemon.control
host, dev = lab.usb_plug("lines", acc.VID, acc.PID, "Vigil Lab", "Vigil Lines", SERIAL)
usb_device = os.path.realpath(f"/sys/class/tty/{os.path.basename(host)}/device/..")  # the interface's parent


def sysfs_number(name: str) -> int:
    with open(os.path.join(usb_device, name)) as f:
        return int(f.read().strip())


usbmon = UsbMon(sysfs_number("busnum"), sysfs_number("devnum"))
daemon.wait(lambda: any(a["serialNumber"] == SERIAL for a in daemon.accessories()), 30, f"vigild to list {SERIAL}")
connection = next(a for a in daemon.accessories() if a["serialNumber"] == SERIAL)["connectionID"]


def refused(code: str, type: str, **members) -> str:
    try:
        ctl.request(type, **members)
    except VigilError as error:
        if error.code != code:
            raise LabError(f"{type}: want {code}, got {error.code}: {error.message}") from None
        return error.message
    raise LabError(f"{type} {members}: want {code}, it succeeded")


# ------------------------------------------------------------- 1. lines ----
session = ctl.open_session(connection, PROTOCOL)["session"]
lines = ctl.request("sessionLines", session=session)["lines"]
if not (lines["dtr"] and lines["rts"]):
    raise LabError(f"DTR and RTS should be up after the open: {lines}")
log(f"1. lines after the open: {lines}")

# ------------------------------------------------------- 2. reset pulse ----
mark = len(usbmon.seen())
ctl.request("sessionLines", session=session, dtr=False, rts=False)
time.sleep(0.15)
after = ctl.request("sessionLines", session=session, dtr=True, rts=True)["lines"]
usbmon.wait_for([("22", "0000"), ("22", "0003")], mark, 10, "the reset pulse")
pulse = [value for request, value, _ in usbmon.seen()[mark:] if request == "22"]
if pulse != ["0000", "0003"]:  # both lines at once (TIOCMSET), never one before the other
    raise LabError(f"the pulse should be two SET_CONTROL_LINE_STATE requests, 0000 and 0003: {pulse}")
if not (after["dtr"] and after["rts"]):
    raise LabError(f"DTR and RTS should be up after the pulse: {after}")
log("2. reset pulse: SET_CONTROL_LINE_STATE 0000 then 0003 seen on the wire")

# -------------------------------------------------------------- 3. break ----
mark = len(usbmon.seen())
started = time.monotonic()
try:
    ctl.request("sendBreak", session=session, milliseconds=200)
    took = time.monotonic() - started
    usbmon.wait_for([("23", "ffff"), ("23", "0000")], mark, 10, "the break")
    if took < 0.2:
        raise LabError(f"the break's reply came after {took:.3f} s, before its end")
    log(f"3. break: SEND_BREAK ffff then 0000 on the wire; reply after {took:.3f} s")
except VigilError as error:
    if error.code != "notSupported":
        raise
    log(f"3. break: notSupported by this driver ({error.message})")

# ------------------------------------------------------------- 4. RS-485 ----
log("4. RS-485: " + refused("notSupported", "sessionRS485", session=session, rs485={"enabled": True}))

# ------------------------------------------------- 5. watched input lines ----
now = ctl.request("watchSessionLines", session=session, enabled=True, intervalMilliseconds=20)["lines"]
log(f"5. watching; lines now {now}")
device_fd = lab.open_raw(dev)
push = ctl.next_of(("sessionLinesChanged",), timeout=20)
if push is None or not (push["lines"]["dsr"] and push["lines"]["dcd"]):
    raise LabError(f"no sessionLinesChanged with DSR and DCD up after the device opened its tty: {push}\n"
                   f"{daemon.diagnostics()}")
log(f"   device opened its tty: {push['lines']} changed {push['changed']}")
os.close(device_fd)
push = ctl.next_of(("sessionLinesChanged",), timeout=20)
if push is None or push["lines"]["dsr"] or push["lines"]["dcd"]:
    raise LabError(f"no sessionLinesChanged with DSR and DCD down after the device closed its tty: {push}")
log(f"   device closed its tty: {push['lines']} changed {push['changed']}")
ctl.close_session(session)

# --------------------------------------------- 6. vigilctl, BOTHER, HUPCL ----
time.sleep(0.5)
mark = len(usbmon.seen())
p = subprocess.run([acc.VIGILCTL, "accessory", "open", str(connection), "--protocol", PROTOCOL, "--baud", "250000",
                    "--no-hupcl", "--reset-pulse", "150", "--socket", daemon.socket],
                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
if p.returncode != 0:
    raise LabError(f"vigilctl accessory open failed ({p.returncode}): {p.stderr}")
if "reset pulse of 150 ms sent" not in p.stderr:
    raise LabError(f"vigilctl did not report the pulse: {p.stderr}")
seen = usbmon.wait_for([("20", "0000"), ("22", "0000"), ("22", "0003")], mark, 10, "vigilctl's open and pulse")
coding = [data for request, _, data in seen if request == "20"]
if not any(data.startswith("90d00300") for data in coding):  # 250000 = 0x0003d090, little-endian
    raise LabError(f"no SET_LINE_CODING with 250000 bit/s: {coding}")
time.sleep(1.0)  # the session closed with vigilctl's connection
states = [value for request, value, _ in usbmon.seen()[mark:] if request == "22"]
if states[-1] != "0003":
    raise LabError(f"with --no-hupcl the close dropped DTR/RTS: control line states {states}")
log(f"6. vigilctl: SET_LINE_CODING 250000 ({coding[-1]}), pulse, and DTR kept up at the close: {states}")

mark = len(usbmon.seen())
session = ctl.open_session(connection, PROTOCOL, line_settings="57600 8N1 hupcl")["session"]
ctl.close_session(session)
usbmon.wait_for([("22", "0000")], mark, 10, "the close with HUPCL dropping DTR")
log("   with hupcl the close drops DTR and RTS (0000)")

# ------------------------------------------- 7. a line change wakes an app ----
ctl.app_action("launch", WATCHER_APP)
watching = daemon.wait(lambda: daemon.records_of(WATCHER_APP, "watchingLines"), 60, "the app watching its lines")[0]
ctl.app_action("background", WATCHER_APP)
daemon.wait_state(WATCHER_APP, "suspended")
log(f"7. app suspended, watching its lines (then {watching['lines']})")
device_fd = lab.open_raw(dev)
event = daemon.wait(lambda: daemon.events(WATCHER_APP, "session.lines"), 30, "session.lines in the app")[0]
if not (event["attributes"]["dsr"] and event["attributes"]["dcd"]):
    raise LabError(f"session.lines without DSR and DCD up: {event}")
wakes = [d for d in daemon.decisions(WATCHER_APP, "wake") if "session.lines" in d["reason"]]
if not wakes:
    raise LabError(f"the app was not woken by session.lines: {daemon.decisions(WATCHER_APP)}")
os.close(device_fd)
log(f"   woken by session.lines: {event['attributes']} ({wakes[0]['reason']})")

daemon.stop()
rules.remove()
log("PASS")

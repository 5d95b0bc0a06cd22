#!/usr/bin/env python3
"""vigild with a real USB HID gadget (configfs `hid` function on dummy_hcd,
usbhid and hidraw on the host side; issue 29, lab tier):

1. the hot-plugged hidraw node is an accessory (udev subsystem `hidraw`,
   marked by a udev rule): kind "hid", its USB identity, the rule's
   protocols, no line settings;
2. input reports the gadget sends while the app is frozen wake it and all
   arrive: every report whole (8 bytes), in order, none lost or doubled,
   in `session.data` events framed u16le;
3. `vigilctl accessory hid`: the report descriptor is the gadget's; an
   output report and a feature report reach the gadget byte-exact (the
   function runs without an OUT endpoint, so both come as SET_REPORT on
   /dev/hidgN); a feature report is read back (Linux 6.1's f_hid answers
   GET_REPORT with zeros of the report length); `accessory open` refuses it;
4. unplug: the app's session closes with willReopen; replug: reopened, and
   reports flow again;
5. a figure, not a pass mark: the gadget sends 2000 reports unpaced while a
   direct reader (its own open file of the node) and vigild (the frozen
   app's session) read the same reports; each path's loss is printed, and
   what reached the app must be whole, in order, none doubled.

HID has no flow control: the host polls the gadget whatever its readers do,
and hidraw queues 64 reports per open file, dropping the newest beyond
that. dummy_hcd under TCG sends far faster than any real sensor, so the
gadget sends in bursts of 32 and waits for vigild to have read them
(`bytesIn`) before the next: the test proves vigild keeps every report
whole while the app is frozen, not that a reader can outrun the kernel.
"""
# lab-timeout: 600
import os
import select
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

sys.path.insert(0, os.path.join(acc.REPO, "clients", "python"))
from vigil import split_records  # noqa: E402

APP = "org.vigil.lab.hidapp"
PROTOCOLS = ["org.vigil.hidsensor", "org.vigil.hidconsole"]
VID, PID = 0x1209, 0x0002
SERIAL = "VL-HID-0001"
MANUFACTURER = "Vigil Lab"
PRODUCT = "Vigil HID Sensor"
GADGET = "hidsensor"
GADGETS = "/sys/kernel/config/usb_gadget"
REPORT = 8
# Vendor page: 8-byte input, output and feature reports, no report ids.
DESCRIPTOR = bytes.fromhex(
    "0600ff" "0901" "a101" "1500" "26ff00" "7508" "9508"
    "0902" "8102" "0903" "9102" "0904" "b102" "c0")
MATCHER = (f'SUBSYSTEM=="hidraw", SUBSYSTEMS=="usb", ATTRS{{idVendor}}=="{VID:04x}", '
           f'ATTRS{{idProduct}}=="{PID:04x}", ENV{{VIGIL_ACCESSORY}}="1", '
           f'ENV{{VIGIL_PROTOCOLS}}="{" ".join(PROTOCOLS)}"\n')


def report(i: int) -> bytes:
    return struct.pack("<I", i) + bytes(((i * 7 + k) & 0xff) for k in range(4))


def write_file(path: str, value: "str | bytes") -> None:
    with open(path, "wb") as f:
        f.write(value if isinstance(value, bytes) else value.encode())


def read_file(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


class HIDGadget:
    """A HID gadget: `plug` binds it to a free dummy UDC (the host sees a USB
    HID device, usbhid binds, a hidraw node appears), `unplug` unbinds;
    `device` is the gadget side, /dev/hidgN."""

    def __init__(self) -> None:
        subprocess.run(["modprobe", "usb_f_hid"], check=True)
        subprocess.run(["modprobe", "usbhid"], check=False)
        subprocess.run(["modprobe", "hid_generic"], check=False)
        self.g = f"{GADGETS}/{GADGET}"
        g = self.g
        os.makedirs(g)
        write_file(f"{g}/idVendor", f"0x{VID:04x}")
        write_file(f"{g}/idProduct", f"0x{PID:04x}")
        write_file(f"{g}/bcdUSB", "0x0200")
        write_file(f"{g}/bcdDevice", "0x0100")
        os.makedirs(f"{g}/strings/0x409")
        write_file(f"{g}/strings/0x409/manufacturer", MANUFACTURER)
        write_file(f"{g}/strings/0x409/product", PRODUCT)
        write_file(f"{g}/strings/0x409/serialnumber", SERIAL)
        os.makedirs(f"{g}/configs/c.1/strings/0x409")
        write_file(f"{g}/configs/c.1/strings/0x409/configuration", "HID")
        write_file(f"{g}/configs/c.1/MaxPower", "100")
        f = f"{g}/functions/hid.{GADGET}"
        os.makedirs(f)
        write_file(f"{f}/protocol", "0")
        write_file(f"{f}/subclass", "0")
        write_file(f"{f}/report_length", str(REPORT))
        write_file(f"{f}/report_desc", DESCRIPTOR)
        # Output and feature reports both as SET_REPORT, read on /dev/hidgN.
        write_file(f"{f}/no_out_endpoint", "1")
        os.symlink(f, f"{g}/configs/c.1/hid.{GADGET}")
        self.udc = lab.sh("lab_usb_free_udc")
        write_file(f"{lab.RUN}/udc.{self.udc}", "")
        # The node appears (devtmpfs) once the function is bound to a UDC.
        self.device = f"/dev/hidg{read_file(f'{f}/dev').split(':')[1]}"
        self.fd = -1

    def plug(self) -> None:
        write_file(f"{self.g}/UDC", self.udc)
        lab.wait_for(lambda: os.path.exists(self.device), 10, self.device)
        self.fd = os.open(self.device, os.O_RDWR)

    def unplug(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        write_file(f"{self.g}/UDC", "\n")

    def send(self, data: bytes) -> None:
        if os.write(self.fd, data) != len(data):
            raise LabError("a short write on the gadget")

    def receive(self, timeout: float, what: str) -> bytes:
        os.set_blocking(self.fd, False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return os.read(self.fd, 64)
            except BlockingIOError:
                time.sleep(0.02)
        raise LabError(f"no {what} on {self.device} within {timeout} s")

    def remove(self) -> None:
        try:
            self.unplug()
        except OSError:
            pass
        for path in (f"{self.g}/configs/c.1/hid.{GADGET}",):
            if os.path.islink(path):
                os.unlink(path)
        for path in (f"{self.g}/configs/c.1/strings/0x409", f"{self.g}/configs/c.1", f"{self.g}/functions/hid.{GADGET}",
                     f"{self.g}/strings/0x409", self.g):
            try:
                os.rmdir(path)
            except OSError:
                pass
        try:
            os.unlink(f"{lab.RUN}/udc.{self.udc}")
        except OSError:
            pass


BURST = 32


def send_reports(gadget: HIDGadget, start: int, count: int, read_so_far=None) -> None:
    """Blocking writes (f_hid takes one report per interrupt IN transfer), in
    bursts of BURST, each waited on until `read_so_far()` (reports the host
    side has read) caught up: hidraw's 64-report queue never overflows."""
    os.set_blocking(gadget.fd, True)
    for i in range(start, start + count):
        gadget.send(report(i))
        sent = i - start + 1
        if read_so_far is not None and (sent % BURST == 0 or sent == count):
            lab.wait_for(lambda: read_so_far() >= sent, 60, f"the host side to read {sent} reports")


lab.udev_up()
lab.usb_init(4)
rules = acc.install_udev_rules()
with open(rules.paths[1], "a") as f:
    f.write("# vigil lab: the HID test accessory (Tests/Lab/64-vigild-hidraw.py)\n" + MATCHER)
rules._reload()
daemon = acc.Daemon("64", apps={APP: {"declares": [PROTOCOLS[0]], "args": ["--accessory-protocol", PROTOCOLS[0]]}})
ctl = daemon.control
gadget = HIDGadget()
try:
    # ---------------------------------------------------------------- 1. plug ----
    gadget.plug()
    found = daemon.wait(lambda: [a for a in daemon.accessories() if a.get("kind") == "hid" and a["serialNumber"] == SERIAL],
                        60, f"vigild to list the HID accessory {SERIAL}")
    hid = found[0]
    want = {"vendorID": f"{VID:04x}", "productID": f"{PID:04x}", "manufacturer": MANUFACTURER, "name": PRODUCT,
            "protocolStrings": PROTOCOLS, "lineSettings": "", "kind": "hid"}
    bad = {k: (hid.get(k), v) for k, v in want.items() if hid.get(k) != v}
    if bad or not str(hid.get("deviceNode", "")).startswith("/dev/hidraw"):
        raise LabError(f"the HID accessory's fields differ (got, want): {bad}; whole object: {hid}")
    props = lab.udev_properties(hid["deviceNode"])
    if props.get("VIGIL_ACCESSORY") != "1":
        raise LabError(f"udev did not mark {hid['deviceNode']}: {props}")
    st = os.stat(hid["deviceNode"])
    if st.st_mode & 0o777 != 0o660:
        raise LabError(f"{hid['deviceNode']} has mode {st.st_mode & 0o777:o}, want 660 (the shipped rules' tail)")
    connection = hid["connectionID"]
    log(f"1. HID accessory listed: {hid}")

    # ------------------------------------------ 2. reports to a frozen app ----
    ctl.app_action("launch", APP)
    opened = daemon.wait(lambda: daemon.records_of(APP, "sessionOpened"), 60, "the app's session")[0]
    session = opened["session"]
    ctl.app_action("background", APP)
    daemon.wait_state(APP, "suspended")
    wakes_before = len(daemon.decisions(APP, "wake"))
    COUNT = 1000
    log(f"app frozen with session {session}; the gadget sends {COUNT} reports")

    def reports_of(session_id: int) -> list[bytes]:
        got: list[bytes] = []
        for e in daemon.events(APP, "session.data"):
            if e["attributes"].get("session") != session_id:
                continue
            if e["attributes"].get("framing") != "u16le":
                raise LabError(f"a HID session.data event without framing u16le: {e['attributes']}")
            got.extend(split_records(bytes.fromhex(e["payloadHex"])))
        return got

    def all_arrived(start: int, count: int):
        def check() -> bool:
            got = reports_of(session)
            want = [report(i) for i in range(start + count)]
            if got != want[:len(got)]:
                first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b) if any(
                    a != b for a, b in zip(got, want)) else min(len(got), len(want))
                raise LabError(f"report {first} differs or is extra: got "
                               f"{got[first].hex() if first < len(got) else None}, want "
                               f"{want[first].hex() if first < len(want) else None} ({len(got)} received)")
            return len(got) == len(want)
        return check

    def read_by_vigild(before: int = 0):
        def count() -> int:
            info = next((x for x in daemon.sessions() if x["session"] == session), None)
            return (info["bytesIn"] // REPORT - before) if info else 0
        return count

    t0 = time.monotonic()
    send_reports(gadget, 0, COUNT, read_by_vigild())
    daemon.wait(all_arrived(0, COUNT), 120, f"all {COUNT} reports in the app, whole and in order")
    through_vigild = time.monotonic() - t0
    data_wakes = [d for d in daemon.decisions(APP, "wake")[wakes_before:] if "session.data" in d["reason"]]
    if not data_wakes:
        raise LabError("no wake decision for session.data while the app was frozen")
    info = next(s for s in daemon.sessions() if s["session"] == session)
    if info["bytesIn"] != COUNT * REPORT:
        raise LabError(f"session counters: {info}, want bytesIn={COUNT * REPORT}")
    log(f"2. {COUNT} reports arrived whole and in order ({len(data_wakes)} data wake(s)) in {through_vigild:.1f} s "
        f"(bursts of {BURST}, each waited on)")

    # ------------------------------------------- 3. requests through vigilctl ----
    out_report = bytes(range(0x10, 0x18))
    feature = bytes(range(0xa0, 0xa8))

    def vigilctl_hid(*args: str) -> dict:
        p = subprocess.run([acc.VIGILCTL, "accessory", "hid", str(connection), "--protocol", PROTOCOLS[1], *args,
                            "--socket", daemon.socket], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        if p.returncode != 0:
            raise LabError(f"vigilctl accessory hid {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}\n"
                           f"{daemon.log_tail()}")
        return dict(line.split(" ", 1) for line in p.stdout.splitlines() if " " in line)

    # One SET_REPORT at a time: f_hid keeps only the last one until the gadget reads it.
    lines = vigilctl_hid("--descriptor", "--set-feature", "00" + feature.hex(), "--get-feature", f"0:{REPORT + 1}")
    if bytes.fromhex(lines.get("descriptor", "")) != DESCRIPTOR:
        raise LabError(f"report descriptor {lines.get('descriptor')}, want {DESCRIPTOR.hex()}")
    got_feature = gadget.receive(20, "feature report")
    if got_feature != feature:
        raise LabError(f"the gadget got feature report {got_feature.hex()}, want {feature.hex()}")
    if bytes.fromhex(lines.get("feature", "")) != bytes(REPORT + 1):
        raise LabError(f"feature report read back {lines.get('feature')}, want {REPORT + 1} zero bytes (f_hid's answer)")
    vigilctl_hid("--output", "00" + out_report.hex())
    got_output = gadget.receive(20, "output report")
    if got_output != out_report:
        raise LabError(f"the gadget got output report {got_output.hex()}, want {out_report.hex()}")
    p = subprocess.run([acc.VIGILCTL, "accessory", "open", str(connection), "--protocol", PROTOCOLS[1],
                        "--socket", daemon.socket], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if p.returncode == 0 or "vigilctl accessory hid" not in p.stderr:
        raise LabError(f"vigilctl accessory open on a HID accessory: rc {p.returncode}, {p.stderr.strip()}")
    log("3. descriptor read; output and feature reports reached the gadget; feature read back; `open` refused")

    # ---------------------------------------------------------- 4. unplug/replug ----
    gadget.unplug()
    daemon.wait(lambda: [e for e in daemon.events(APP, "session.closed") if e["attributes"].get("session") == session
                         and e["attributes"].get("willReopen") is True], 30, "session.closed (willReopen)")
    gadget.plug()
    daemon.wait(lambda: [e for e in daemon.events(APP, "session.reopened") if e["attributes"].get("session") == session],
                60, "session.reopened")
    send_reports(gadget, COUNT, 10)  # fewer than hidraw's queue holds
    daemon.wait(all_arrived(0, COUNT + 10), 60, "10 more reports after the replug")
    log("4. unplug closed the session for reopening; replug reopened it and reports flow again")

    # ------------------------- 5. unpaced, against a direct reader (a figure) ----
    # The gadget sends as fast as the host polls it; a direct reader on its own
    # open file of the same node sees the same reports at the same time (hidraw
    # queues per open file), so each path's loss is measured against the other's
    # in one burst. Printed, not asserted (TCG's timing); asserted: what reached
    # the app is whole, in order, none doubled.
    node = next(a for a in daemon.accessories() if a.get("kind") == "hid" and a["serialNumber"] == SERIAL)["deviceNode"]
    daemon.wait_state(APP, "suspended")
    UNPACED = 2000
    first = COUNT + 10
    direct: list[bytes] = []
    direct_fd = os.open(node, os.O_RDONLY | os.O_NONBLOCK)
    stop = threading.Event()

    def read_directly() -> None:
        while not stop.is_set():
            if select.select([direct_fd], [], [], 0.1)[0]:
                try:
                    direct.append(os.read(direct_fd, 64))
                except BlockingIOError:
                    pass

    reader = threading.Thread(target=read_directly, daemon=True)
    reader.start()
    in_app_before = len(reports_of(session))
    t0 = time.monotonic()
    send_reports(gadget, first, UNPACED)
    sending = time.monotonic() - t0

    def settled():
        seen = (len(direct), len(reports_of(session)))
        time.sleep(2)
        return seen == (len(direct), len(reports_of(session)))
    daemon.wait(settled, 120, "both readers to stop receiving")
    stop.set()
    reader.join(5)
    os.close(direct_fd)
    sent = [report(i) for i in range(first, first + UNPACED)]
    via_vigild = reports_of(session)[in_app_before:]
    index = {r: i for i, r in enumerate(sent)}
    positions = [index.get(r, -1) for r in via_vigild]
    if -1 in positions or positions != sorted(set(positions)):
        raise LabError(f"unpaced: the app's reports are not an in-order subsequence of those sent "
                       f"(first bad at {next(i for i, p in enumerate(positions) if p == -1 or (i and p <= positions[i - 1]))})")
    direct_kept = len([r for r in direct if r in index])
    log(f"5. unpaced: the gadget sent {UNPACED} reports in {sending:.2f} s ({UNPACED / sending:.0f}/s); "
        f"a direct reader got {direct_kept} (lost {UNPACED - direct_kept}), vigild into the frozen app "
        f"{len(via_vigild)} (lost {UNPACED - len(via_vigild)}): {len(via_vigild) / max(direct_kept, 1):.2f}x "
        f"the direct reader's reports, whole and in order")

    log("PASS")
finally:
    daemon.stop()
    gadget.remove()
    rules.remove()

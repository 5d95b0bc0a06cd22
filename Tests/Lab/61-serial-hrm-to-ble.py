#!/usr/bin/env python3
"""vigil-hrm-bridge as a serial-to-BLE heart-rate monitor (issue 6, lab tier):
a serial heart-rate sensor on a USB CDC-ACM gadget, the bridge frozen under
vigild, and a Bumble central that must see an ordinary Heart Rate Service.

1. A gadget (1209:7061) marked by udev with protocol org.vigil.hrm; its
   gadget side is driven by serial_accessory.py --mode hrm, which writes the
   bridge's line format ("hr=72 contact=1 energy=105 rr=812,799") on command
   and logs each line it wrote with the measurement it stands for.
2. vigild with the serial variant of the bridge (--serial-protocol
   org.vigil.hrm --republish; background-modes external-accessory +
   bluetooth-peripheral, accessory-protocols org.vigil.hrm).  Launched, it
   opens a session with the sensor and publishes 0x180D ("Vigil HRM Bridge",
   appearance 833); then it is sent to the background and is suspended.
3. The Bumble central (lab/peers/central.py, hci1) finds the advertisement by
   service 180d and reads Body Sensor Location (0x2A38): the fixed value
   (--location 2, wrist), answered by vigild; the bridge is NOT woken.
4. The central subscribes to 0x2A37; the sensor writes its sequence (one
   malformed line among them); every notification the central receives
   decodes (vigillab.decode_heart_rate) to exactly what the sensor sent, in
   order; the malformed line is an `error` line in the bridge's output and
   no notification; vigild woke the bridge for session.data, and it is
   suspended again afterwards.
5. The bridge is killed: the service stays published; the central's next
   subscription relaunches it, and it uses the restored service (a
   `published` line with restored: true, no second publish), opens a new
   session with the sensor and notifies its next lines exactly.
"""
# lab-timeout: 480
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.hrmserialbridge"
PROTOCOL = "org.vigil.hrm"
BRIDGE = os.path.join(acc.BIN, "vigil-hrm-bridge")
HRM_PID = 0x7061
SERIAL = "VL-HRM-0001"
LOCATION = 2                        # wrist: the bridge's --location, a fixed value
LINES = 8                           # serial_accessory.HRM_SEQUENCE, once (one of them malformed)

if not os.access(BRIDGE, os.X_OK):
    raise LabError(f"{BRIDGE} is not built: run `swift build` on the host first")

# ----------------------------------------------------------- bring-up ----
lab.udev_up()
lab.usb_init(4)
lab.bt_up()
# Our own matcher (another product id, another protocol), with the shipped rules.
acc.MATCHER = (
    f'SUBSYSTEM=="tty", SUBSYSTEMS=="usb", ATTRS{{idVendor}}=="{acc.VID:04x}", ATTRS{{idProduct}}=="{HRM_PID:04x}", '
    f'ENV{{VIGIL_ACCESSORY}}="1", ENV{{VIGIL_PROTOCOLS}}="{PROTOCOL}", ENV{{VIGIL_SERIAL}}="115200 8N1"\n')
rules = acc.install_udev_rules()

daemon = acc.Daemon("61", apps={}, timings="suspend-grace = 0.5\nwake-budget = 5\n")
bridge = acc.Bridge(daemon, APP, [BRIDGE, "--serial-protocol", PROTOCOL, "--republish", "--location", str(LOCATION),
                                  "--output", f"{daemon.dir}/bridge.jsonl", "--restore-id", APP],
                    ["external-accessory", "bluetooth-peripheral"], f'accessory-protocols = ["{PROTOCOL}"]\n')
acc.wait_ble_powered_on(daemon)

host, dev = lab.usb_plug("hrm", acc.VID, HRM_PID, "Vigil Lab", "Vigil Serial HRM", SERIAL)
props = lab.udev_properties(host)
if props.get("VIGIL_ACCESSORY") != "1" or props.get("VIGIL_PROTOCOLS") != PROTOCOL:
    raise LabError(f"udev did not mark {host} with {PROTOCOL}: {props}")
daemon.wait(lambda: any(a["serialNumber"] == SERIAL and a["protocolStrings"] == [PROTOCOL] for a in daemon.accessories()),
            30, f"vigild to list {SERIAL} with {PROTOCOL}")
sensor = lab.Peer.start("hrm-sensor", "serial_accessory.py", "--device", dev, "--mode", "hrm", "--rate", "1.5")
log(f"1. sensor {SERIAL} plugged: host {host}, gadget {dev}, protocol {PROTOCOL}")


bridge.peer = sensor
lines, diagnostics, wait = bridge.lines, bridge.diagnostics, bridge.wait


def wakes() -> list[dict]:
    return daemon.decisions(APP, "wake")


# ------------------------------------- 2. launch, publish, background ----
daemon.control.app_action("launch", APP)
started = wait(lambda: lines("started"), 60, "the bridge's 'started' line")[0]
opened = wait(lambda: [r for r in lines("accessory") if r["event"] == "opened"], 60, "the bridge's session with the sensor")[0]
if opened["source"] != f"serial:{SERIAL}":
    raise LabError(f"session line {opened}, want source serial:{SERIAL}")
published = wait(lambda: lines("published"), 60, "the bridge to publish 0x180D")[0]
if published["restored"] is not False or published["localName"] != "Vigil HRM Bridge":
    raise LabError(f"published line {published}")
if lines("error"):
    raise LabError(f"the bridge reported errors: {lines('error')}")
daemon.control.app_action("background", APP)
daemon.wait_state(APP, "suspended", 30)
log(f"2. bridge pid {daemon.app(APP)['pid']}: session {opened['session']}, 0x180D published; suspended")


# ------------------------------------------- the central (Bumble, hci1) ----
def central_cmd(events: str, *steps: str, notifications: int = 0) -> list[str]:
    if os.path.exists(events):
        os.unlink(events)
    return ["python3", os.path.join(lab.PEERS, "central.py"), "--transport", "hci-socket:1", "--service", "180d",
            *steps, "--notifications", str(notifications), "--timeout", "60", "--scan-timeout", "60",
            "--events", events]


def central_events(events: str) -> list[dict]:
    return lab.read_events(events)


def central_failed(returncode, output: str, evs) -> LabError:
    errors = [e.get("message") for e in evs if e.get("event") == "error"]
    return LabError(f"Bumble central failed ({returncode}): {errors or (output or '')[-800:]}\n"
                    f"{diagnostics()}\n{daemon.diagnostics()}")


# --------------------------------- 3. fixed 0x2A38, the bridge stays frozen ----
before = len(wakes())
ev1 = os.path.join(lab.LOGS, "central-read.events.jsonl")
p = subprocess.run(central_cmd(ev1, "--read", "2a38"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   text=True, timeout=200)
evs = central_events(ev1)
if p.returncode != 0:
    raise central_failed(p.returncode, p.stdout, evs)
found = next(e for e in evs if e["event"] == "found")
# The name may come in the scan response, after the advertisement that matched: checked when seen.
if (found["names"] and found["names"] != ["Vigil HRM Bridge"]) or not any("180d" in u for u in found["uuids"]):
    raise LabError(f"advertisement: {found}, want name 'Vigil HRM Bridge' and service 180d")
services = next(e for e in evs if e["event"] == "services")["services"]
reads = [e for e in evs if e["event"] == "read"]
if [r["value"] for r in reads] != [f"{LOCATION:02x}"]:
    raise LabError(f"0x2A38 read {reads}, want {LOCATION:02x}")
if len(wakes()) != before or daemon.state(APP) != "suspended":
    raise LabError(f"the bridge was woken for the fixed 0x2A38: {wakes()[before:]}")
log(f"3. central found {found['names']} {found['uuids']}, services {services}; 0x2A38 = {LOCATION:02x} "
    "answered by vigild, the bridge stayed frozen")

# ------------------------- 4. subscribe; the sensor's lines become notifications ----
good = LINES - 1
ev2 = os.path.join(lab.LOGS, "central-subscribe.events.jsonl")
proc = subprocess.Popen(central_cmd(ev2, "--read", "2a38", "--subscribe", "2a37", notifications=good),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
try:
    lab.wait_for(lambda: any(e["event"] == "subscribed" for e in central_events(ev2)) or proc.poll() is not None,
                 120, "the central's subscription to 0x2A37")
    if proc.poll() is not None:
        raise central_failed(proc.returncode, proc.communicate()[0], central_events(ev2))
    wait(lambda: [r for r in lines("subscribers") if r["subscribed"]], 30, "the bridge to see the subscription")
    daemon.wait_state(APP, "suspended", 30)
    wakes_before_data = len(wakes())
    sensor.command(f"send {LINES}")
    stdout, _ = proc.communicate(timeout=LINES / 1.5 + 90)
except BaseException:
    proc.kill()
    raise
evs = central_events(ev2)
if proc.returncode != 0:
    raise central_failed(proc.returncode, stdout, evs)

# The sensor logs each line before writing it, and "burst-done" after the last
# write: the central can have had the last notification before that.
sensor.wait_event("burst-done", timeout=30)
sent = sensor.events("hrm")
if len(sent) != LINES or len(sensor.events("burst-done")) != 1:
    raise LabError(f"the sensor wrote {len(sent)} lines, want {LINES}\n{diagnostics()}")
want = [e["expected"] for e in sent if not e.get("malformed")]
got_hex = [e["value"] for e in evs if e["event"] == "notification"]
got = [lab.decode_heart_rate(bytes.fromhex(v)) for v in got_hex]
if got != want:
    raise LabError("the central's notifications differ from what the sensor sent:\n"
                   + "\n".join(f"  got {g}\n want {w}" for g, w in zip(got, want))
                   + f"\n({len(got)} received, {len(want)} sent)\n{diagnostics()}")
# The bridge's own lines agree: one measurement per good line, with the bytes notified.
measurements = lines("measurement")
if [m["raw"] for m in measurements] != got_hex:
    raise LabError(f"the bridge's measurement lines {[m['raw'] for m in measurements]} != notified {got_hex}")
errors = lines("error")
bad = [e["line"] for e in sent if e.get("malformed")]
if len(errors) != len(bad) or any(e["operation"] != "parse serial line" or bytes.fromhex(e["raw"]).decode() != b_
                                  for e, b_ in zip(errors, bad)):
    raise LabError(f"error lines {errors}, want one 'parse serial line' per malformed line {bad}")
data_wakes = [d for d in wakes()[wakes_before_data:] if "session.data" in d["reason"]]
if not data_wakes:
    raise LabError(f"no wake for session.data while the sensor sent; decisions: {wakes()[-10:]}")
if len(data_wakes) > LINES:
    raise LabError(f"{len(data_wakes)} wakes for {LINES} lines: more than one per line")
if any("ble.peripheral.read" in d["reason"] for d in wakes()):
    raise LabError(f"the bridge was woken for a read: {wakes()}")
daemon.wait_state(APP, "suspended", 30)
log(f"4. {len(got)} notifications decode to exactly the sensor's lines, in order; the malformed line is "
    f"an error line; {len(data_wakes)} session.data wake(s); suspended again")

# ---------------- 5. killed: the service stays; a subscription relaunches the bridge ----
pid = daemon.app(APP)["pid"]
daemon.control.app_action("terminate", APP)
daemon.wait_state(APP, "notRunning", 30)
MORE = 3                            # the sequence again from its start: three good lines
ev3 = os.path.join(lab.LOGS, "central-relaunch.events.jsonl")
proc = subprocess.Popen(central_cmd(ev3, "--read", "2a38", "--subscribe", "2a37", notifications=MORE),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
try:
    lab.wait_for(lambda: any(e["event"] == "subscribed" for e in central_events(ev3)) or proc.poll() is not None,
                 120, "the central's subscription after the kill")
    if proc.poll() is not None:
        raise central_failed(proc.returncode, proc.communicate()[0], central_events(ev3))
    wait(lambda: len(lines("started")) == 2, 60, "the bridge relaunched by the subscription")
    wait(lambda: len([r for r in lines("accessory") if r["event"] == "opened"]) == 2, 60,
         "the relaunched bridge's session with the sensor")
    daemon.wait_state(APP, "suspended", 30)
    sensor.command(f"send {MORE}")
    stdout, _ = proc.communicate(timeout=MORE / 1.5 + 90)
except BaseException:
    proc.kill()
    raise
evs = central_events(ev3)
if proc.returncode != 0:
    raise central_failed(proc.returncode, stdout, evs)
relaunched = lines("started")[-1]
if relaunched["pid"] == pid:
    raise LabError(f"the bridge was not relaunched: {relaunched}")
publishes = lines("published")
if [p_["restored"] for p_ in publishes] != [False, True]:
    raise LabError(f"published lines {publishes}: want the relaunched bridge to use the restored service, "
                   "not publish it again")
if [e["value"] for e in evs if e["event"] == "read"] != [f"{LOCATION:02x}"]:
    raise LabError(f"0x2A38 after the kill: {evs}")
sent = sensor.events("hrm")[LINES:]
want = [e["expected"] for e in sent]
got = [lab.decode_heart_rate(bytes.fromhex(e["value"])) for e in evs if e["event"] == "notification"]
if len(sent) != MORE or got != want:
    raise LabError(f"after the relaunch the central got {got}, the sensor sent {want}\n{diagnostics()}")
if len(lines("error")) != len(bad):
    raise LabError(f"the relaunched bridge reported errors: {lines('error')[len(bad):]}")
log(f"5. killed (pid {pid}): the service stayed published; the subscription relaunched the bridge "
    f"(pid {relaunched['pid']}, {relaunched['launchReason']}), which used the restored service and "
    f"notified the next {MORE} lines exactly")

sensor.command("quit")
daemon.stop()
rules.remove()
print("OK")

#!/usr/bin/env python3
"""vigil-hrm-bridge, frozen, against a real BlueZ and a Bumble heart-rate
monitor (lab tier).

*** DEPENDS ON THE DAEMON'S BLUETOOTH CENTRAL (issue 5): vigild's ble.*
*** requests and events through BlueZ, wakes for ble.notification, pending
*** connects kept across link loss and subscriptions renewed on reconnect.
*** Written before that side ran in the lab; see "Assumed" below.

1. vigild (cgroup freezer) with a manifest for the bridge declaring
   background-modes = ["bluetooth-central"]; the adapter is poweredOn for it.
2. The bridge, launched in the foreground with no --address, scans for
   0x180D, connects to the monitor (C0:DE:00:00:00:01, the only one), reads
   Body Sensor Location (wrist = 2) and subscribes to 0x2A37; then it is sent
   to the background and is suspended.
3. While it is frozen the monitor sends a known sequence in four bursts
   (hrm_sequence_peer.py: configure + send): uint8 with contact detected,
   energy and 2 RR intervals; uint16 rates > 255, contact not detected, 3 RR;
   uint16 small rates, no contact support, energy wrapping 65534 -> 0, no RR;
   uint8 rates 249-255, 5 RR.  Every measurement must reach the bridge's JSON
   lines, in order, each decoded field equal to what the peer logged it sent
   (and the raw bytes too); vigild's decision log must show wakes for
   'ble.notification' (at least one per burst, at most one per measurement),
   and the bridge must be suspended again after each burst.
4. The monitor powers off: the bridge logs `disconnected` (willReconnect) and
   does nothing else; it powers on: vigild reconnects and renews the
   subscription by itself, and the next burst arrives in the same process and
   the same output file, with no scan, connect or subscribe from the bridge.

Assumed (guessed where the daemon side was not there to look at):
- `vigilctl ble state --json` prints {"state": "poweredOn", ...} (BleState in
  Sources/vigilctl/BluetoothCommands.swift);
- the control `log` request (vigilctl log --json) lists wake decisions with
  action "wake" and a reason naming the event kind, "woken for
  'ble.notification' (seq N): ..." (LifecycleEngine+Events.swift), as
  Tests/python/test_ble_daemon.py checks on the host tier;
- vigild's default config has bluetooth = true and finds hci0 through the
  guest's system bus, which lab_bt_up starts;
- a monitor that stopped advertising (power-off) is reconnected by vigild
  when it advertises again, within 90 s (pending connect, no app action).
"""
# lab-timeout: 420
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402  (vigild plumbing shared with the accessory tests)
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.hrmbridge"
RESTORE_ID = "org.vigil.lab.hrmbridge"
BRIDGE = os.path.join(acc.BIN, "vigil-hrm-bridge")
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hrm_sequence_peer.py")
MONITOR = "C0:DE:00:00:00:01"       # the stock peer's fixed static address
NAME = "Vigil HRM"
LOCATION = 2                        # wrist
CONTACT = {"yes": "detected", "no": "notDetected", "none": "notSupported"}

# (peer settings, measurements): the sequence covers both formats, the three
# contact states, energy present/absent/wrapping, 0, 2, 3, 4 and 5 RR intervals.
BURSTS = [
    ("format=uint8 rate=72 contact=yes energy=100 rr=2", 3),
    ("format=uint16 rate=300 contact=no energy=none rr=3", 3),
    ("format=uint16 rate=70 contact=none energy=65534 rr=0", 3),
    ("format=uint8 rate=249 contact=yes energy=none rr=5", 3),
]
AFTER_POWER_CYCLE = ("format=uint16 rate=180 contact=yes energy=5 rr=4", 4)

if not os.access(BRIDGE, os.X_OK):
    raise LabError(f"{BRIDGE} is not built: run `swift build` on the host first")

# ----------------------------------------------------------- bring-up ----
lab.bt_up()
lab.Bluez("hci0").forget_all()
# Bumble on hci1; silent until told to send (budget 0), notifications 1 s apart
# so that the bridge can be frozen between them.
peer = lab.Peer.start("hrm", PEER, "--name", NAME, "--location", str(LOCATION), "--interval", "1.0",
                      "--format", "uint8", "--rate", "72")

daemon = acc.Daemon("60", apps={}, timings="suspend-grace = 0.5\nwake-budget = 10\n")
bridge = acc.Bridge(daemon, APP, [BRIDGE, "--output", f"{daemon.dir}/bridge.jsonl", "--restore-id", RESTORE_ID],
                    ["bluetooth-central"])
bridge.peer = peer
acc.wait_ble_powered_on(daemon)
lines, diagnostics, wait = bridge.lines, bridge.diagnostics, bridge.wait


def no_errors() -> None:
    errors = lines("error")
    if errors:
        raise LabError(f"the bridge reported errors: {errors}\n{diagnostics()}")


def expected(ev: dict) -> dict:
    """What the bridge must have written for the peer's notify event `ev`."""
    return {"address": MONITOR, "heartRate": ev["hr"], "is16Bit": ev["format"] == "uint16",
            "sensorContact": CONTACT[ev["contact"]], "energyExpended": ev["energy"],
            "rrIntervalsRaw": ev["rr"], "rrIntervals": [v / 1024 for v in ev["rr"]], "raw": ev["data"]}


def check_measurements() -> None:
    """Every measurement the peer sent, in order, equal field by field; nothing extra.

    Valid at any moment, not only once a burst is over: the peer logs each
    notification before it sends it (hrm_sequence_peer.py), so the bridge can
    never hold a measurement that the log does not show yet, and one more
    line than the log is a measurement the peer never sent."""
    sent, got = peer.events("notify"), lines("measurement")
    if len(got) > len(sent):
        raise LabError(f"the bridge wrote {len(got)} measurements, the peer sent {len(sent)}\n{diagnostics()}")
    for i, (ev, row) in enumerate(zip(sent, got)):
        want = expected(ev)
        have = {k: row.get(k) for k in want}
        if have != want:
            raise LabError(f"measurement {i} (peer seq {ev['seq']}): bridge wrote {have}, peer sent {want}")


def burst(settings: str, count: int, what: str) -> None:
    sent_before, wakes_before = len(peer.events("notify")), len(notification_wakes())
    done_before = len(peer.events("burst-done"))
    peer.command(f"configure {settings}")
    peer.wait_event("configured", timeout=20, **{k: v for k, v in parse(settings).items()})
    peer.command(f"send {count}")
    total = sent_before + count

    def arrived() -> bool:
        check_measurements()          # fails at once on a wrong or extra value
        return len(peer.events("burst-done")) > done_before and len(lines("measurement")) >= total

    wait(arrived, 90, f"{count} measurements ({what}) in the bridge's output")
    if len(peer.events("notify")) != total:
        raise LabError(f"the peer sent {len(peer.events('notify')) - sent_before} notifications, want {count}")
    wakes = notification_wakes()[wakes_before:]
    if not wakes:
        raise LabError(f"no wake for 'ble.notification' during the {what} burst; decisions: "
                       f"{daemon.decisions(APP)[-10:]}")
    if len(wakes) > count:
        raise LabError(f"{len(wakes)} wakes for {count} notifications: more than one per measurement")
    daemon.wait_state(APP, "suspended", 30)   # it finishes early after each line
    no_errors()
    log(f"{what}: {count} measurements arrived in order and equal, {len(wakes)} wake(s); suspended again")


def parse(settings: str) -> dict:
    values = {}
    for pair in settings.split():
        k, _, v = pair.partition("=")
        values[k] = v if k in ("format", "contact") else (None if v == "none" else int(v))
    return values


def notification_wakes() -> list[dict]:
    return [d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]]


# ------------------------------------------- 2. launch, connect, freeze ----
daemon.control.app_action("launch", APP)
started = wait(lambda: lines("started"), 60, "the bridge's 'started' line")[0]
if started["app"] != APP or started["restoreIdentifier"] != RESTORE_ID or started["address"] is not None:
    raise LabError(f"started line: {started}")
wait(lambda: lines("scanning"), 60, "the bridge to scan for 0x180D")
found = wait(lambda: lines("discovered"), 60, f"the bridge to discover {NAME}")[0]
if found["address"] != MONITOR:
    raise LabError(f"the bridge took {found}, want {MONITOR}")
wait(lambda: lines("connected"), 90, f"the bridge to connect to {MONITOR}")
location = wait(lambda: lines("bodySensorLocation"), 30, "Body Sensor Location")[0]
if (location["location"], location["value"], location["raw"]) != ("wrist", LOCATION, f"{LOCATION:02x}"):
    raise LabError(f"body sensor location line {location}, want wrist ({LOCATION})")
peer.wait_event("read", uuid="2a38", timeout=10)
wait(lambda: lines("subscribed"), 30, "the bridge's subscription to 0x2A37")
peer.wait_event("subscription", notify=True, timeout=30)
no_errors()
pid = daemon.app(APP)["pid"]
log(f"1-2. bridge pid {pid} connected to {MONITOR}, location wrist, subscribed; sending it to the background")

daemon.control.app_action("background", APP)
daemon.wait_state(APP, "suspended", 30)
if not lines("lifecycle") or lines("lifecycle")[-1]["notification"] != "didEnterBackground":
    raise LabError(f"no didEnterBackground line before the suspension: {lines('lifecycle')}")

# --------------------------------------------- 3. the sequence, frozen ----
for settings, count in BURSTS:
    burst(settings, count, settings)
check_measurements()
log(f"3. {len(lines('measurement'))} measurements, every format, in order")

# ------------------------------------------------- 4. power off and on ----
setup_lines = {k: len(lines(k)) for k in ("scanning", "connecting", "subscribed", "discovered", "started")}
peer.command("power-off")
peer.wait_event("powered", on=False, timeout=20)
gone = wait(lambda: lines("disconnected"), 60, "the bridge's 'disconnected' line after the power-off")[0]
if gone["address"] != MONITOR or gone["willReconnect"] is not True:
    raise LabError(f"disconnected line {gone}, want {MONITOR} with willReconnect true")
daemon.wait_state(APP, "suspended", 30)
log(f"4. monitor off: bridge logged {gone}; suspended again")

connected_before = len(lines("connected"))  # before power-on: the reconnect can be that quick
peer.command("power-on")
peer.wait_event("powered", on=True, timeout=20)
burst(*AFTER_POWER_CYCLE, "after the power cycle")   # sent only once vigild has resubscribed
wait(lambda: len(lines("connected")) > connected_before, 10, "a 'connected' line for the reconnect")
now = {k: len(lines(k)) for k in setup_lines}
if now != setup_lines:
    raise LabError(f"the bridge scanned, connected or subscribed again after the power cycle: before {setup_lines}, "
                   f"after {now} (vigild should have done it)")
if daemon.app(APP)["pid"] != pid:
    raise LabError(f"the bridge's process changed ({pid} -> {daemon.app(APP)['pid']}): it was relaunched")
check_measurements()
if len(lines("measurement")) != len(peer.events("notify")):
    raise LabError(f"{len(lines('measurement'))} measurement lines for {len(peer.events('notify'))} notifications")
no_errors()
log(f"4. after the power cycle: {AFTER_POWER_CYCLE[1]} measurements with no action of the bridge's, "
    f"same process {pid}, same output; {len(lines('measurement'))} in all")

daemon.stop()
peer.stop()
print("OK")

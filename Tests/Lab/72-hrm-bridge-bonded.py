#!/usr/bin/env python3
"""The heart-rate bridge example (vigil-hrm-bridge), the real binary, against
a monitor that requires a bond, bridged while frozen (issue 27, lab tier;
lab/peers/pairing_peripheral.py --hrm --security encrypted):

1. vigild with a manifest for the bridge (`bluetooth-central`); the bridge,
   launched with `--address`, connects, reads Body Sensor Location (readable
   only over an encrypted link) and subscribes to 0x2A37 (its CCCD writable
   only over an encrypted link), never asking to pair: bluetoothd raises the
   link's security and pairs by itself (Just Works, LE Secure Connections,
   bonding), vigild's agent accepting it for the app that uses the device;
   the peer sees the read and the subscription on an encrypted link;
2. the bridge is backgrounded and suspended; the peer sends measurements:
   each reaches the bridge's output, in order, byte for byte what the peer
   logged sending, with wakes for 'ble.notification'; suspended again;
3. the bond exists afterwards: vigild's peripheral record says paired and
   bonded.
"""
# lab-timeout: 300
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.hrmbridge.bonded"
BRIDGE = os.path.join(acc.BIN, "vigil-hrm-bridge")
ADDRESS = "C0:DE:00:00:00:72"
LOCATION = 1  # the peer's default: chest
COUNT = 5

if not os.access(BRIDGE, os.X_OK):
    raise LabError(f"{BRIDGE} is not built: run `swift build` on the host first")

lab.bt_up()
lab.Bluez("hci0").forget_all()
peer = lab.Peer.start("bhrm", "pairing_peripheral.py", "--io", "none", "--security", "encrypted", "--hrm",
                      "--address", ADDRESS, "--name", "Vigil Bonded HRM", "--interval", "0.5")
daemon = acc.Daemon("72", apps={}, timings="suspend-grace = 0.5\nwake-budget = 10\n")
bridge = acc.Bridge(daemon, APP, [BRIDGE, "--output", f"{daemon.dir}/bridge.jsonl", "--restore-id", APP,
                                  "--address", ADDRESS], ["bluetooth-central"])
bridge.peer = peer
acc.wait_ble_powered_on(daemon)
lines, diagnostics, wait = bridge.lines, bridge.diagnostics, bridge.wait
ctl = daemon.control


def no_errors() -> None:
    if lines("error"):
        raise LabError(f"the bridge reported errors: {lines('error')}\n{diagnostics()}")


def check_measurements() -> None:
    """Every measurement the peer logged (before sending it), in order, equal; nothing extra."""
    sent, got = peer.events("notify"), lines("measurement")
    if len(got) > len(sent):
        raise LabError(f"the bridge wrote {len(got)} measurements, the peer sent {len(sent)}\n{diagnostics()}")
    for i, (ev, row) in enumerate(zip(sent, got)):
        want = {"address": ADDRESS, "heartRate": ev["hr"], "raw": ev["data"], "sensorContact": "notSupported"}
        have = {k: row.get(k) for k in want}
        if have != want:
            raise LabError(f"measurement {i}: bridge wrote {have}, peer sent {want}")


# ------------------------------ 1. connect, read, subscribe: BlueZ pairs ----
ctl.app_action("launch", APP)
wait(lambda: lines("connected"), 120, f"the bridge to connect to {ADDRESS}")
location = wait(lambda: lines("bodySensorLocation"), 60, "Body Sensor Location (an encrypted read)")[0]
if location["value"] != LOCATION:
    raise LabError(f"body sensor location line {location}, want {LOCATION}")
wait(lambda: lines("subscribed"), 60, "the bridge's subscription to 0x2A37")
peer.wait_event("paired", timeout=30)
peer.wait_event("subscription", notify=True, encrypted=True, timeout=30)
if any(not e["encrypted"] for e in peer.events("read") + peer.events("subscription")):
    raise LabError(f"a read or subscription on an unencrypted link: {peer.events('read')} {peer.events('subscription')}")
with open(daemon.log_path) as f:
    accepted = [line.strip() for line in f if "Just Works pairing accepted" in line]
if not accepted:
    raise LabError("vigild's agent did not accept the implicit pairing (no 'Just Works pairing accepted' line)")
no_errors()
log(f"1. the bridge read and subscribed without asking to pair; BlueZ paired: {accepted[0]}")

# ------------------------------------------------ 2. frozen, measurements ----
daemon.control.app_action("background", APP)
daemon.wait_state(APP, "suspended", 30)
pid = daemon.app(APP)["pid"]
wakes_before = len([d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]])
peer.command(f"notify {COUNT}")


def arrived() -> bool:
    check_measurements()
    return bool(peer.events("burst-done")) and len(lines("measurement")) >= COUNT


wait(arrived, 90, f"{COUNT} measurements in the bridge's output")
wakes = [d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]][wakes_before:]
if not wakes or len(wakes) > COUNT:
    raise LabError(f"{len(wakes)} wakes for 'ble.notification' for {COUNT} measurements")
daemon.wait_state(APP, "suspended", 30)
if daemon.app(APP)["pid"] != pid:
    raise LabError("the bridge was relaunched")
no_errors()
log(f"2. frozen: {COUNT} measurements in order and equal, {len(wakes)} wake(s); suspended again")

# --------------------------------------------------------------- 3. bond ----
record = next((p for p in ctl.request("ble.peripherals")["peripherals"] if p["address"] == ADDRESS), None)
if not record or not record.get("paired") or not record.get("bonded"):
    raise LabError(f"vigild's record of {ADDRESS} after the pairing: {record}")
log(f"3. bonded: {record}")

daemon.stop()
peer.stop()
print("OK")

#!/usr/bin/env python3
"""vigild's Bluetooth LE central against real bluetoothd and a Bumble
heart-rate monitor on the other btvirt controller (issue 5, lab tier):

1. scan by service through vigild finds the monitor (control role, like
   `vigilctl ble scan`); connect; Body Sensor Location (0x2A38) reads 0x01;
2. an app with `bluetooth-central` subscribes to 0x2A37 and is suspended:
   every notification wakes it, and the values arrive in order, byte for byte
   what the monitor logged sending (uint16 rate, contact, energy, RR);
3. the monitor powers off and on: the app hears ble.disconnected
   (willReconnect) and then gets notifications again with no action of its
   own (vigild reconnected and re-subscribed);
4. bluetoothd restarts: vigild rebuilds its mirror, reconnects and
   re-subscribes; notifications reach the app again;
5. the app is killed by the system: the next notification relaunches it, and
   its central manager gets back the connected monitor with its subscription.
"""
# lab-timeout: 300
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.hrmapp"
ADDRESS = "C0:DE:00:00:00:01"            # heart_rate_monitor.py's static random address
HRS, MEASUREMENT, LOCATION = "180d", "2a37", "2a38"

lab.bt_up()
bz = lab.Bluez("hci0")
bz.forget_all()
peer = lab.Peer.start("hrm", "heart_rate_monitor.py", "--name", "Vigil HRM", "--interval", "0.4",
                      "--format", "uint16", "--contact", "yes", "--energy", "100", "--rr", "2")
pid = int(open(os.path.join(lab.RUN, "hrm.pid")).read())
daemon = acc.Daemon("55", apps={APP: {
    "modes": ["bluetooth-central"],
    "args": ["--ble-peripheral", ADDRESS, "--ble-notify", f"{HRS}/{MEASUREMENT}", "--restore-id", "hrm"],
}}, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
ctl = daemon.control
push = daemon.push


def notifications():
    return [bytes.fromhex(e["payloadHex"]) for e in daemon.events(APP, "ble.notification")]


def sent():
    return [bytes.fromhex(e["data"]) for e in peer.events("notify")]


def check_in_order(received, what):
    """`received` must be a contiguous run of what the peer sent, in order."""
    all_sent = sent()
    if not received:
        raise LabError(f"{what}: nothing received")
    start = all_sent.index(received[0]) if received[0] in all_sent else -1
    if start < 0 or all_sent[start:start + len(received)] != received:
        raise LabError(f"{what}: received values are not the peer's, in order\n"
                       f"received {[r.hex() for r in received]}\nsent {[s.hex() for s in all_sent]}")


# ------------------------------------------------ 1. scan, connect, read ----
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
ctl.request("ble.registerCentral")
ctl.request("ble.scan", services=[HRS])
found = push(ctl, "ble.discovered")
if found["attributes"]["address"] != ADDRESS or lab.full_uuid(HRS) not in found["attributes"]["serviceUUIDs"]:
    raise LabError(f"discovered the wrong thing: {found.header}")
ctl.request("ble.stopScan")
ctl.request("ble.connect", peripheral=ADDRESS)
push(ctl, "ble.connected")
services = ctl.request("ble.discover", peripheral=ADDRESS, timeout=60)["services"]
if lab.full_uuid(HRS) not in [s["uuid"] for s in services]:
    raise LabError(f"no Heart Rate Service in {services}")
location = ctl.request("ble.read", peripheral=ADDRESS, service=HRS, characteristic=LOCATION, timeout=60).body
if location != b"\x01":
    raise LabError(f"Body Sensor Location read {location.hex()}, want 01")
log(f"1. scan, connect, discover and read OK (location {location.hex()})")

# ---------------------------------------- 2. frozen app woken per value ----
ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "bleReady"), 60, "the app's central manager")
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
daemon.wait(lambda: len(notifications()) >= 5, 60, "5 notifications in the suspended app")
received = notifications()
check_in_order(received, "while suspended")
decoded = lab.decode_heart_rate(received[-1])
log(f"   last value decoded: {decoded}")
wakes = [d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]]
if len(wakes) < 2:
    raise LabError(f"the app was not woken per notification: {wakes}\n{daemon.diagnostics()}")
log(f"2. {len(received)} notifications in order while suspended; {len(wakes)} wakes")

# ------------------------------------------------- 3. power off and on ----
os.kill(pid, signal.SIGUSR1)
peer.wait_event("powered", on=False, timeout=20)
daemon.wait(lambda: any(e["attributes"].get("willReconnect") is True
                        for e in daemon.events(APP, "ble.disconnected")), 60, "ble.disconnected in the app")
before = len(notifications())
peer.command("power-on")
peer.wait_event("powered", on=True, timeout=20)
daemon.wait(lambda: len(notifications()) >= before + 3, 120, "notifications again after the power cycle")
check_in_order(notifications()[before:], "after the power cycle")
log("3. power cycle: disconnected, reconnected and re-subscribed by vigild")

# ------------------------------------------------ 4. bluetoothd restarts ----
lab.sh("lab_daemon_stop", "bluetoothd")
before = len(notifications())
lab.sh("lab_bluetoothd_up")
daemon.wait(lambda: len(notifications()) >= before + 3, 120, "notifications again after bluetoothd restarted")
check_in_order(notifications()[before:], "after bluetoothd's restart")
log("4. bluetoothd restart: mirror rebuilt, link and subscription back")

# --------------------------------------- 5. killed, relaunched, restored ----
ctl.app_action("terminate", APP)
daemon.wait(lambda: len(daemon.records_of(APP, "centralRegistered")) >= 2, 60,
            "a relaunch by the next notification, and its central manager")
registered = daemon.records_of(APP, "centralRegistered")[-1]
restored = registered.get("restored") or {}
peripherals = restored.get("peripherals") or []
if not peripherals or peripherals[0]["peripheral"]["address"] != ADDRESS:
    raise LabError(f"the relaunched app's manager was not restored: {registered}")
launch = daemon.records_of(APP, "launch")[-1]
if launch["launch"]["reason"] == "user":
    raise LabError(f"the app was relaunched by the user, not by an event: {launch}")
before = len(notifications())
daemon.wait(lambda: len(notifications()) >= before + 2, 60, "notifications in the relaunched app")
log(f"5. relaunched ({launch['launch']['reason']}) with {len(peripherals)} restored peripheral(s)")
print("OK")

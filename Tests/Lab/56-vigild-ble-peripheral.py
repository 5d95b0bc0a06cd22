#!/usr/bin/env python3
"""vigild's Bluetooth LE peripheral role against real bluetoothd, with the
Bumble central (lab/peers/central.py) on the other btvirt controller
(issue 6, lab tier). An app (clients/python/example_app.py --ble-serve)
publishes a service and advertises it, then is suspended:

1. the central finds the advertisement, connects and reads the fixed value:
   vigild answers, the app is NOT woken;
2. the central reads a dynamic value (the app is woken and answers
   "value-1"), writes (the app gets the bytes), subscribes and receives the
   app's three updates in order;
3. the app is killed by the system: the service stays registered (the fixed
   value is still served), and the next dynamic read relaunches the app,
   which answers it.
"""
# lab-timeout: 300
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.peripheralapp"
SERVICE_UUID = "7a1b0001-0000-4000-8000-00000000f00d"
FIXED, DYNAMIC, WRITE, NOTIFY = (f"7a1b000{n}-0000-4000-8000-00000000f00d" for n in (2, 3, 4, 5))
SERVICE = {"uuid": SERVICE_UUID, "characteristics": [
    {"uuid": FIXED, "properties": ["read"], "value": b"vigil".hex()},
    {"uuid": DYNAMIC, "properties": ["read"]},
    {"uuid": WRITE, "properties": ["write"]},
    {"uuid": NOTIFY, "properties": ["notify"]},
]}

lab.bt_up()
daemon = acc.Daemon("56", apps={APP: {
    "modes": ["bluetooth-peripheral"],
    "args": ["--ble-serve", json.dumps(SERVICE), "--ble-advertise", "Vigil Serve", "--ble-updates", "3",
             "--restore-id", "serve"],
}}, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
ctl = daemon.control


def central(*steps, notifications=0):
    events = os.path.join(lab.LOGS, "central.events.jsonl")
    cmd = ["python3", os.path.join(lab.PEERS, "central.py"), "--transport", "hci-socket:1",
           "--service", SERVICE_UUID, *steps, "--notifications", str(notifications),
           "--timeout", "40", "--scan-timeout", "60", "--events", events]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=200)
    evs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0:
        errors = [e.get("message") for e in evs if e.get("event") == "error"]
        raise LabError(f"Bumble central failed ({p.returncode}): {errors or p.stdout[-800:]}\n{daemon.diagnostics()}")
    return evs


def read_value(evs, uuid):
    reads = [e for e in evs if e["event"] == "read" and e["uuid"].lower() == uuid]
    if not reads:
        raise LabError(f"no read of {uuid} in {evs}")
    return bytes.fromhex(reads[0]["value"])


def wakes():
    return len(daemon.decisions(APP, "wake"))


ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "bleServing"), 60, "the app's service and advertisement")
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")

# ------------------------------------------- 1. fixed value, app frozen ----
before = wakes()
evs = central("--read", FIXED)
if read_value(evs, FIXED) != b"vigil":
    raise LabError(f"fixed value read {read_value(evs, FIXED)!r}")
if wakes() != before or daemon.state(APP) != "suspended":
    raise LabError(f"the app was woken for a fixed value: {daemon.decisions(APP, 'wake')}")
log("1. fixed value answered by vigild; the app stayed frozen")

# ------------------------------- 2. dynamic read, write, subscription ----
evs = central("--read", DYNAMIC, "--write", f"{WRITE}=c0ffee", "--subscribe", NOTIFY, notifications=3)
if read_value(evs, DYNAMIC) != b"value-1":
    raise LabError(f"dynamic read {read_value(evs, DYNAMIC)!r}, want b'value-1'")
writes = [e for e in daemon.events(APP, "ble.peripheral.write") if e["payloadHex"] == "c0ffee"]
if not writes:
    raise LabError(f"the app did not get the write\n{daemon.diagnostics()}")
got = [e["value"] for e in evs if e["event"] == "notification"]
if got != ["0001", "0002", "0003"]:
    raise LabError(f"notifications {got}, want the app's 0001 0002 0003 in order")
if wakes() <= before:
    raise LabError("the app was not woken for the dynamic read")
log(f"2. dynamic read, write and 3 notifications through the app ({wakes() - before} wake(s))")

# -------------------------------------------- 3. killed, relaunched ----
ctl.app_action("terminate", APP)
daemon.wait_state(APP, "notRunning")
evs = central("--read", FIXED, "--read", DYNAMIC)
if read_value(evs, FIXED) != b"vigil" or read_value(evs, DYNAMIC) != b"value-1":
    raise LabError(f"after the kill: {evs}")
registered = daemon.records_of(APP, "peripheralRegistered")
if len(registered) < 2 or not (registered[-1].get("restored") or {}).get("services"):
    raise LabError(f"the relaunched app's peripheral manager was not restored: {registered}")
log("3. killed: the service stayed up; the next read relaunched the app, which answered it")
print("OK")

#!/usr/bin/env python3
"""Advertisement monitors against real bluetoothd and a Bumble broadcaster
(issue 28, lab tier): a sensor that never accepts a connection and whose
manufacturer data (RuuviTag data format 5) changes with every advertisement,
one every 100 ms, its measurement sequence number counting.

1. Two apps with `bluetooth-central`, both suspended: "ruuvi" monitors
   company 0x0499 with prefix 05 (format 5), "apple" monitors company 0x004C.
2. The broadcaster sends BURST advertisements while the apps are frozen.
   "ruuvi" (a logger taking 1 s per event) must store every reading BlueZ delivered (adv_listener.py, a
   direct D-Bus client, logs what bluetoothd emitted), in order, each once,
   with no loss reported; a found event before the first; fewer wakes than
   advertisements (batches, not one per advertisement). "apple" is never
   woken and gets nothing.
3. The broadcaster stops: "ruuvi" gets ble.monitor.lost.
4. CPU per advertisement delivered to the frozen app (vigild + the app)
   against the direct D-Bus client in the same boot, printed as a ratio
   (docs/performance.md).
"""
# lab-timeout: 600
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUUVI_APP, APPLE_APP = "org.vigil.lab.ruuvi", "org.vigil.lab.apple"
SENSOR = "C0:DE:00:00:00:62"
BURST = 100
RUUVI = {"monitor": "ruuvi", "patterns": [{"type": "manufacturer", "company": 0x0499, "prefix": "05"}],
         "lostTimeout": 3}
APPLE = {"monitor": "apple", "patterns": [{"type": "manufacturer", "company": 0x004C}]}


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


lab.bt_up()
lab.Bluez("hci0").forget_all()
# Bumble's import alone takes tens of seconds in a loaded TCG guest.
sensor = lab.Peer.start("ruuvi", os.path.join(HERE, "broadcast_sensor_peer.py"), "--address", SENSOR, timeout=180)
bluez = lab.Peer.start("bluez-adv", os.path.join(HERE, "adv_listener.py"), timeout=180)
manager = bluez.wait_event("monitor-manager")
log(f"bluetoothd's AdvertisementMonitorManager1: {json.dumps({k: manager[k] for k in ('present', 'supported', 'features')})}")

daemon = acc.Daemon("62", apps={
    # A logger that takes a second per event (a commit, an upload): advertisements gather meanwhile.
    RUUVI_APP: {"modes": ["bluetooth-central"],
                "args": ["--ble-monitor", json.dumps(RUUVI), "--restore-id", "ruuvi", "--ack-delay", "1.0"]},
    APPLE_APP: {"modes": ["bluetooth-central"], "args": ["--ble-monitor", json.dumps(APPLE)]},
}, timings="suspend-grace = 0.3\nwake-budget = 10.0\n")
ctl = daemon.control


def readings():
    return [r for r in daemon.read(RUUVI_APP) if r.get("kind") == "advertisement"]


def sequence(record):
    return int(record["manufacturer"][str(0x0499)][32:36], 16)  # format 5: bytes 16-17 of the data


def delivered_by_bluez():
    return [e["seq"] for e in bluez.events("adv")]


# ------------------------------------------------- 1. two frozen apps ----
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
for app in (RUUVI_APP, APPLE_APP):
    ctl.app_action("launch", app)
    daemon.wait(lambda: daemon.records_of(app, "bleReady"), 60, f"{app}'s monitor")
    ctl.app_action("background", app)
    daemon.wait_state(app, "suspended")
apple_wakes = len(daemon.decisions(APPLE_APP, "wake"))
log("1. both apps monitoring and suspended")

# -------------------------------- 2. every advertisement, frozen app ----
pids = {"vigild": daemon.pid(), "app": daemon.app(RUUVI_APP)["pid"],
        "direct": int(open(os.path.join(lab.RUN, "bluez-adv.pid")).read())}
before = {name: cpu_ticks(pid) for name, pid in pids.items()}
sensor.command(f"send {BURST} 0.1")
sensor.wait_event("burst-done", timeout=BURST * 0.5 + 60)
daemon.wait(lambda: len(delivered_by_bluez()) > 0 and len(readings()) >= len(delivered_by_bluez()), 60,
            "every advertisement BlueZ delivered in the app",
            explain=lambda: f"bluez {len(delivered_by_bluez())}, app {len(readings())}")
cpu = {name: cpu_ticks(pid) - before[name] for name, pid in pids.items()}
received = [sequence(r) for r in readings()]
from_bluez = delivered_by_bluez()
sent = [e["seq"] for e in sensor.events("advert")]
log(f"   sent {len(sent)}, bluetoothd delivered {len(from_bluez)}, the app stored {len(received)}")
if received != from_bluez:
    raise LabError(f"the app's readings are not what BlueZ delivered, in order:\napp   {received}\nbluez {from_bluez}")
if len(from_bluez) < BURST // 2:
    raise LabError(f"BlueZ delivered only {len(from_bluez)} of {BURST} advertisements: the lab's radio path is broken")
lost = sum({r["seq"]: r["lost"] for r in readings()}.values())  # the event's, repeated on each record line
if lost:
    raise LabError(f"vigild reported {lost} advertisements lost to a suspended app that kept up")
found = daemon.events(RUUVI_APP, "ble.monitor.found")
if [f["attributes"]["peripheral"] for f in found] != [SENSOR]:
    raise LabError(f"want one ble.monitor.found for {SENSOR}: {found}")
events = len({r["seq"] for r in readings()})
wakes = [d for d in daemon.decisions(RUUVI_APP, "wake") if "ble.monitor" in d["reason"]]
log(f"   {len(received)} advertisements in {events} events, {len(wakes)} wakes")
if len(wakes) > events + 1 or events * 2 > len(received):
    raise LabError(f"not batched: {len(wakes)} wakes for {events} events of {len(received)} advertisements")
if len(daemon.decisions(APPLE_APP, "wake")) != apple_wakes or daemon.events(APPLE_APP, "ble.monitor.found") \
        or any(r.get("kind") == "advertisement" for r in daemon.read(APPLE_APP)):
    raise LabError(f"the non-matching monitor woke its app or got something\n{daemon.diagnostics()}")
log("2. every advertisement in order, batched; the non-matching app untouched")

# ------------------------------- what BlueZ signals for a repeat ----
# Not a check: what bluetoothd does with an advertisement that repeats the
# last data, for docs/bluetooth.md ("What BlueZ delivers per advertisement").
signals_before = len(delivered_by_bluez())
sensor.command("repeat 20 0.1")
sensor.wait_event("repeat-done", timeout=60)
daemon.wait(lambda: len(readings()) >= len(delivered_by_bluez()), 30, "the repeats BlueZ signalled in the app")
log(f"   20 repeats of the same data: bluetoothd signalled {len(delivered_by_bluez()) - signals_before}, "
    f"the app stored {len(readings()) - len(received)}")

# --------------------------------------------------------- 3. lost ----
sensor.command("stop")
daemon.wait(lambda: daemon.events(RUUVI_APP, "ble.monitor.lost"), 60, "ble.monitor.lost after the sensor stopped")
log("3. lost after the broadcaster stopped")

# ---------------------------------------------------------- 4. CPU ----
per_vigil = (cpu["vigild"] + cpu["app"]) / max(1, len(received))
per_direct = cpu["direct"] / max(1, len(from_bluez))
ratio = per_vigil / per_direct if per_direct else float("inf")
log(f"4. CPU ticks for {len(received)} advertisements: vigild {cpu['vigild']}, frozen app {cpu['app']}, "
    f"direct D-Bus client {cpu['direct']}; per advertisement vigil/direct = {ratio:.2f}")
print(f"BENCH monitor-cpu-per-advertisement vigil_over_direct={ratio:.2f} vigild_ticks={cpu['vigild']} "
      f"app_ticks={cpu['app']} direct_ticks={cpu['direct']} advertisements={len(received)}")
print("OK")

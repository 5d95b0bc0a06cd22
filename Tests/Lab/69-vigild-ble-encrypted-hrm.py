#!/usr/bin/env python3
"""A heart-rate peer whose measurement needs encryption, bridged while the
bridge is frozen (issue 27, lab tier; lab/peers/pairing_peripheral.py --hrm):

1. an app with `bluetooth-central` connects to the peer and subscribes to
   0x2A37 WITHOUT asking to pair; the peer refuses the CCCD write for lack
   of encryption, bluetoothd raises the link's security and pairs by itself
   (Just Works, LE Secure Connections), asking vigild's agent
   (RequestAuthorization), which accepts it for the app that uses the
   device; the subscription succeeds: the peer sees it on an encrypted link,
   the app's `ble.notify` returns;
2. the app is backgrounded and suspended; the peer sends measurements: each
   wakes the frozen app, and all arrive in order, byte for byte what the
   peer logged sending; the app is suspended again;
3. the bond exists afterwards: vigild's peripheral record says paired and
   bonded.
"""
# lab-timeout: 300
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.encryptedhrm"
ADDRESS = "C0:DE:00:00:00:69"
HRS, MEASUREMENT = "180d", "2a37"
COUNT = 6

lab.bt_up()
lab.Bluez("hci0").forget_all()
peer = lab.Peer.start("ehrm", "pairing_peripheral.py", "--io", "none", "--security", "encrypted", "--hrm",
                      "--address", ADDRESS, "--name", "Vigil Encrypted HRM", "--interval", "0.5")
daemon = acc.Daemon("69", apps={APP: {
    "modes": ["bluetooth-central"],
    "args": ["--ble-peripheral", ADDRESS, "--ble-notify", f"{HRS}/{MEASUREMENT}"],
}}, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
ctl = daemon.control


def device():
    return next((p for p in ctl.request("ble.peripherals")["peripherals"] if p["address"] == ADDRESS), None)


def notifications():
    return [e["payloadHex"] for e in daemon.events(APP, "ble.notification")]


def sent():
    return [e["data"] for e in peer.events("notify")]


def peer_events() -> str:
    return "peer events (last 15):\n" + "\n".join(json.dumps(e) for e in peer.events()[-15:])


# The HCI trace of the implicit pairing, in the guest's logs: `btmon -r 69-encrypted-hrm.btsnoop`.
btmon = subprocess.Popen(["btmon", "-w", os.path.join(lab.LOGS, "69-encrypted-hrm.btsnoop")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

# ------------------------------- 1. subscribe without pairing: BlueZ pairs ----
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
ctl.app_action("launch", APP)
# The app records `subscribed` once its `ble.notify` returned; a refused
# subscription raises in it and it exits (its stderr is in vigild's log).
daemon.wait(lambda: daemon.records_of(APP, "subscribed"), 120, "the app's subscription to 0x2A37",
            explain=peer_events)
peer.wait_event("paired", timeout=30)
peer.wait_event("subscription", notify=True, encrypted=True, timeout=30)
if any(not e["encrypted"] for e in peer.events("subscription")):
    raise LabError(f"a subscription took effect on an unencrypted link: {peer.events('subscription')}")
with open(daemon.log_path) as f:
    agent_log = [line.strip() for line in f if "pairing" in line.lower()]
# bluetoothd asks the agent (RequestAuthorization) for a Just Works pairing it
# did not start through Device1.Pair; vigild's policy accepts it for the app.
if not any(f"Just Works pairing accepted (for {APP})" in line for line in agent_log):
    raise LabError(f"vigild's agent did not accept the Just Works pairing for {APP}: {agent_log}")
log(f"1. subscribed without asking to pair: bluetoothd paired by itself (peer: {peer.events('paired')}); "
    f"vigild's log on pairing: {agent_log[-5:]}")

# ---------------------------------------- 2. frozen, woken per value ----
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
peer.command(f"notify {COUNT}")
peer.wait_event("burst-done", timeout=60)
daemon.wait(lambda: len(notifications()) >= COUNT, 60, f"{COUNT} notifications in the suspended app")
if notifications() != sent():
    raise LabError(f"the app received {notifications()}, the peer sent {sent()}")
wakes = [d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]]
if not wakes or len(wakes) > COUNT:
    raise LabError(f"{len(wakes)} wakes for 'ble.notification' for {COUNT} values\n{daemon.diagnostics()}")
daemon.wait_state(APP, "suspended")
log(f"2. {COUNT} measurements in order while frozen ({notifications()}); {len(wakes)} wakes; suspended again")

# ------------------------------------------------------- 3. the bond ----
record = device() or {}
if not (record.get("paired") and record.get("bonded")):
    raise LabError(f"vigild's record after the implicit pairing: {record}")
log(f"3. bonded: {({k: record.get(k) for k in ('paired', 'bonded', 'trusted', 'addressType')})}")
btmon.send_signal(signal.SIGINT)  # btmon flushes its file on SIGINT
btmon.wait(10)
daemon.stop()
peer.stop()
print("OK")

#!/usr/bin/env python3
"""A pairing intent survives vigild's SIGKILL (issue 27, lab tier;
lab/peers/pairing_peripheral.py --io yesno: numeric comparison, LE Secure
Connections, Body Sensor Location readable only over an authenticated link):

1. an app (`bluetooth-central`, a restore identifier) connects to the peer
   and asks `ble.pair`; the confirm prompt reaches it, but it is still
   waiting for its `ble.pair` reply (example_app.py answers prompts only
   from its event loop): vigild is SIGKILLed while the prompt waits.
   BlueZ ends the pairing (its caller and agent left the bus); nothing is
   paired;
2. the restarted vigild has the app's pairing intent from its state file
   and pairs again for it: the app is relaunched (its process went with the
   old vigild's connection; the relaunch comes for its unacknowledged
   `ble.connected` or for the prompt, whichever is first), the new process
   (restored, so it does not ask again) accepts the confirm prompt, the peer reports authenticated
   keys, and the app gets `ble.pairingEnded` (paired, bonded);
3. the intent is gone from the state file, and vigild's record says paired
   and bonded.
"""
# lab-timeout: 420
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.pairresumed"
ADDRESS = "C0:DE:00:00:00:73"

lab.bt_up()
lab.Bluez("hci0").forget_all()
peer = lab.Peer.start("resumed", "pairing_peripheral.py", "--io", "yesno", "--security", "authenticated",
                      "--address", ADDRESS, "--name", "Vigil Pairing Resumed", timeout=120)
daemon = acc.Daemon("73", apps={APP: {
    "modes": ["bluetooth-central"],
    # --ble-pair-passkey: accept the confirm prompt (from the event loop, after ble.pair returned).
    "args": ["--ble-peripheral", ADDRESS, "--restore-id", "resumed", "--ble-pair", "--ble-pair-passkey", "0"],
}}, timings="suspend-grace = 0.5\nwake-budget = 10\n")
acc.wait_ble_powered_on(daemon)


def saved_pairs():
    try:
        with open(f"{daemon.dir}/state/state.json") as f:
            central = json.load(f).get("bluetooth", {}).get("central", {}).get(APP) or {}
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return central.get("pairs") or []


def explain() -> str:
    return (daemon.diagnostics() + "\napp records:\n" + "\n".join(json.dumps(r) for r in daemon.read(APP)[-15:])
            + "\npeer events:\n" + "\n".join(json.dumps(e) for e in peer.events()[-15:]))


# ------------------------------------ 1. SIGKILL while the prompt waits ----
daemon.control.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "pairing"), 120, "the app asking to pair", explain=explain)
daemon.wait(lambda: daemon.logged_since(0, "pairing prompt", f"(confirm) for {APP}"), 90,
            "the confirm prompt sent to the app", explain=explain)
daemon.wait(lambda: saved_pairs() == [ADDRESS], 10, "the pairing intent in the state file", explain=explain)
failed_before = len(peer.events("pairing-failed")) + len(peer.events("disconnected"))
daemon.sigkill()
lab.wait_for(lambda: len(peer.events("pairing-failed")) + len(peer.events("disconnected")) > failed_before, 45,
             "the pairing's end at the peer after vigild's death")
if peer.events("paired"):
    raise LabError(f"the peer paired before vigild's death: {peer.events('paired')}")
log("1. vigild SIGKILLed while the app's confirm prompt waited; the pairing failed at the peer")

# ------------------------------ 2. the restarted vigild pairs for the app ----
offset = daemon.restart()
daemon.wait(lambda: daemon.logged_since(offset, f"{ADDRESS}: pairing, resumed for {APP}"), 60,
            "the restarted vigild resuming the app's pairing", explain=explain)
ended = daemon.wait(lambda: daemon.events(APP, "ble.pairingEnded"), 180, "the app told the pairing ended",
                    explain=explain)[0]
attributes = ended["attributes"]
if (attributes.get("peripheral"), attributes.get("paired"), attributes.get("bonded"), attributes.get("error")) \
        != (ADDRESS, True, True, None):
    raise LabError(f"ble.pairingEnded: {attributes}\n{explain()}")
peer.wait_event("paired", timeout=30, authenticated=True)
launches = daemon.records_of(APP, "launch")
if len(launches) < 2 or len(daemon.records_of(APP, "pairing")) != 1:
    raise LabError(f"want one launch that asked to pair and a relaunch that did not: {explain()}")
if not daemon.records_of(APP, "pairingAnswered"):
    raise LabError(f"the relaunched app did not answer the prompt\n{explain()}")
log(f"2. resumed: the relaunched app (launch {launches[-1]['launch']}) accepted the prompt; "
    f"authenticated keys; ble.pairingEnded {attributes}")

# ---------------------------------------------------- 3. intent done ----
daemon.wait(lambda: saved_pairs() == [], 10, "the intent gone from the state file", explain=explain)
record = next((p for p in daemon.control.request("ble.peripherals")["peripherals"] if p["address"] == ADDRESS), None)
if not record or not record.get("paired") or not record.get("bonded"):
    raise LabError(f"vigild's record of {ADDRESS}: {record}")
log("3. the intent is gone from the state file; vigild's record: paired, bonded")

daemon.stop()
peer.stop()
print("OK")

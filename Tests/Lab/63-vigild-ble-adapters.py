#!/usr/bin/env python3
"""Adapter choice and characteristics by instance against real bluetoothd
(issue 28 part B, lab tier).

btvirt is laid out with three controllers on one link for this test: BlueZ
powers hci0 and hci1, a Bumble Environmental Sensing peer (Tests/Lab/
ess_peer.py, two Temperature characteristics 0x2A6E) owns hci2. Both of
BlueZ's adapters hear the peer, so BlueZ has a device object for it on each.

1. vigild's default adapter is hci0 (the first by name); scans named hci0
   and hci1 each report the peer through their own adapter;
2. an app that asked for hci1 is connected through hci1 (its ble.connected
   says so, BlueZ's hci1 object is the connected one, the peer sees hci1's
   address); a control client asking for the peer through hci0 is refused;
3. the two Temperatures are read by instance (values as the peer serves
   them), the outdoor one's User Description is written through vigild
   (the peer logs the write) and read back;
4. the app subscribed to instance 1 only: the peer notifies indoor, then
   outdoor; the app gets the outdoor value, with `instance: 1`, and never the
   indoor one;
5. hci1 is powered off: the app hears ble.adapterState poweredOff and the
   disconnect; powered on again, the app is reconnected through hci1, and
   every connection the peer saw came from hci1, never hci0.
"""
# lab-timeout: 600
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402
from vigil_client import VigilError  # noqa: E402

APP = "org.vigil.lab.adapters"
PEER = "C0:DE:00:00:00:63"
ESS, TEMPERATURE, USER_DESCRIPTION = "181a", "2a6e", "2901"


def adapter_address(name):
    # busctl prints `s "00:AA:01:01:00:24"`.
    return lab.sh("lab_adapter_address", name).split('"')[1].upper()


def device_connected(adapter):
    path = f"/org/bluez/{adapter}/dev_{PEER.replace(':', '_')}"
    try:
        out = lab.sh("busctl", "--system", "get-property", "org.bluez", path, "org.bluez.Device1", "Connected")
    except LabError:
        return False  # no object for it on that adapter
    return out == "b true"


lab.sh("lab_bt_relayout", 3, timeout=300)
try:
    lab.sh("lab_bt_power", "hci1", "on", timeout=120)
    for adapter in ("hci0", "hci1"):
        lab.Bluez(adapter).forget_all()
    hci1 = adapter_address("hci1")
    peer = lab.Peer.start("ess", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ess_peer.py"),
                          "--transport", "hci-socket:2", "--address", PEER,
                          timeout=180)  # Bumble's start-up under TCG right after the relayout: 60 s was short at load 14
    daemon = acc.Daemon("63", apps={APP: {
        "modes": ["bluetooth-central"],
        "args": ["--ble-peripheral", PEER, "--ble-adapter", "hci1", "--ble-notify", f"{ESS}/{TEMPERATURE}#1"],
    }}, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
    ctl = daemon.control
    push = daemon.push

    # ---------------------------------------------- 1. default, scans by adapter ----
    daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
    state = ctl.request("ble.state")
    if state["adapter"] != "hci0":
        raise LabError(f"the default adapter is not hci0: {state}")
    other = daemon.connect()
    for client, adapter in ((ctl, "hci0"), (other, "hci1")):
        client.request("ble.scan", services=[ESS], adapter=adapter)
        found = push(client, "ble.discovered")
        if (found["attributes"]["address"], found["attributes"].get("adapter")) != (PEER, adapter):
            raise LabError(f"scan on {adapter} reported {found.header}")
        client.request("ble.stopScan")
    log("1. default hci0; scans on hci0 and hci1 each report the peer through their own adapter")

    # ------------------------------------------------ 2. the app bound to hci1 ----
    ctl.app_action("launch", APP)
    daemon.wait(lambda: daemon.records_of(APP, "bleReady"), 60, "the app's central manager")
    daemon.wait(lambda: daemon.events(APP, "ble.connected"), 120, "the app connected")
    connected = daemon.events(APP, "ble.connected")[0]
    if connected["attributes"].get("adapter") != "hci1":
        raise LabError(f"the app's link is not through hci1: {connected}")
    if not device_connected("hci1") or device_connected("hci0"):
        raise LabError("BlueZ's hci1 object of the peer should be the connected one "
                       f"(hci1: {device_connected('hci1')}, hci0: {device_connected('hci0')})")
    seen_from = [e["address"].split("/")[0].upper() for e in peer.events("connected")]
    if seen_from != [hci1]:
        raise LabError(f"the peer saw connections from {seen_from}, want only hci1 ({hci1})")
    try:
        ctl.request("ble.connect", peripheral=PEER)
        raise LabError("a connect through the default adapter (hci0) was taken while the app wants hci1")
    except VigilError as error:
        if error.code != "invalidState":
            raise
    ctl.request("ble.connect", peripheral=PEER, adapter="hci1")  # the same adapter: shares the link
    if push(ctl, "ble.connected")["attributes"].get("adapter") != "hci1":
        raise LabError("the control client's link is not through hci1")
    log(f"2. the app is connected through hci1 ({hci1}); a connect through hci0 is refused")

    # ------------------------------------------------ 3. two Temperatures by instance ----
    services = ctl.request("ble.discover", peripheral=PEER, timeout=60)["services"]
    temperatures = [c for s in services if s["uuid"] == lab.full_uuid(ESS) for c in s["characteristics"]
                    if c["uuid"] == lab.full_uuid(TEMPERATURE)]
    if [c.get("instance") for c in temperatures] != [0, 1]:
        raise LabError(f"want two Temperature instances 0 and 1: {temperatures}")

    def read(**members):
        return ctl.request("ble.read", peripheral=PEER, service=ESS, characteristic=TEMPERATURE, timeout=60,
                           **members).body

    values = (read(instance=0), read(instance=1))
    if values != (bytes.fromhex("3408"), bytes.fromhex("2c01")):
        raise LabError(f"instances read {[v.hex() for v in values]}, want 3408 (indoor) and 2c01 (outdoor)")
    label = read(instance=1, descriptor=USER_DESCRIPTION)
    if label != b"outdoor":
        raise LabError(f"instance 1's User Description reads {label!r}")
    ctl.request("ble.write", body=b"garden", peripheral=PEER, service=ESS, characteristic=TEMPERATURE, instance=1,
                descriptor=USER_DESCRIPTION, withResponse=True, timeout=60)
    peer.wait_event("written", which="outdoor/2901", value=b"garden".hex(), timeout=30)
    if read(instance=1, descriptor=USER_DESCRIPTION) != b"garden":
        raise LabError("the written User Description does not read back")
    log(f"3. instance 0 = {values[0].hex()}, instance 1 = {values[1].hex()}; descriptor written and read back")

    # ------------------------------------------------ 4. notifications of instance 1 ----
    # vigild subscribes for the app after the link and discovery: a value sent
    # before the CCCD write lands would reach nobody.
    peer.wait_event("subscription", which="outdoor", notify=True, timeout=60)
    peer.command("notify indoor 3508")
    peer.wait_event("notified", which="indoor", timeout=30)
    peer.command("notify outdoor 2d01")
    peer.wait_event("notified", which="outdoor", timeout=30)
    daemon.wait(lambda: any(e["payloadHex"] == "2d01" for e in daemon.events(APP, "ble.notification")), 120,
                "the outdoor value in the app")
    notes = daemon.events(APP, "ble.notification")
    if any(e["payloadHex"] == "3508" for e in notes):
        raise LabError(f"the app got the indoor value, but subscribed to instance 1 only: {notes}")
    if any(e["attributes"].get("instance") != 1 for e in notes):
        raise LabError(f"a notification of the app does not say instance 1: {notes}")
    log(f"4. {len(notes)} notification(s) of instance 1 in the app, none of instance 0")

    # ------------------------------------------------ 5. hci1 off and on ----
    lab.sh("lab_bt_power", "hci1", "off", timeout=120)
    daemon.wait(lambda: any(e["attributes"].get("state") == "poweredOff" and e["attributes"].get("adapter") == "hci1"
                            for e in daemon.events(APP, "ble.adapterState")), 120, "ble.adapterState poweredOff")
    daemon.wait(lambda: daemon.events(APP, "ble.disconnected"), 120, "ble.disconnected in the app")
    lab.sh("lab_bt_power", "hci1", "on", timeout=120)
    daemon.wait(lambda: any(e["attributes"].get("state") == "poweredOn"
                            for e in daemon.events(APP, "ble.adapterState")), 120, "ble.adapterState poweredOn")
    daemon.wait(lambda: len(daemon.events(APP, "ble.connected")) >= 2, 180, "the app reconnected")
    again = daemon.events(APP, "ble.connected")[-1]
    if again["attributes"].get("adapter") != "hci1":
        raise LabError(f"the app's link came back through another adapter: {again}")
    seen_from = {e["address"].split("/")[0].upper() for e in peer.events("connected")}
    if seen_from != {hci1}:
        raise LabError(f"the peer saw connections from {seen_from}: vigild used another adapter than hci1 ({hci1})")
    log("5. hci1 off: reported and waited for; on: reconnected through hci1, never through hci0")
    daemon.stop()
    peer.stop()
    print("OK")
finally:
    # The tests after this one find the usual two controllers. The peer goes
    # first (even after a failure): its user channel would keep hci2 alive.
    lab.sh("lab_daemon_stop", "ess")
    lab.sh("lab_daemon_stop", "vigild")
    lab.sh("lab_bt_relayout", 2, timeout=300)

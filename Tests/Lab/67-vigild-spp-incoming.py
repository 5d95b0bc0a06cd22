#!/usr/bin/env python3
"""Incoming SPP through vigild (issue 29, lab tier): an app publishes a
serial port service (`bluetooth.publishRFCOMMService`); real bluetoothd
registers it (ProfileManager1.RegisterProfile, Role server: the SDP record
and the listening RFCOMM channel) and hands each connection to vigild
(Profile1.NewConnection). A Bumble device on hci1 (rfcomm_peer.py, as a
client) connects over BR/EDR, pairs (the prompt goes to the publishing app),
finds the service by SDP and opens a channel:

1. the app is frozen: the connection wakes it (`bluetooth.rfcomm.incoming`),
   64 KiB from the device reach it byte-exact and its echo reaches the
   device byte-exact;
2. the app is terminated: the service stays, the device connects again and
   the connection relaunches the app; 64 KiB both ways byte-exact again;
3. the app unpublishes the service (here: a force-quit): bluetoothd's SDP
   record goes, and the device's SDP search no longer finds it.
"""
# lab-timeout: 480
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
APP = "org.vigil.lab.sppapp"
CHANNEL = 5
STREAM = 64 * 1024
SERIAL_PORT = "00001101-0000-1000-8000-00805f9b34fb"
t0 = time.monotonic()

lab.bt_up("dual", fresh=True)  # after lab 65 in one boot, without it the device's pairing failed (docs/lab.md)
bluez = lab.Bluez("hci0")
bluez.forget_all()
adapter_props = bluez.obj(bluez.adapter_path, "org.freedesktop.DBus.Properties")
HOST = str(adapter_props.Get("org.bluez.Adapter1", "Address")).upper()
# Page scan on, so the device can connect to the machine over BR/EDR
# (Debian 12's BlueZ has no Adapter1.Connectable; Discoverable implies it).
adapter_props.Set("org.bluez.Adapter1", "Discoverable", bluez.dbus.Boolean(True))
peer = lab.Peer.start("spp", os.path.join(HERE, "rfcomm_peer.py"), "--echo", "--expect", str(STREAM), timeout=150)
peer.wait_event("ready", timeout=30)

service = {"uuid": "0x1101", "channel": CHANNEL, "name": "Vigil echo"}
daemon = acc.Daemon("67", apps={
    APP: {"modes": ["bluetooth-peripheral"], "args": ["--rfcomm-publish", json.dumps(service), "--ble-pair-passkey", "0"]},
}, timings="suspend-grace = 0.5\nwake-budget = 5.0\n")
ctl = daemon.control
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")


def wait_count(kind, n, timeout, what):
    daemon.wait(lambda: len(peer.events(kind)) >= n, timeout, f"device {what}")
    return peer.events(kind)[n - 1]


def incoming_sessions():
    return [e["attributes"]["session"] for e in daemon.events(APP, "bluetooth.rfcomm.incoming")]


def exchange(n, what):
    """The device connects (the n-th time), sends STREAM bytes, and gets them back."""
    peer.command(f"connect {HOST}")
    daemon.wait(lambda: peer.events("dlc-out") or peer.events("connect-failed"), 120, f"the device's channel ({what})")
    if peer.events("connect-failed"):
        raise LabError(f"{what}: {peer.events('connect-failed')}\n{daemon.diagnostics()}")
    opened = wait_count("dlc-out", n, 60, f"channel {n}")
    if opened["channel"] != CHANNEL:
        raise LabError(f"{what}: SDP named channel {opened['channel']}, want {CHANNEL}")
    daemon.wait(lambda: len(incoming_sessions()) >= n, 60, f"bluetooth.rfcomm.incoming ({what})")
    session = incoming_sessions()[n - 1]
    peer.command(f"send {STREAM}")
    received = wait_count("received-all", n, 240, f"{STREAM} bytes echoed ({what})")
    if not received.get("ok"):
        raise LabError(f"{what}: the echo differs: {peer.events('mismatch')}")
    got = daemon.received(APP, session)
    want = bytes(i % 251 for i in range(STREAM))
    if got[:STREAM] != want:
        raise LabError(f"{what}: the app got {len(got)} bytes, not the device's {STREAM} byte-exact")
    peer.command("disconnect")
    wait_count("disconnected", n, 60, f"link {n} down")
    return session


# ------------------------------------------------------- 1. frozen app ----
ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "rfcommPublished") or daemon.records_of(APP, "rfcommRefused"), 60, "the publication")
if daemon.records_of(APP, "rfcommRefused"):
    raise LabError(f"published: {daemon.records_of(APP, 'rfcommRefused')}")
daemon.wait(lambda: f"serial service {SERIAL_PORT} registered" in daemon.log_tail(200), 60,
            "bluetoothd to take the profile")
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
session = exchange(1, "frozen app")
wakes = daemon.decisions(APP, "wake")
if not wakes:
    raise LabError(f"the frozen app was not woken\n{daemon.diagnostics()}")
log(f"1. frozen app woken by the device's channel (session {session}): {STREAM} bytes each way byte-exact "
    f"(pairing prompts answered: {len(daemon.records_of(APP, 'pairingAnswered'))})")

# --------------------------------------------------- 2. stopped app ----
ctl.app_action("terminate", APP)
daemon.wait_state(APP, "notRunning")
launches = len(daemon.records_of(APP, "launch"))
session = exchange(2, "stopped app")
if len(daemon.records_of(APP, "launch")) != launches + 1:
    raise LabError(f"the app was not relaunched by the channel\n{daemon.diagnostics()}")
log(f"2. stopped app relaunched by the device's channel (session {session}): {STREAM} bytes each way byte-exact")

# ----------------------------------------------------- 3. force-quit ----
ctl.app_action("quit", APP)
daemon.wait(lambda: "unpublished the serial service" in daemon.log_tail(200), 60, "the service withdrawn")
log("3. force-quit: the service withdrawn")

peer.command("quit")
daemon.stop()
log(f"PASS in {time.monotonic() - t0:.0f} s")

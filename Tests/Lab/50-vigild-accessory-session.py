#!/usr/bin/env python3
"""vigild with real udev and a real USB CDC-ACM gadget (issue 4, lab tier):

1. a hot-plugged accessory is listed by `vigilctl accessories --json` with its
   USB identity (vendor/product id, serial number, manufacturer, name) and the
   protocols and line settings of the udev rules; watchers hear the connect;
2. records the device sends while the app is suspended wake it and all arrive
   in order, byte for byte what the device (serial_accessory.py) logged;
   one session per accessory and protocol (the holder is named); a control
   session's bytes reach the device;
3. unplug: accessory.disconnected and session.closed (willReopen) for the app;
   replug: a new connection id, session.reopened, and data flows again;
4. an app whose manifest lacks the protocol is refused a session.
"""
# lab-timeout: 240
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import ControlClient, VigilError, log  # noqa: E402

SENSOR_APP = "org.vigil.lab.sensorapp"
CONSOLE_ONLY_APP = "org.vigil.lab.consoleonly"
SERIAL = "VL-ACC-0001"
MANUFACTURER = "Vigil Lab"          # with a space: the descriptor, not udev's ID_VENDOR "Vigil_Lab"
PRODUCT = "Vigil Sensor"

lab.udev_up()
lab.usb_init(4)
rules = acc.install_udev_rules()
# Both apps ask for org.vigil.sensor; only the first declares it.
daemon = acc.Daemon("50", apps={
    SENSOR_APP: {"declares": ["org.vigil.sensor"], "args": ["--accessory-protocol", "org.vigil.sensor"]},
    CONSOLE_ONLY_APP: {"declares": ["org.vigil.console"], "args": ["--accessory-protocol", "org.vigil.sensor"]},
})
ctl = daemon.control
watcher = daemon.connect()
if watcher.watch_accessories()["accessories"]:
    raise LabError("vigild lists accessories before anything is plugged")

# ---------------------------------------------------------------- 1. plug ----
host, dev = lab.usb_plug("sensor", acc.VID, acc.PID, MANUFACTURER, PRODUCT, SERIAL)
log(f"plugged {SERIAL}: host {host}, gadget {dev}")
acc.check_udev_marked(host)
daemon.wait(lambda: any(a["serialNumber"] == SERIAL for a in daemon.accessories()), 30,
            f"vigild to list {SERIAL}")
listing = daemon.vigilctl("accessories")
if len(listing["accessories"]) != 1:
    raise LabError(f"vigilctl accessories --json lists {len(listing['accessories'])} accessories: {listing}")
sensor = listing["accessories"][0]
acc.check_identity(sensor, serial=SERIAL, manufacturer=MANUFACTURER, name=PRODUCT, node=host)
first_id = sensor["connectionID"]
change = watcher.next_accessory_event(timeout=30)
if not change or change["change"] != "connected" or change["accessory"]["connectionID"] != first_id:
    raise LabError(f"watchAccessories: want 'connected' for connection {first_id}, got {change}")
log(f"1. identity OK: {sensor}")

# ------------------------------------------ 2. records wake a suspended app ----
ctl.app_action("launch", SENSOR_APP)
opened = daemon.wait(lambda: daemon.records_of(SENSOR_APP, "sessionOpened"), 60, "the app's session")[0]
session = opened["session"]
if opened["connectionID"] != first_id:
    raise LabError(f"the app opened its session on connection {opened['connectionID']}, want {first_id}")
ctl.app_action("background", SENSOR_APP)
daemon.wait_state(SENSOR_APP, "suspended")
wakes_before = len(daemon.decisions(SENSOR_APP, "wake"))
log(f"app suspended with session {session} open; the device starts sending")

COUNT = 16
peer = lab.Peer.start("records", "serial_accessory.py", "--device", dev, "--mode", "records",
                      "--rate", "8", "--count", str(COUNT))


def expected_records() -> bytes:
    return b"".join((e["line"] + "\n").encode() for e in peer.events("record"))


def got_all_records() -> bool:
    got, sent = daemon.received(SENSOR_APP, session), expected_records()
    if not sent.startswith(got):  # out of order, altered or extra bytes: fail now, not at the timeout
        raise LabError(f"the app received bytes the device did not send in this order:\n"
                       f"got  {got!r}\nsent {sent!r}")
    return len(peer.events("done")) == 1 and got == sent


daemon.wait(got_all_records, 90, f"all {COUNT} records in the app, byte-exact")
records = expected_records()
if len(peer.events("record")) != COUNT:
    raise LabError(f"the device logged {len(peer.events('record'))} records, want {COUNT}")
data_events = [e for e in daemon.events(SENSOR_APP, "session.data") if e["attributes"].get("session") == session]
wakes = daemon.decisions(SENSOR_APP, "wake")[wakes_before:]
data_wakes = [d for d in wakes if "session.data" in d["reason"]]
if not data_wakes:
    raise LabError(f"no wake decision for session.data while suspended; decisions: {wakes}")
if len(data_wakes) > COUNT:
    raise LabError(f"{len(data_wakes)} wakes for {COUNT} records: more than one wake per record write")
daemon.wait_state(SENSOR_APP, "suspended", 30)  # finishes early after each batch
info = next(s for s in daemon.sessions() if s["session"] == session)
if info["bytesIn"] != len(records) or info["overruns"] or info["bufferedBytes"]:
    raise LabError(f"session counters: {info}, want bytesIn={len(records)}, no overruns, nothing buffered")
log(f"2. {COUNT} records ({len(records)} bytes) arrived in order in {len(data_events)} session.data "
    f"events with {len(data_wakes)} wakes; the app is suspended again")

# One session per accessory and protocol: another holder is refused, by name.
try:
    ctl.open_session(first_id, "org.vigil.sensor")
    raise LabError("a second session on org.vigil.sensor was granted")
except VigilError as exc:
    if exc.code != "invalidState" or SENSOR_APP not in exc.message:
        raise LabError(f"second session refused with {exc}, want invalidState naming {SENSOR_APP}")
# The other protocol is free: a control session's bytes reach the device.
console = ctl.open_session(first_id, "org.vigil.console")["session"]
g = lab.open_raw(dev)
try:
    if ctl.write(console, b"ping\n") != 5:
        raise LabError("write did not report 5 bytes")
    if lab.read_exact(g, 5, 20, "the control session's bytes on the device") != b"ping\n":
        raise LabError("the device received other bytes than the control session wrote")
finally:
    os.close(g)
ctl.close_session(console)
log("one session per protocol (holder named); control session bytes reach the device")

# ---------------------------------------------------------- 3. unplug/replug ----
lab.usb_unplug("sensor")


def closed_for_reopen():
    return [e for e in daemon.events(SENSOR_APP, "session.closed")
            if e["attributes"].get("session") == session and e["attributes"].get("willReopen") is True]


daemon.wait(lambda: [e for e in daemon.events(SENSOR_APP, "accessory.disconnected")
                     if e["attributes"].get("connectionID") == first_id], 30,
            f"accessory.disconnected for connection {first_id} in the app")
daemon.wait(closed_for_reopen, 30, f"session.closed (willReopen) for session {session}")
change = watcher.next_accessory_event(timeout=30)
if not change or change["change"] != "disconnected" or change["accessory"]["connectionID"] != first_id:
    raise LabError(f"watchAccessories: want 'disconnected' for connection {first_id}, got {change}")
if daemon.vigilctl("accessories")["accessories"]:
    raise LabError("vigilctl still lists an accessory after the unplug")
log("unplug: accessory.disconnected, session.closed (willReopen), nothing listed")

host2, dev2 = lab.usb_replug("sensor")
reopened = daemon.wait(lambda: [e for e in daemon.events(SENSOR_APP, "session.reopened")
                                if e["attributes"].get("session") == session], 60,
                       f"session.reopened for session {session}")[0]
second_id = reopened["attributes"]["connectionID"]
if second_id == first_id:
    raise LabError(f"the replugged accessory kept connection id {first_id}")
connected = [e for e in daemon.events(SENSOR_APP, "accessory.connected")
             if e["attributes"].get("connectionID") == second_id]
if not connected:
    raise LabError(f"no accessory.connected for the new connection {second_id}")
change = watcher.next_accessory_event(timeout=30)
if not change or change["change"] != "connected" or change["accessory"]["connectionID"] != second_id:
    raise LabError(f"watchAccessories: want 'connected' for connection {second_id}, got {change}")
now = daemon.vigilctl("accessories")["accessories"]
if [a["connectionID"] for a in now] != [second_id]:
    raise LabError(f"after the replug vigilctl lists {now}, want connection {second_id}")
acc.check_identity(now[0], serial=SERIAL, manufacturer=MANUFACTURER, name=PRODUCT, node=host2)
before = daemon.received(SENSOR_APP, session)
if before != records:
    raise LabError("the app's bytes changed across the unplug")
# The same device writing again (from here: a peer costs seconds of Python start-up).
more = b"16,9.000000,59.2\n17,9.125000,62.9\n"
g = lab.open_raw(dev2)
try:
    lab.write_all(g, more)
    daemon.wait(lambda: daemon.received(SENSOR_APP, session) == before + more, 60,
                "the records sent after the replug")
finally:
    os.close(g)
log(f"3. replug: connection {first_id} -> {second_id} ({host} -> {host2}), session {session} reopened, data flows")

# ------------------------------------------------ 4. undeclared protocol ----
ctl.app_action("launch", CONSOLE_ONLY_APP)
failure = daemon.wait(lambda: daemon.records_of(CONSOLE_ONLY_APP, "openFailed"), 60,
                      f"{CONSOLE_ONLY_APP}'s refused session")[0]
if "notPermitted" not in failure["error"] or "does not declare" not in failure["error"]:
    raise LabError(f"refusal: {failure['error']!r}, want notPermitted ... does not declare")
if daemon.records_of(CONSOLE_ONLY_APP, "sessionOpened"):
    raise LabError(f"{CONSOLE_ONLY_APP} got a session for a protocol it does not declare")
holders = [s["holder"] for s in daemon.sessions()]
if any(CONSOLE_ONLY_APP in h for h in holders):
    raise LabError(f"vigild lists a session held by {CONSOLE_ONLY_APP}: {holders}")
log(f"4. undeclared protocol refused: {failure['error']}")
# `notPermitted` answers the one request: the app keeps its connection.
if daemon.records_of(CONSOLE_ONLY_APP, "disconnected"):
    raise LabError(f"vigild closed {CONSOLE_ONLY_APP}'s connection after refusing its session")

watcher.close()
daemon.stop()
rules.remove()
print("OK")

#!/usr/bin/env python3
"""Two accessories at once, and coalescing (issue 4, lab tier):

1. an accessory plugged before vigild starts is found by enumeration, one
   plugged afterwards by hot-plug; a USB serial device the udev rules do not
   mark is not an accessory;
2. two identical accessories (same vendor/product id, different serial
   numbers) are both listed, with distinct connection ids and their own
   nodes, and each session gets its own device's bytes;
3. while an app cannot receive (force-quit), a connect followed by the
   disconnect of the same connection is withdrawn from its queue: after the
   relaunch the app gets the other queued event (a disconnect) but nothing of
   that connection.
"""
# lab-timeout: 240
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.listener"
A, B, C = "VL-ACC-A", "VL-ACC-B", "VL-ACC-C"

lab.udev_up()
lab.usb_init(4)
rules = acc.install_udev_rules()

# ------------------------------------------------ 1. enumeration, unmarked ----
host_a, dev_a = lab.usb_plug("acc-a", acc.VID, acc.PID, "Vigil Lab", "Vigil Sensor", A)
host_x, _ = lab.usb_plug("plain", acc.VID, 0x7010, "Vigil Lab", "Plain Serial", "VL-PLAIN-X")
acc.check_udev_marked(host_a)
if lab.udev_properties(host_x).get("VIGIL_ACCESSORY"):
    raise LabError(f"the udev rules marked {host_x} (1209:7010) as an accessory")
# The app registers for notifications but opens nothing (no accessory speaks
# org.vigil.none); its manifest declares what the accessories speak.
daemon = acc.Daemon("52", apps={
    APP: {"declares": ["org.vigil.sensor"], "args": ["--accessory-protocol", "org.vigil.none"]},
})
listed = daemon.wait(lambda: daemon.accessories(), 30, f"vigild to enumerate {A} at start")
if [a["serialNumber"] for a in listed] != [A]:
    raise LabError(f"at start vigild lists {listed}, want only {A} (not the unmarked {host_x})")
lab.usb_remove("plain")
log(f"1. enumeration at start found {A} at {host_a}; the unmarked {host_x} is not an accessory")

# ------------------------------------------------------- 2. two at once ----
host_b, dev_b = lab.usb_plug("acc-b", acc.VID, acc.PID, "Vigil Lab", "Vigil Sensor", B)
daemon.wait(lambda: len(daemon.accessories()) == 2, 30, f"vigild to list {A} and {B}")
both = {a["serialNumber"]: a for a in daemon.vigilctl("accessories")["accessories"]}
if sorted(both) != [A, B]:
    raise LabError(f"vigilctl accessories --json lists {sorted(both)}, want {[A, B]}")
acc.check_identity(both[A], serial=A, manufacturer="Vigil Lab", name="Vigil Sensor", node=host_a)
acc.check_identity(both[B], serial=B, manufacturer="Vigil Lab", name="Vigil Sensor", node=host_b)
id_a, id_b = both[A]["connectionID"], both[B]["connectionID"]
if id_a == id_b or host_a == host_b:
    raise LabError(f"the two accessories share a connection id or node: {both}")

# Each session reads its own device.
ctl = daemon.control
sess = {A: ctl.open_session(id_a, "org.vigil.sensor")["session"],
        B: ctl.open_session(id_b, "org.vigil.sensor")["session"]}
got = {sess[A]: b"", sess[B]: b""}
fds = {A: lab.open_raw(dev_a), B: lab.open_raw(dev_b)}
try:
    lab.write_all(fds[A], b"from A\n")
    lab.write_all(fds[B], b"from B\n")

    def both_arrived():
        msg = ctl.next_session_output(timeout=0.2)
        if msg is not None:
            if msg.type != "sessionData" or msg["session"] not in got:
                raise LabError(f"unexpected push {msg.header}")
            got[msg["session"]] += msg.body
        return all(v.endswith(b"\n") for v in got.values())
    daemon.wait(both_arrived, 30, "each accessory's bytes on its session", interval=0)
finally:
    for fd in fds.values():
        os.close(fd)
if got != {sess[A]: b"from A\n", sess[B]: b"from B\n"}:
    raise LabError(f"sessions got {got}, want A's bytes on session {sess[A]} and B's on {sess[B]}")
ctl.close_session(sess[A])
ctl.close_session(sess[B])
log(f"2. {A} (connection {id_a}, {host_a}) and {B} (connection {id_b}, {host_b}) listed together; "
    "each session got its own device's bytes")

# ------------------------------------------------------------ 3. coalescing ----
ctl.app_action("launch", APP)
# The app registers before it reads its first lifecycle message (didFinishLaunching).
daemon.wait(lambda: daemon.records_of(APP, "lifecycle"), 60, "the app to register for notifications")
ctl.app_action("quit", APP)
daemon.wait_state(APP, "notRunning")
first_pid = daemon.records_of(APP, "launch")[0]["pid"]


def queued() -> int:
    return daemon.app(APP)["queuedEvents"]


base = queued()
lab.usb_unplug("acc-b")                                 # delivered later: B's disconnect
daemon.wait(lambda: queued() == base + 1, 30, f"{B}'s disconnect to be queued for the force-quit app")
host_c, _ = lab.usb_plug("acc-c", acc.VID, acc.PID, "Vigil Lab", "Vigil Sensor", C)
id_c = daemon.wait(lambda: next((a["connectionID"] for a in daemon.accessories() if a["serialNumber"] == C), None),
                   30, f"vigild to list {C}")
daemon.wait(lambda: queued() == base + 2, 30, f"{C}'s connect to be queued")
lab.usb_unplug("acc-c")
daemon.wait(lambda: not any(a["serialNumber"] == C for a in daemon.accessories()), 30, f"{C} to go away")
daemon.wait(lambda: queued() == base + 1, 30, f"{C}'s connect and disconnect to be withdrawn (coalesced)")
if daemon.state(APP) != "notRunning":
    raise LabError(f"the force-quit app was started by accessory events: {daemon.app(APP)}")
log(f"force-quit app: queue {base} -> +1 ({B} gone) -> +2 ({C} connected) -> +1 ({C} gone: withdrawn)")

ctl.app_action("launch", APP)


def relaunched_and_drained():
    recs = [r for r in daemon.read(APP) if r.get("pid") != first_pid]
    a = daemon.app(APP)
    return recs and a["queuedEvents"] == 0 and a["unacknowledgedEvents"] == 0 and [
        e for e in recs if e.get("kind") == "event" and e["eventKind"] == "accessory.disconnected"
        and e["attributes"].get("connectionID") == id_b]


daemon.wait(relaunched_and_drained, 60, f"the relaunched app to get {B}'s disconnect and drain its queue")
about_c = [e for e in daemon.read(APP) if e.get("kind") == "event" and e["attributes"].get("connectionID") == id_c]
if about_c:
    raise LabError(f"the app got events of {C}'s connection {id_c}, which came and went while it could not "
                   f"receive: {about_c}")
log(f"3. after the relaunch: {B}'s disconnect delivered, nothing of {C} (connection {id_c}): coalesced")
daemon.stop()
rules.remove()
print("OK")

#!/usr/bin/env python3
"""Peripheral role: a GATT service registered with BlueZ on hci0 (python3-dbus
GattManager1.RegisterApplication + LE advertisement) is found, read, written
and subscribed to by the Bumble central on hci1; values must match what the
server served / received / notified."""
# lab-timeout: 180
import json, os, subprocess, sys
import vigillab as lab
from vigillab import LabError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "helpers"))
import bluez_gatt_server as gs

lab.bt_up()
server = lab.Peer.start("gatt-server", os.path.join(HERE, "helpers", "bluez_gatt_server.py"),
                        "--name", "Vigil GATT")
events = os.path.join(lab.LOGS, "central.events.jsonl")
cmd = ["python3", os.path.join(lab.PEERS, "central.py"), "--transport", "hci-socket:1",
       "--service", gs.SERVICE_UUID, "--read", gs.READ_UUID,
       "--write", f"{gs.WRITE_UUID}=c0ffee", "--subscribe", gs.NOTIFY_UUID,
       "--notifications", "3", "--timeout", "40", "--scan-timeout", "40", "--events", events]
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
print(p.stdout, end="")
evs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
if p.returncode != 0:
    errs = [e["message"] for e in evs if e["event"] == "error"]
    raise LabError(f"Bumble central failed (exit {p.returncode}): {errs or p.stdout[-500:]}")
read = [e for e in evs if e["event"] == "read"]
if not read or bytes.fromhex(read[0]["value"]) != gs.READ_VALUE:
    raise LabError(f"central read {read}, server serves {gs.READ_VALUE!r}")
server.wait_event("write", uuid=gs.WRITE_UUID, value="c0ffee", timeout=10)
got = [e["value"] for e in evs if e["event"] == "notification"]
sent = [e["value"] for e in server.events("notify")]
if len(got) < 3:
    raise LabError(f"central got {len(got)} notifications, want 3")
start = sent.index(got[0]) if got[0] in sent else -1
if start < 0 or sent[start:start + len(got)] != got:
    raise LabError(f"notifications {got} are not what the server sent in order: {sent}")
lab.log(f"central read {gs.READ_VALUE!r}, wrote c0ffee, got notifications {got}")
print("OK")

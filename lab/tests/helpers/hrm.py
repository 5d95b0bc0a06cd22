"""Shared check: BlueZ (hci0) central against the Bumble heart-rate monitor (hci1).

Used by the 2x-ble-hrm-* tests and by the broken-peer self-check.
"""

from __future__ import annotations

import os

import vigillab as lab
from vigillab import LabError

NAME = "Vigil HRM"
HRS_UUID = lab.full_uuid("180d")


def run_check(peer_args: list[str], notifications: int = 6, location: int = 1,
              check_control_point: bool = True, notify_timeout: float = 20) -> None:
    lab.log("bringing up BlueZ (no-op when the suite did it)")
    lab.bt_up()
    bz = lab.Bluez("hci0")
    bz.forget_all()
    lab.log("starting the heart-rate monitor peer on hci1")
    peer = lab.Peer.start("hrm", "heart_rate_monitor.py", "--name", NAME,
                          "--location", str(location), "--interval", "0.3",
                          "--count", str(notifications), *peer_args,
                          *os.environ.get("LAB_HRM_EXTRA_ARGS", "").split())
    lab.log("peer advertising; discovering it from hci0")
    dev = None
    try:
        dev = bz.discover(name=NAME, uuid=HRS_UUID, timeout=30)
        lab.log(f"discovered {dev}")
        bz.connect(dev, timeout=60)
        lab.log("connected, services resolved")

        bsl = bz.read(bz.characteristic(dev, "2a38"))
        if bsl != bytes([location]):
            raise LabError(f"Body Sensor Location read {bsl.hex()}, peer serves {location:02x}")
        peer.wait_event("read", uuid="2a38", timeout=5)
        lab.log(f"Body Sensor Location = {bsl[0]}")

        hrm = bz.characteristic(dev, "2a37")
        bz.start_notify(hrm)
        first = 3 if check_control_point else notifications
        bz.wait_notifications(hrm, first, notify_timeout,
                              "Heart Rate Measurement (0x2A37) notifications from the peer")
        if check_control_point:
            cp = bz.characteristic(dev, "2a39")
            try:
                bz.write(cp, b"\x02")
                raise LabError("control point accepted unsupported opcode 0x02 (want ATT error 0x80)")
            except bz.dbus.DBusException as exc:
                lab.log(f"opcode 0x02 rejected as expected: {exc.get_dbus_name()}: {exc.get_dbus_message()}")
            bz.write(cp, b"\x01")
            peer.wait_event("energy-reset", timeout=10)
            lab.log("control point 0x01: energy expended reset")
            bz.wait_notifications(hrm, notifications, notify_timeout,
                                  "Heart Rate Measurement notifications after the control point write")
        got = bz.notifications[hrm][:notifications]
        sent = peer.wait_event("count-reached", timeout=10) and peer.events("notify")
        if len(sent) < len(got):
            raise LabError(f"received {len(got)} notifications but the peer logged only {len(sent)}")
        for i, (raw, ev) in enumerate(zip(got, sent)):
            dec = lab.decode_heart_rate(raw)
            want = {k: ev[k] for k in ("hr", "format", "contact", "energy", "rr")}
            if raw.hex() != ev["data"] or dec != want:
                raise LabError(f"notification {i}: got {raw.hex()} = {dec}, peer sent {ev['data']} = {want}")
            lab.log(f"notification {i}: {dec}")
        if check_control_point and any(e["energy"] is not None for e in sent):
            reset_at = next(i for i, e in enumerate(peer.events()) if e["event"] == "energy-reset")
            after = [e for e in peer.events()[reset_at:] if e["event"] == "notify"]
            if not after or after[0]["energy"] != 0:
                raise LabError(f"first notification after the reset has energy {after[0]['energy'] if after else None}, want 0")
        bz.stop_notify(hrm)
    finally:
        if dev:
            bz.disconnect(dev)
            bz.remove_device(dev)
        peer.stop()

#!/usr/bin/env python3
"""RFCOMM throughput through vigild against a direct reader, in the same
boot (issue 29, lab tier; docs/performance.md "RFCOMM"): a Bumble SPP
device on hci1 (rfcomm_peer.py) sends STREAM bytes of its pattern on a
fresh channel each round, read either by a plain RFCOMM socket in this
process (the direct reader) or through vigild (a control client's channel:
vigild's socket, session log and pushes). Rounds alternate, so load drifts
hit both; the figure is the ratio of the medians, printed, not asserted
(timing goals are not pass/fail under TCG). Fails only on wrong bytes.
"""
# lab-timeout: 480
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402
import spp_lab  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CHANNEL = 3
STREAM = 128 * 1024
ROUNDS = 3
t0 = time.monotonic()


def pattern(start, n):
    """What the device sends: byte[i] = i % 251, from 0 on each channel."""
    return bytes(i % 251 for i in range(start, start + n))


lab.bt_up("dual")
bluez = lab.Bluez("hci0")
bluez.forget_all()
peer = lab.Peer.start("spp", os.path.join(HERE, "rfcomm_peer.py"), "--channel", str(CHANNEL), timeout=150)
ADDRESS = peer.wait_event("ready", timeout=30)["address"].upper()
spp_lab.discover(bluez, ADDRESS)
daemon = acc.Daemon("68", apps={})
ctl = daemon.control
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
spp_lab.pair(daemon, ADDRESS)
opened = 0


def wait_open():
    global opened
    opened += 1
    daemon.wait(lambda: len(peer.events("dlc-open")) >= opened, 60, f"the device's channel {opened}")


def direct():
    """A plain RFCOMM socket reads the stream: seconds."""
    with socket.socket(socket.AF_BLUETOOTH, socket.SOCK_STREAM, socket.BTPROTO_RFCOMM) as s:
        s.settimeout(120)
        s.connect((ADDRESS, CHANNEL))
        wait_open()
        started = time.monotonic()
        peer.command(f"send {STREAM}")
        got = bytearray()
        while len(got) < STREAM:
            chunk = s.recv(65536)
            if not chunk:
                raise LabError(f"direct reader: the channel closed after {len(got)} bytes")
            got += chunk
        elapsed = time.monotonic() - started
    if bytes(got) != pattern(0, STREAM):
        raise LabError("direct reader: wrong bytes")
    return elapsed


def through_vigild():
    """vigild's channel for a control client reads the stream: seconds."""
    channel = ctl.request("bluetooth.openRFCOMMChannel", device=ADDRESS, channel=CHANNEL, timeout=60)["channel"]
    wait_open()
    started = time.monotonic()
    peer.command(f"send {STREAM}")
    got = bytearray()
    deadline = started + 120
    while len(got) < STREAM and time.monotonic() < deadline:
        message = ctl.next_session_output(timeout=max(0.01, deadline - time.monotonic()))
        if message is not None and message.type == "sessionData" and message["session"] == channel["session"]:
            got += message.body
    elapsed = time.monotonic() - started
    ctl.request("closeSession", session=channel["session"])
    if bytes(got) != pattern(0, STREAM):
        raise LabError(f"through vigild: {len(got)} bytes, not the device's {STREAM} byte-exact")
    return elapsed


times = {"direct": [], "vigild": []}
for n in range(ROUNDS):
    times["direct"].append(direct())
    times["vigild"].append(through_vigild())
    log(f"   round {n + 1}: direct {times['direct'][-1]:.2f} s, through vigild {times['vigild'][-1]:.2f} s for {STREAM // 1024} KiB")
direct_s, vigild_s = statistics.median(times["direct"]), statistics.median(times["vigild"])
kib = STREAM / 1024
log(f"RFCOMM {kib:.0f} KiB device -> reader, median of {ROUNDS}: direct {direct_s:.2f} s ({kib / direct_s:.1f} KiB/s), "
    f"through vigild {vigild_s:.2f} s ({kib / vigild_s:.1f} KiB/s): {direct_s / vigild_s:.2f}x the direct reader's throughput; "
    f"load {os.getloadavg()[0]:.1f}")
peer.command("quit")
daemon.stop()
log(f"PASS in {time.monotonic() - t0:.0f} s")

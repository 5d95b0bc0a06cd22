#!/usr/bin/env python3
"""RFCOMM (Bluetooth Classic serial, SPP) through vigild (issue 29, lab
tier), against real bluetoothd and kernel RFCOMM on btvirt's dual-mode
controllers and a Bumble SPP device (rfcomm_peer.py) on hci1:

1. bad requests get clear errors: a channel outside 1-30 and neither or
   both of channel and uuid (`invalidArgument`), a device BlueZ does not
   know (`notFound`), a channel nothing listens on and a service the device
   does not offer (`notFound`);
2. control role: a channel carries 5000 bytes from the device byte-exact,
   and closing the session closes it at the device;
3. an app with `bluetooth-central` opens a channel by the Serial Port
   service's UUID (0x1101, the channel found through SDP; reopen) and is
   suspended: 1 MiB from the device arrive byte-exact through a 16 KiB
   session buffer (vigild stops reading when it is full; RFCOMM credits
   hold the device back), the app woken per data event;
5. the device drops the link: the app hears the channel closed
   (willReopen), vigild connects again (`bluetooth.rfcomm.reopened`, same
   session), and 64 KiB flow byte-exact after;
4. (after 5) 64 KiB from the app (a background task, after a wake) arrive
   byte-exact at the device;
6. vigild is SIGKILLed mid-stream: the restarted vigild delivers every byte
   it had read into the session log before the kill, byte-exact, then ends
   the session (an RFCOMM socket dies with vigild), the app told why.
"""
# lab-timeout: 480
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log, VigilError  # noqa: E402
import spp_lab  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
APP = "org.vigil.lab.rfcommapp"
CHANNEL = 3
STREAM = 1024 * 1024
BUFFER = 16384
DATA = "/tmp/vigil-lab-65-app.bin"
APP_EXEC = [acc.APP_PYTHON, os.path.join(HERE, "l2cap_app.py")]
t0 = time.monotonic()


def outbound(start, n):
    """What the device sends: byte[i] = i % 251."""
    return bytes(i % 251 for i in range(start, start + n))


def check_bytes(got, start, what):
    want = outbound(start, len(got))
    if got != want:
        first = next(i for i in range(len(got)) if got[i] != want[i])
        raise LabError(f"{what}: byte {start + first} is {got[first]}, want {want[first]} ({len(got)} bytes)")


def expect_error(code, what, **members):
    try:
        ctl.request("bluetooth.openRFCOMMChannel", timeout=60, **members)
    except VigilError as error:
        if error.code != code:
            raise LabError(f"{what}: want {code}, got {error.code}: {error}\n{daemon.diagnostics()}") from None
        log(f"   {what}: {error.code}: {error}")
        return
    raise LabError(f"{what}: the channel was opened")


if os.path.exists(DATA):
    os.unlink(DATA)

lab.bt_up("dual")
bluez = lab.Bluez("hci0")
bluez.forget_all()
# Python and Bumble take 30 s and more to start under TCG on a busy host.
peer = lab.Peer.start("spp", os.path.join(HERE, "rfcomm_peer.py"), "--channel", str(CHANNEL), "--expect", "65536",
                      timeout=150)
ADDRESS = peer.wait_event("ready", timeout=30)["address"].upper()
log(f"   SPP device on hci1 at {ADDRESS}, channel {CHANNEL}")

spp_lab.discover(bluez, ADDRESS)

daemon = acc.Daemon("65", apps={
    APP: {"exec": APP_EXEC, "modes": ["bluetooth-central"],
          "args": ["--data", DATA, "--rfcomm", ADDRESS, "--uuid", "0x1101", "--reopen"]},
}, config=f"session-buffer-limit = {BUFFER}", timings="suspend-grace = 0.5\nwake-budget = 5.0\n")
ctl = daemon.control


def app_data():
    try:
        with open(DATA, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return b""


def wait_count(kind, n, timeout, what):
    daemon.wait(lambda: len(peer.events(kind)) >= n, timeout, f"device {what}")
    return peer.events(kind)[n - 1]


# ------------------------------------------------- pairing through vigild ----
# The kernel needs a link key for any RFCOMM channel to an SSP device (security
# "low" only spares SDP): pair through vigild's agent first, answering its prompt.
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")

spp_lab.pair(daemon, ADDRESS)

# ------------------------------------------------------ 1. bad requests ----
expect_error("invalidArgument", "channel 31", device=ADDRESS, channel=31)
expect_error("invalidArgument", "neither channel nor uuid", device=ADDRESS)
expect_error("invalidArgument", "channel and uuid", device=ADDRESS, channel=CHANNEL, uuid="0x1101")
expect_error("notFound", "unknown device", device="00:AA:BB:CC:DD:EE", channel=CHANNEL)
expect_error("notFound", "unserved channel", device=ADDRESS, channel=CHANNEL + 1)
expect_error("notFound", "service not offered", device=ADDRESS, uuid="0x1234")
log("1. bad requests refused with clear errors")

# ------------------------------------------------------ 2. control role ----
channel = ctl.request("bluetooth.openRFCOMMChannel", device=ADDRESS, channel=CHANNEL, timeout=60)["channel"]
wait_count("dlc-open", 1, 30, "channel 1 open")
peer.command("send 5000")
got = b""
deadline = time.monotonic() + 60
while len(got) < 5000 and time.monotonic() < deadline:
    message = ctl.next_session_output(timeout=max(0.01, deadline - time.monotonic()))
    if message is not None and message.type == "sessionData" and message["session"] == channel["session"]:
        got += message.body
check_bytes(got, 0, "control channel")
if len(got) != 5000:
    raise LabError(f"control channel: {len(got)} of 5000 bytes\n{daemon.diagnostics()}")
ctl.request("closeSession", session=channel["session"])
wait_count("dlc-closed", 1, 30, "channel 1 closed")
log(f"2. control role: {channel}: 5000 bytes byte-exact, closed at the device")

# ------------------------------------------- 3. a stream to a frozen app ----
ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "channelOpened"), 90, "the app's channel")
opened = daemon.records_of(APP, "channelOpened")[-1]["channel"]
session = opened["session"]
if opened["channel"] != CHANNEL:
    raise LabError(f"the app's channel by UUID is {opened}, want channel {CHANNEL} (SDP)")
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
wait_count("dlc-open", 2, 30, "the app's channel open")
sent_at = time.monotonic()
peer.command(f"send {STREAM}")
daemon.wait(lambda: len(app_data()) >= STREAM, 240, f"{STREAM} bytes in the app")
elapsed = time.monotonic() - sent_at
check_bytes(app_data(), 0, "device to app")
if len(app_data()) != STREAM:
    raise LabError(f"device to app: {len(app_data())} bytes, want {STREAM}")
wakes = [d for d in daemon.decisions(APP, "wake") if "session.data" in d.get("reason", "")]
if len(wakes) < 2:
    raise LabError(f"the app was not woken per data event: {len(wakes)} wakes\n{daemon.diagnostics()}")
vigild_log = open(daemon.log_path).read() if os.path.exists(daemon.log_path) else ""
paused = vigild_log.count(f"session {session}: buffer full")
log(f"3. by UUID 0x1101: channel {CHANNEL} (SDP); {STREAM} bytes device -> suspended app byte-exact in {elapsed:.1f} s "
    f"({STREAM / 1024 / max(elapsed, 1e-6):.0f} KiB/s): {len(daemon.records_of(APP, 'data'))} data events, "
    f"{len(wakes)} wakes; through a {BUFFER}-byte buffer: reading paused {paused} time(s), no byte lost")

# ----------------------------------------------- 5. link loss and reopen ----
daemon.wait_state(APP, "suspended")
peer.command("disconnect")
daemon.wait(lambda: any(r["willReopen"] for r in daemon.records_of(APP, "closed")), 60,
            "session.closed (willReopen) in the app")
daemon.wait(lambda: daemon.records_of(APP, "reopened"), 120, "bluetooth.rfcomm.reopened in the app")
reopened = daemon.records_of(APP, "reopened")[-1]["channel"]
if reopened["session"] != session:
    raise LabError(f"reopened as session {reopened['session']}, want {session}")
wait_count("dlc-open", 3, 30, "the reopened channel")
before = len(app_data())
peer.command("send 65536")
daemon.wait(lambda: len(app_data()) >= before + 65536, 120, "64 KiB after the reopen")
check_bytes(app_data()[before:], 0, "after the reopen")
log(f"5. link dropped: closed (willReopen), reopened as session {session}, 64 KiB byte-exact after")

# ----------------------------------------------------- 4. app -> device ----
ctl.wake(APP, kind="l2cap.send", attributes={"bytes": 65536})
received = wait_count("received-all", 1, 120, "64 KiB from the app")
if not received.get("ok"):
    raise LabError(f"app to device: wrong bytes: {peer.events('mismatch')}")
log("4. 64 KiB app -> device (on the reopened channel) byte-exact")

# ------------------------------------------ 6. vigild SIGKILLed mid-stream ----
daemon.wait_state(APP, "suspended")
stream_start = len(app_data())
peer.command(f"send {STREAM}")
daemon.wait(lambda: len(app_data()) >= stream_start + 16384, 120, "the stream under way")


def logged_offset():
    """The stream offset after the last byte vigild read into the session's log (its header)."""
    with open(f"{daemon.dir}/state/session-logs/{session}.log", "rb") as f:
        return struct.unpack_from("<Q", f.read(48), 24)[0]


written = daemon.sigkill(before_kill=logged_offset)
if not stream_start + 16384 <= written < stream_start + STREAM:
    raise LabError(f"the kill was not mid-stream: {written - stream_start} bytes of {STREAM} logged")
daemon.restart()
ctl = daemon.control
daemon.wait(lambda: len(app_data()) >= written, 120, "the bytes vigild logged before the kill")
daemon.wait(lambda: any("vigild restarted" in (r["reason"] or "") for r in daemon.records_of(APP, "closed")), 60,
            "session.closed after the restart")
if len(app_data()) != written:
    raise LabError(f"after the restart the app has {len(app_data())} bytes of the session, want {written}")
check_bytes(app_data()[stream_start:], 65536, "the stream up to the kill")  # step 5's send was the channel's first 64 KiB
closed = [r for r in daemon.records_of(APP, "closed") if "vigild restarted" in (r["reason"] or "")][-1]
if closed["willReopen"]:
    raise LabError(f"the session was to reopen after the restart: {closed}")
log(f"6. vigild SIGKILLed {written - stream_start} bytes into a {STREAM}-byte stream: the app got all of them "
    f"byte-exact after the restart, then the session ended ({closed['reason']})")

peer.command("quit")
daemon.stop()
log(f"PASS in {time.monotonic() - t0:.0f} s")

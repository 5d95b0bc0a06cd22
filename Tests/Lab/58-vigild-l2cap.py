#!/usr/bin/env python3
"""L2CAP connection-oriented channels through vigild (issue 16, lab tier),
against real bluetoothd and kernel L2CAP and a Bumble peer on hci1:

1. control role (vigilctl's): a PSM the peer does not serve is refused
   (`notFound`); a channel to the peer's PSM carries what it sends, and
   closing the session closes the channel at the peer; `vigilctl ble l2cap
   open` sends its stdin;
2. an app with `bluetooth-central` opens a channel (reopen) and is suspended:
   1 MiB from the peer arrives byte-exact through a 16 KiB session buffer
   (vigild stops reading when it is full; the kernel withholds the peer's
   credits), the app woken per data event;
3. 1 MiB from the app (a background task, after a wake) arrives byte-exact
   at the peer;
4. the peer drops the link: the app hears the channel closed (willReopen),
   vigild reconnects and reopens it (`ble.l2cap.reopened`, same session),
   and data flows again;
5. vigild is SIGKILLed mid-stream, with the app's `reopen` channel busy and
   a second app's dynamic PSM published. The restarted vigild delivers every byte it had read into the session
   log before the kill, byte-exact, reopens the channel on the same session
   once it has reconnected (`ble.l2cap.reopened`), and new data flows; it
   listens on the published PSM again;
6. the peer closes the channel with the link up: the app hears it closed
   for good;
7. peripheral role: a Bumble central opens a channel to the PSM the second
   app published before the kill: the app (adopted frozen, and reconnecting)
   gets `ble.l2cap.incoming` and 64 KiB each way, and publishing again
   returns the same PSM; a second client asking for the PSM is refused.
"""
# lab-timeout: 600
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log, VigilError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
APP, SERVER_APP = "org.vigil.lab.l2capapp", "org.vigil.lab.l2capserver"
ADDRESS = "C0:DE:00:00:00:20"   # l2cap_peer.py's static random address
PSM = 0x80
MIB = 1 << 20
BUFFER = 16384   # the channel's session buffer: 1 MiB through it means reading stops and starts again
DATA = "/tmp/vigil-lab-58-app.bin"
SERVER_DATA = "/tmp/vigil-lab-58-server.bin"
APP_EXEC = [acc.APP_PYTHON, os.path.join(HERE, "l2cap_app.py")]


def outbound(start, n):
    """What the peer sends: byte[i] = i % 251."""
    return bytes(i % 251 for i in range(start, start + n))


for path in (DATA, SERVER_DATA):
    if os.path.exists(path):
        os.unlink(path)

lab.bt_up()
lab.Bluez("hci0").forget_all()
peer = lab.Peer.start("l2peer", os.path.join(HERE, "l2cap_peer.py"), "--role", "server", "--psm", hex(PSM),
                      "--expect", str(MIB))
daemon = acc.Daemon("58", apps={
    APP: {"exec": APP_EXEC, "modes": ["bluetooth-central"],
          "args": ["--data", DATA, "--peripheral", ADDRESS, "--psm", hex(PSM), "--reopen"]},
    SERVER_APP: {"exec": APP_EXEC, "modes": ["bluetooth-peripheral"],
                 "args": ["--data", SERVER_DATA, "--publish", "Vigil L2CAP App"]},
}, config=f"session-buffer-limit = {BUFFER}", timings="suspend-grace = 0.5\nwake-budget = 5.0\n")
ctl = daemon.control
push = daemon.push


def wait_count(p, kind, n, timeout, what):
    """Waits for the peer's n-th `kind` event (earlier channels logged some too)."""
    daemon.wait(lambda: len(p.events(kind)) >= n, timeout, f"peer {what}")
    return p.events(kind)[n - 1]


def app_data():
    try:
        with open(DATA, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return b""


def check_bytes(got, start, what):
    want = outbound(start, len(got))
    if got != want:
        first = next(i for i in range(len(got)) if got[i] != want[i])
        raise LabError(f"{what}: byte {start + first} is {got[first]}, want {want[first]} ({len(got)} bytes)")


# ------------------------------------------------ 1. control role ----
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
try:
    ctl.request("ble.openL2CAPChannel", peripheral=ADDRESS, psm=PSM)
    raise LabError("a channel to a peripheral not connected was opened")
except VigilError as error:
    if error.code != "notConnected":
        raise LabError(f"not connected: want notConnected, got {error.code}: {error}") from None
ctl.request("ble.connect", peripheral=ADDRESS)
push(ctl, "ble.connected")
try:
    ctl.request("ble.openL2CAPChannel", peripheral=ADDRESS, psm=0x99, timeout=60)
    raise LabError("a channel to a PSM the peer does not serve was opened")
except VigilError as error:
    if error.code != "notFound":
        raise LabError(f"unserved PSM: want notFound, got {error.code}: {error}\n{daemon.diagnostics()}") from None
    log(f"   unserved PSM refused: {error}")
channel = ctl.request("ble.openL2CAPChannel", peripheral=ADDRESS, psm=PSM, timeout=60)["channel"]
log(f"   control channel: {channel}")
wait_count(peer, "channel-open", 1, 30, "channel 1 open")
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
wait_count(peer, "channel-closed", 1, 30, "channel 1 closed")
ctl.request("ble.disconnect", peripheral=ADDRESS)
log(f"1. control role: unserved PSM refused, 5000 bytes byte-exact (send MTU {channel['sendMTU']}, "
    f"receive MTU {channel['receiveMTU']}), closed at the peer")

# vigilctl ble l2cap open: stdin to the channel, EOF closes it.
# Bumble keeps a closed channel's CID taken while its link lasts ("source CID 64
# already in use" refused vigilctl's channel): wait for the link to go first.
wait_count(peer, "disconnected", 1, 30, "link down after the control channel")
sent_bytes = bytes((i + 7) % 253 for i in range(3000))
vigilctl = subprocess.run([acc.VIGILCTL, "ble", "l2cap", "open", ADDRESS, hex(PSM), "--socket", daemon.socket],
                          input=sent_bytes, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
if vigilctl.returncode != 0:
    raise LabError(f"vigilctl ble l2cap open failed ({vigilctl.returncode}): {vigilctl.stderr.decode()}")
closed = wait_count(peer, "channel-closed", 2, 30, "vigilctl's channel closed")
if closed["received"] != 3000 or not closed["ok"]:
    raise LabError(f"vigilctl's 3000 bytes arrived as {closed}")
log(f"   vigilctl ble l2cap open: 3000 bytes from stdin byte-exact at the peer ({vigilctl.stderr.decode().strip()})")

# ------------------------------------ 2. 1 MiB to a suspended app ----
ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "channelOpened"), 90, "the app's channel")
session = daemon.records_of(APP, "channelOpened")[-1]["channel"]["session"]
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
wait_count(peer, "channel-open", 3, 30, "the app's channel open")
sent_at = time.monotonic()
peer.command(f"send {MIB}")
daemon.wait(lambda: len(app_data()) >= MIB, 300, "1 MiB in the app")
elapsed = time.monotonic() - sent_at
check_bytes(app_data(), 0, "peer to app")
if len(app_data()) != MIB:
    raise LabError(f"peer to app: {len(app_data())} bytes, want {MIB}")
wakes = [d for d in daemon.decisions(APP, "wake") if "session.data" in d.get("reason", "")]
suspends = daemon.decisions(APP, "suspend")
data_events = daemon.records_of(APP, "data")
if len(wakes) < 2:
    raise LabError(f"the app was not woken per data event: {len(wakes)} wakes\n{daemon.diagnostics()}")
vigild_log = open(daemon.log_path).read() if os.path.exists(daemon.log_path) else ""
full = vigild_log.count("receive queue was full")
paused = vigild_log.count(f"session {session}: buffer full")
log(f"2. 1 MiB peer -> suspended app byte-exact in {elapsed:.1f} s: {len(data_events)} data events, "
    f"{len(wakes)} wakes, {len(suspends)} suspensions; through a {BUFFER}-byte buffer: reading paused {paused} "
    f"time(s), kernel queue full {full} time(s), no byte lost")

# ------------------------------------------------ 3. 1 MiB app -> peer ----
ctl.wake(APP, kind="l2cap.send", attributes={"bytes": MIB})
received = wait_count(peer, "received-all", 1, 300, "1 MiB from the app")
if not received.get("ok"):
    raise LabError(f"app to peer: the peer saw wrong bytes: {peer.events('mismatch')}")
daemon.wait(lambda: daemon.records_of(APP, "sent"), 60, "the app's sent record")
log(f"3. 1 MiB app -> peer byte-exact ({received['sdus']} SDUs)")

# ------------------------------------------- 4. link loss and reopen ----
daemon.wait_state(APP, "suspended")
peer.command("disconnect")
daemon.wait(lambda: any(r["willReopen"] for r in daemon.records_of(APP, "closed")), 60,
            "session.closed (willReopen) in the app")
daemon.wait(lambda: daemon.records_of(APP, "reopened"), 120, "ble.l2cap.reopened in the app")
reopened = daemon.records_of(APP, "reopened")[-1]["channel"]
if reopened["session"] != session:
    raise LabError(f"reopened as session {reopened['session']}, want {session}")
wait_count(peer, "channel-open", 4, 30, "the reopened channel")
before = len(app_data())
peer.command("send 65536")
daemon.wait(lambda: len(app_data()) >= before + 65536, 120, "64 KiB after the reopen")
check_bytes(app_data()[before:], 0, "after the reopen")
log(f"4. link dropped: closed (willReopen), reopened as session {session}, 64 KiB byte-exact after")

# --------------------------------------- 5. vigild SIGKILLed mid-stream ----
# The second app publishes a dynamic PSM first: the restarted vigild must listen on it again.
ctl.app_action("launch", SERVER_APP)
daemon.wait(lambda: daemon.records_of(SERVER_APP, "published"), 90, "the server app's PSM")
psm = daemon.records_of(SERVER_APP, "published")[-1]["psm"]
ctl.app_action("background", SERVER_APP)
daemon.wait_state(SERVER_APP, "suspended")
daemon.wait_state(APP, "suspended")
reopens, opens = len(daemon.records_of(APP, "reopened")), len(peer.events("channel-open"))
links_down = len(peer.events("disconnected"))
stream_start = len(app_data())
peer.command(f"send {MIB}")
daemon.wait(lambda: len(app_data()) >= stream_start + 65536, 120, "the stream under way")


def logged_offset():
    """The stream offset after the last byte vigild read into the session's log (its header)."""
    with open(f"{daemon.dir}/state/session-logs/{session}.log", "rb") as f:
        return struct.unpack_from("<Q", f.read(48), 24)[0]


written = daemon.sigkill(before_kill=logged_offset)
if not stream_start + 65536 <= written < stream_start + MIB:
    raise LabError(f"the kill was not mid-stream: {written - stream_start} bytes of {MIB} logged")
# The channel died with vigild's socket; the link stays (bluetoothd holds it), and the
# restarted vigild opens the channel again at once. Bumble may refuse that channel: it
# keeps a closed channel's CID taken while its link lasts (see 1.), and the kernel may
# give the new channel the same one. Then the peer drops the link, and vigild reconnects
# and reopens as after any link loss (step 4).
offset = daemon.restart()
ctl = daemon.control


def reopened_or_refused():
    if len(daemon.records_of(APP, "reopened")) > reopens:
        return "reopened at once"
    return daemon.logged_since(offset, f"l2cap: session {session}: cannot") and "refused"


how = daemon.wait(reopened_or_refused, 60, "the channel opened again after the restart")
if how == "refused":
    peer.command("disconnect")
    wait_count(peer, "disconnected", links_down + 1, 30, "the link down")
    how = "reopened after a reconnect"
daemon.wait(lambda: len(daemon.records_of(APP, "reopened")) > reopens, 120, "ble.l2cap.reopened after the restart")
reopened = daemon.records_of(APP, "reopened")[-1]["channel"]
if reopened["session"] != session:
    raise LabError(f"reopened after the restart as session {reopened['session']}, want {session}")
wait_count(peer, "channel-open", opens + 1, 30, "the channel reopened after the restart")
# Everything vigild had logged before the kill reaches the app, once, in order; nothing else
# can come (the old channel is gone, the peer has not sent on the new one).
daemon.wait(lambda: len(app_data()) >= written, 60, "the bytes vigild logged before the kill")
if len(app_data()) != written:
    raise LabError(f"after the restart the app has {len(app_data())} bytes of the session, want {written}")
# The peer's pattern goes on where step 4's 64 KiB on this channel stopped.
check_bytes(app_data()[stream_start:], 65536, "the stream up to the kill")
interrupted = [r for r in daemon.records_of(APP, "closed") if "vigild restarted" in (r["reason"] or "")]
if not interrupted or not interrupted[-1]["willReopen"]:
    raise LabError(f"the app was not told the restart interrupted its channel: {daemon.records_of(APP, 'closed')}")
peer.command("send 65536")
daemon.wait(lambda: len(app_data()) >= written + 65536, 120, "64 KiB after the restart")
check_bytes(app_data()[written:], 0, "after the restart")
if not daemon.logged_since(offset, f"PSM {psm} listens again"):
    raise LabError(f"the restarted vigild does not say it listens on PSM {psm} again\n{daemon.log_tail()}")
log(f"5. vigild SIGKILLed {written - stream_start} bytes into a 1 MiB stream: after the restart the app got all "
    f"{written - stream_start} logged bytes byte-exact (what the kernel held unread died with the socket), "
    f"session {session} {how}, 64 KiB byte-exact after; PSM {psm} listens again")

# -------------------------------------------- 6. the peer closes it ----
peer.command("close")
daemon.wait(lambda: any(r["willReopen"] is False for r in daemon.records_of(APP, "closed")), 60,
            "session.closed for good in the app")
closed = [r for r in daemon.records_of(APP, "closed") if r["willReopen"] is False][-1]
log(f"6. peer closed the channel: the app heard it ({closed['reason']})")
ctl.app_action("quit", APP)  # force-quit: vigild lets go of its link
peer.command("disconnect")
peer.command("quit")
peer.stop()

# ------------------------------------------------- 7. peripheral role ----
# The PSM the server app published before the kill (step 5), held for it by the restarted vigild.
try:
    ctl.request("ble.publishL2CAPChannel", psm=psm)
    raise LabError(f"a second client published PSM {psm}")
except VigilError as error:
    if error.code != "invalidState":
        raise LabError(f"second publisher: want invalidState, got {error.code}: {error}") from None
daemon.wait_state(SERVER_APP, "suspended")
central = lab.Peer.start("l2central", os.path.join(HERE, "l2cap_peer.py"), "--role", "client", "--psm", str(psm),
                         "--address", "C0:DE:00:00:00:21", "--target-name", "Vigil L2CAP App",
                         "--expect", "65536")
central.wait_event("channel-open", timeout=90)
daemon.wait(lambda: daemon.records_of(SERVER_APP, "incoming"), 60, "ble.l2cap.incoming in the server app")
central.command("send 65536")
daemon.wait(lambda: os.path.exists(SERVER_DATA) and os.path.getsize(SERVER_DATA) >= 65536, 120,
            "64 KiB in the server app")
with open(SERVER_DATA, "rb") as file:
    check_bytes(file.read(), 0, "central to server app")
ctl.wake(SERVER_APP, kind="l2cap.send", attributes={"bytes": 65536})
if not central.wait_event("received-all", timeout=120).get("ok"):
    raise LabError(f"server app to central: wrong bytes: {central.events('mismatch')}")
republished = [r["psm"] for r in daemon.records_of(SERVER_APP, "published")]
if len(republished) < 2 or set(republished) != {psm}:
    raise LabError(f"the server app published {republished} across the restart, want {psm} every time")
log(f"7. peripheral role: PSM {psm} published before the kill took a central's channel after it, which woke "
    "the app; 64 KiB each way byte-exact; publishing again returned the same PSM; second publisher refused")
central.command("quit")
daemon.stop()
log("PASS")

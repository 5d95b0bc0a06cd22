#!/usr/bin/env python3
"""Benchmark (issue 16): L2CAP channel throughput from a Bumble peer (LE
credit-based, Tests/Lab/l2cap_peer.py on hci1) to a consumer on hci0, directly
and through vigild, in one lab boot. Prints figures, asserts nothing (it
fails only when it cannot measure or the bytes are wrong). Not in CI: run it
with `scripts/vigil-lab run -- lab/tests/run-suite lab/bench --filter '^92-'`.

Paths, each receiving $LAB_BENCH_BYTES (default 1 MiB) per round:
  direct          a socket client in this process (AF_BLUETOOTH, SOCK_SEQPACKET,
                  BTPROTO_L2CAP; receive MTU 2048 as vigild's) reading with
                  recv(); the baseline
  vigild, awake   Tests/Lab/l2cap_app.py as an app with bluetooth-central in
                  the foreground: vigild reads the channel into the session
                  log, the app gets session.data events, copies each range
                  out of the log to a file and acknowledges
  vigild, frozen  the same app in the background: suspended between events,
                  each session.data event is a wake (thaw, deliver, ack, freeze)
Time per path: from the peer's `send` command to the last byte at the
consumer (polled every 20 ms for the app); throughput = bytes / time. The
rounds alternate the paths so drift touches each alike. Absolute figures
are TCG's; the ratios to direct in the same boot are the result.
"""
# lab-timeout: 1200
import ctypes
import json
import os
import socket
import statistics
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "Tests", "Lab"))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402

APP = "org.vigil.lab.l2capbench"
ADDRESS, PSM = "C0:DE:00:00:00:20", 0x80
N = int(os.environ.get("LAB_BENCH_BYTES", str(1 << 20)))
ROUNDS = int(os.environ.get("LAB_BENCH_ROUNDS", "3"))
DATA = "/tmp/vigil-lab-92-app.bin"
libc = ctypes.CDLL(None, use_errno=True)


def pattern(start, n):
    return bytes(i % 251 for i in range(start, start + n))


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """user + system CPU of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def vigild_pid():
    with open(os.path.join(lab.RUN, "vigild.pid")) as file:
        return int(file.read().strip())


def app_pid(daemon):
    return daemon.records_of(APP, "launch")[-1]["pid"]


def wait_count(peer, kind, n, timeout, what):
    lab.wait_for(lambda: len(peer.events(kind)) >= n, timeout, f"peer {what}")


def sockaddr_l2(address, psm, kind):
    bdaddr = bytes(int(part, 16) for part in reversed(address.split(":")))
    return ctypes.create_string_buffer(struct.pack("<HH6sHBx", socket.AF_BLUETOOTH, psm, bdaddr, 0, kind), 14)


def direct_round(peer, opened):
    """One round of the baseline: a socket of our own, 2048-byte receive MTU."""
    s = socket.socket(socket.AF_BLUETOOTH, socket.SOCK_SEQPACKET, socket.BTPROTO_L2CAP)
    try:
        local = sockaddr_l2("00:00:00:00:00:00", 0, 1)  # BDADDR_ANY, LE public: an LE socket
        if libc.bind(s.fileno(), local, 14) != 0:
            raise LabError(f"bind: {os.strerror(ctypes.get_errno())}")
        s.setsockopt(274, 13, struct.pack("<H", 2048))  # SOL_BLUETOOTH, BT_RCVMTU
        if libc.connect(s.fileno(), sockaddr_l2(ADDRESS, PSM, 2), 14) != 0:  # BDADDR_LE_RANDOM
            raise LabError(f"connect: {os.strerror(ctypes.get_errno())}")
        wait_count(peer, "channel-open", opened + 1, 30, "direct channel open")
        got = bytearray()
        start, cpu = time.monotonic(), time.process_time()
        peer.command(f"send {N}")
        while len(got) < N:
            chunk = s.recv(65536)
            if not chunk:
                raise LabError(f"direct channel closed after {len(got)} bytes")
            got += chunk
        elapsed = time.monotonic() - start
        cpus["direct"].append(time.process_time() - cpu)
        if bytes(got) != pattern(0, N):
            raise LabError("direct: wrong bytes")
        return elapsed
    finally:
        s.close()


def app_size():
    try:
        return os.path.getsize(DATA)
    except FileNotFoundError:
        return 0


def vigild_round(peer, daemon, offset, start_of_pattern, path):
    """N more bytes of the app's channel: at `offset` in the app's file, the
    peer's pattern from `start_of_pattern` (it starts at 0 on each channel)."""
    start = time.monotonic()
    daemon_cpu, app_cpu = cpu_seconds(vigild_pid()), cpu_seconds(app_pid(daemon))
    events_before = len(daemon.records_of(APP, "data"))
    peer.command(f"send {N}")
    while app_size() < offset + N:
        if time.monotonic() - start > 600:
            raise LabError(f"vigild: {app_size() - offset} of {N} bytes after 600 s\n{daemon.diagnostics()}")
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    cpus[path].append(cpu_seconds(vigild_pid()) - daemon_cpu)
    cpus[path + " (app)"].append(cpu_seconds(app_pid(daemon)) - app_cpu)
    events[path].append(len(daemon.records_of(APP, "data")) - events_before)  # the app records each session.data
    with open(DATA, "rb") as file:
        file.seek(offset)
        if file.read(N) != pattern(start_of_pattern, N):
            raise LabError("vigild: wrong bytes")
    return elapsed


if os.path.exists(DATA):
    os.unlink(DATA)
lab.bt_up()
lab.Bluez("hci0").forget_all()
peer = lab.Peer.start("l2peer", os.path.join(REPO, "Tests", "Lab", "l2cap_peer.py"), "--role", "server", "--psm", hex(PSM))
daemon = acc.Daemon("92", apps={APP: {
    "exec": [acc.APP_PYTHON, os.path.join(REPO, "Tests", "Lab", "l2cap_app.py")], "modes": ["bluetooth-central"],
    "args": ["--data", DATA, "--peripheral", ADDRESS, "--psm", hex(PSM)]}},
    timings="suspend-grace = 0.5\nwake-budget = 5.0\n")
ctl = daemon.control
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "hci0 powered on")

times = {"direct": [], "vigild, awake": [], "vigild, frozen": []}
events = {"vigild, awake": [], "vigild, frozen": []}
cpus = {"direct": [], "vigild, awake": [], "vigild, awake (app)": [], "vigild, frozen": [], "vigild, frozen (app)": []}
opened = 0
for round_ in range(ROUNDS):
    times["direct"].append(direct_round(peer, opened))
    opened += 1
    wait_count(peer, "channel-closed", opened, 30, "direct channel closed")
    # Bumble 0.0.236 keeps a closed channel's CID taken while its link lasts
    # ("source CID 64 already in use" refuses the next channel): a new link each time.
    peer.command("disconnect")
    wait_count(peer, "disconnected", 2 * round_ + 1, 30, "link down after the direct round")
    ctl.app_action("launch", APP)
    daemon.wait(lambda: len(daemon.records_of(APP, "channelOpened")) > round_, 90, "the app's channel")
    wait_count(peer, "channel-open", opened + 1, 30, "the app's channel open")
    opened += 1
    offset = app_size()
    times["vigild, awake"].append(vigild_round(peer, daemon, offset, 0, "vigild, awake"))
    ctl.app_action("background", APP)
    daemon.wait_state(APP, "suspended")
    times["vigild, frozen"].append(vigild_round(peer, daemon, offset + N, N, "vigild, frozen"))  # the peer's pattern goes on
    wakes = len([d for d in daemon.decisions(APP, "wake") if "session.data" in d.get("reason", "")])
    ctl.app_action("quit", APP)  # closes the channel and lets go of the link
    wait_count(peer, "channel-closed", opened, 60, "the app's channel closed")
    peer.command("disconnect")  # if vigild has not dropped it yet
    wait_count(peer, "disconnected", 2 * round_ + 2, 60, "link down after the vigild rounds")
    log(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()) + f"; {wakes} wakes so far")

base = statistics.median(times["direct"])
rows = []
for path, values in times.items():
    median = statistics.median(values)
    rows.append({"path": path, "seconds": values, "median_s": round(median, 3),
                 "kib_per_s": round(N / 1024 / median, 1), "ratio_to_direct": round(base / median, 3)})
print(f"\nL2CAP channel, {N} bytes per path and round, {ROUNDS} rounds (TCG: compare the ratios)")
print(f"{'path':<16} {'median s':>9} {'KiB/s':>9} {'x direct':>9}")
for row in rows:
    print(f"{row['path']:<16} {row['median_s']:>9.2f} {row['kib_per_s']:>9.1f} {row['ratio_to_direct']:>9.3f}")
print(f"\nCPU seconds per path and round (median; the direct client's is its recv loop, vigild's its whole process)")
for path, values in cpus.items():
    print(f"{path:<22} {statistics.median(values):>7.3f}")
print(f"\nsession.data events per path and round (median; rounds)")
for path, values in events.items():
    print(f"{path:<22} {statistics.median(values):>7.0f}  {values}")
results = os.environ.get("VIGIL_LAB_RESULTS", "/tmp")
with open(os.path.join(results, "l2cap-bench.json"), "w") as file:
    json.dump({"bytes": N, "rounds": ROUNDS, "paths": rows, "cpu_seconds": cpus, "data_events": events}, file, indent=1)
daemon.stop()

#!/usr/bin/env python3
"""Benchmark (issue 16): L2CAP channel throughput from a Bumble peer (LE
credit-based, Tests/Lab/l2cap_peer.py on hci1) to a consumer on hci0, directly
and through vigild, in one lab boot. Prints figures, asserts nothing (it
fails only when it cannot measure or the bytes are wrong). Not in CI: run it
with `scripts/vigil-lab run --timeout 2700 -- lab/tests/run-suite lab/bench
--filter '^92-'` (3 rounds take about 4 minutes of guest time on a quiet
host, 15-21 on a loaded one: more than the guest's default 900 s).

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
  vigild, awake, coalesce 0
                  the awake app with a channel opened with
                  coalesceMilliseconds 0: every read announced at once
                  (the latency setting; the others use the default 100 ms)
  GATT direct     the same bytes as notifications of a characteristic the
                  peer serves (--stream-service; each value MTU - 3 bytes, the
                  ATT MTU as BlueZ and Bumble negotiate it, printed), read by
                  this process from BlueZ's AcquireNotify socket (its own
                  link, Device1.Connect); the GATT baseline
  GATT vigild, awake / frozen
                  l2cap_app.py --notify: subscribed with ble.notify (vigild
                  takes AcquireNotify), the values of each ble.notification
                  event appended to a file; foreground, then background
  GATT23 direct / vigild, awake / frozen
                  the three GATT paths again at ATT MTU 23 (20-byte values:
                  the peer's `att-mtu 23` before the links are made), with
                  $LAB_BENCH_GATT23_BYTES per round (default 64 KiB: 3277
                  values; 0 leaves them out)
With LAB_BENCH_ONLY_GATT=1 the L2CAP paths are left out (the GATT goal's
runs: a few minutes instead of 15-21 on a loaded host); GATT paths are also
given as a ratio to the direct AcquireNotify client of their MTU.
Time per path: from the peer's `send` (or `notify`) command to the last byte
at the consumer (polled every 20 ms for the apps); throughput = bytes / time.
GATT notifications have no flow control: a value bluetoothd cannot pass on
is lost, so a GATT path that goes 10 s without a byte is reported with what
it got. The rounds alternate the paths so drift touches each alike.
Absolute figures are TCG's; the ratios to direct L2CAP in the same boot
are the result.
"""
# lab-timeout: 2400
import ctypes
import json
import os
import select
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
APP_NC = "org.vigil.lab.l2capbench.nocoalesce"
APP_GATT = "org.vigil.lab.gattbench"
ADDRESS, PSM = "C0:DE:00:00:00:20", 0x80
SERVICE, CHARACTERISTIC = "7e1a0001-5d3c-4c1b-9a3e-76a9e0c1b001", "7e1a0002-5d3c-4c1b-9a3e-76a9e0c1b001"
N = int(os.environ.get("LAB_BENCH_BYTES", str(1 << 20)))
ROUNDS = int(os.environ.get("LAB_BENCH_ROUNDS", "3"))
N23 = int(os.environ.get("LAB_BENCH_GATT23_BYTES", str(64 << 10)))
ONLY_GATT = os.environ.get("LAB_BENCH_ONLY_GATT") == "1"
DATA = "/tmp/vigil-lab-92-app.bin"
DATA_NC = "/tmp/vigil-lab-92-app-nc.bin"
DATA_GATT = "/tmp/vigil-lab-92-app-gatt.bin"
IDLE = 10.0  # a GATT path with no byte for this long has lost some
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


def app_pid(daemon, app=APP):
    return daemon.records_of(app, "launch")[-1]["pid"]


def bluetoothd_cpu():
    try:
        with open(os.path.join(lab.RUN, "bluetoothd.pid")) as file:
            return cpu_seconds(int(file.read().strip()))
    except (OSError, ValueError):
        return float("nan")


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


def app_size(data=DATA):
    try:
        return os.path.getsize(data)
    except FileNotFoundError:
        return 0


def vigild_round(peer, daemon, offset, start_of_pattern, path, app=APP, data=DATA, gatt=False, n=N):
    """N more bytes to an app: at `offset` in its file, the peer's pattern
    from `start_of_pattern` (it starts at 0 on each channel or subscription).
    A channel's bytes must all come; GATT values may be lost (see IDLE)."""
    start = time.monotonic()
    daemon_cpu, app_cpu, bt_cpu = cpu_seconds(vigild_pid()), cpu_seconds(app_pid(daemon, app)), bluetoothd_cpu()
    record = "notification" if gatt else "data"
    events_before = len(daemon.records_of(app, record))
    peer.command(f"{'notify' if gatt else 'send'} {n}")
    last, since = app_size(data), time.monotonic()
    while app_size(data) < offset + n:
        size = app_size(data)
        if size != last:
            last, since = size, time.monotonic()
        if gatt and time.monotonic() - since > IDLE:
            break
        if time.monotonic() - start > 600:
            raise LabError(f"vigild: {size - offset} of {n} bytes after 600 s\n{daemon.diagnostics()}")
        time.sleep(0.02)
    elapsed = (since if gatt and app_size(data) < offset + n else time.monotonic()) - start
    cpus[path].append(cpu_seconds(vigild_pid()) - daemon_cpu)
    cpus[path + " (app)"].append(cpu_seconds(app_pid(daemon, app)) - app_cpu)
    if gatt:
        cpus[path + " (bluetoothd)"].append(bluetoothd_cpu() - bt_cpu)
    events[path].append(len(daemon.records_of(app, record)) - events_before)  # the app records each event
    got = min(app_size(data), offset + n) - offset
    received.setdefault(path, []).append(got)
    with open(data, "rb") as file:
        file.seek(offset)
        if file.read(got) != pattern(start_of_pattern, got):
            raise LabError(f"{path}: wrong bytes" + (" (values lost on the way?)" if got < n else ""))
    return elapsed


def direct_gatt_round(peer, bz, path="GATT direct (AcquireNotify)", n=N, start_of_pattern=0):
    """The GATT baseline: this process connects through BlueZ (its own link)
    and reads the characteristic's AcquireNotify socket, one value per read."""
    import dbus
    dev = bz.discover(address=ADDRESS, timeout=60)
    bz.connect(dev)
    subscribed = len(peer.events("subscription"))
    char = bz.obj(bz.characteristic(dev, CHARACTERISTIC), "org.bluez.GattCharacteristic1")
    fd_obj, mtu = char.AcquireNotify(dbus.Dictionary({}, signature="sv"))
    fd = fd_obj.take()
    try:
        wait_subscribed(peer, subscribed, "the direct client's subscription")
        mtus[path] = int(mtu)
        got = bytearray()
        start, cpu, bt_cpu = time.monotonic(), time.process_time(), bluetoothd_cpu()
        last, notified = start, len(peer.events("notified"))
        peer.command(f"notify {n}")
        while len(got) < n:
            if not select.select([fd], [], [], IDLE)[0]:
                break
            value = os.read(fd, 4096)
            if not value:
                break
            got += value
            last = time.monotonic()
        elapsed = last - start
        cpus[path].append(time.process_time() - cpu)
        cpus[path + " (bluetoothd)"].append(bluetoothd_cpu() - bt_cpu)
        received.setdefault(path, []).append(len(got))
        if bytes(got) != pattern(start_of_pattern, len(got)):
            raise LabError(f"{path}: wrong bytes" + (" (values lost on the way?)" if len(got) < n else ""))
        wait_count(peer, "notified", notified + 1, 120, "the notifications sent")
        return elapsed
    finally:
        os.close(fd)
        down = len(peer.events("disconnected"))
        bz.disconnect(dev)
        wait_count(peer, "disconnected", down + 1, 60, "the direct GATT link down")


def wait_subscribed(peer, before, what):
    """Waits for a subscription (notify on) after the first `before` subscription events."""
    lab.wait_for(lambda: any(e.get("notify") for e in peer.events("subscription")[before:]), 90, f"peer: {what}")


def link_down(peer, before, what):
    """Drops the peer's link (if still up) and waits for its disconnected event."""
    peer.command("disconnect")
    wait_count(peer, "disconnected", before + 1, 60, f"link down after {what}")


def launch(app, record, count, what):
    ctl.app_action("launch", app)
    daemon.wait(lambda: len(daemon.records_of(app, record)) > count, 90, what)


for path in (DATA, DATA_NC, DATA_GATT):
    if os.path.exists(path):
        os.unlink(path)
lab.bt_up()
bz = lab.Bluez("hci0")
# Not pumped while measuring: no copy of every PropertiesChanged for it.
bz.bus.remove_signal_receiver(bz._on_props, "PropertiesChanged", "org.freedesktop.DBus.Properties",
                              "org.bluez", path_keyword="path")
bz.forget_all()
peer = lab.Peer.start("l2peer", os.path.join(REPO, "Tests", "Lab", "l2cap_peer.py"), "--role", "server",
                      "--psm", hex(PSM), "--stream-service", SERVICE, "--stream-characteristic", CHARACTERISTIC)
APP_EXEC = [acc.APP_PYTHON, os.path.join(REPO, "Tests", "Lab", "l2cap_app.py")]
daemon = acc.Daemon("92", apps={
    APP: {"exec": APP_EXEC, "modes": ["bluetooth-central"],
          "args": ["--data", DATA, "--peripheral", ADDRESS, "--psm", hex(PSM)]},
    APP_NC: {"exec": APP_EXEC, "modes": ["bluetooth-central"],
             "args": ["--data", DATA_NC, "--peripheral", ADDRESS, "--psm", hex(PSM), "--coalesce-ms", "0"]},
    APP_GATT: {"exec": APP_EXEC, "modes": ["bluetooth-central"],
               "args": ["--data", DATA_GATT + ".unused", "--peripheral", ADDRESS,
                        "--notify", f"{SERVICE}/{CHARACTERISTIC}", "--notify-data", DATA_GATT]}},
    timings="suspend-grace = 0.5\nwake-budget = 5.0\n")
ctl = daemon.control
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "hci0 powered on")

L2CAP_PATHS = [] if ONLY_GATT else ["direct", "vigild, awake", "vigild, frozen", "vigild, awake, coalesce 0"]
GATT_DIRECT = "GATT direct (AcquireNotify)"
# (prefix, bytes per round, ATT MTU the peer accepts)
GATT_VARIANTS = [("GATT", N, 517)] + ([("GATT23", N23, 23)] if N23 > 0 else [])
GATT_PATHS = [p for prefix, _, _ in GATT_VARIANTS
              for p in (f"{prefix} direct (AcquireNotify)", f"{prefix} vigild, awake", f"{prefix} vigild, frozen")]
NBYTES = {p: N for p in L2CAP_PATHS}
NBYTES.update({p: n for prefix, n, _ in GATT_VARIANTS for p in GATT_PATHS if p.split(" ")[0] == prefix})
VIGILD_PATHS = [p for p in L2CAP_PATHS + GATT_PATHS if "vigild" in p]
times = {path: [] for path in L2CAP_PATHS + GATT_PATHS}
events = {path: [] for path in VIGILD_PATHS}
cpus = {"direct": []}
for path in GATT_PATHS:
    cpus.update({path: [], path + " (bluetoothd)": []})
for path in VIGILD_PATHS:
    cpus[path + " (app)"] = []
received: dict = {}
mtus: dict = {}
wakes = {p: 0 for p in VIGILD_PATHS if p.endswith("frozen")}
opened = 0


def gatt_rounds(prefix, n, att_mtu, round_):
    """The three GATT paths at one ATT MTU: direct AcquireNotify, then the app awake and frozen."""
    peer.command(f"att-mtu {att_mtu}")
    times[f"{prefix} direct (AcquireNotify)"].append(direct_gatt_round(peer, bz, f"{prefix} direct (AcquireNotify)", n))
    subscribed, notified = len(peer.events("subscription")), len(peer.events("notified"))
    launch(APP_GATT, "subscribed", len(daemon.records_of(APP_GATT, "subscribed")), "the GATT app's ble.notify")
    wait_subscribed(peer, subscribed, "the GATT app's subscription")
    offset = app_size(DATA_GATT)
    awake, frozen = f"{prefix} vigild, awake", f"{prefix} vigild, frozen"
    times[awake].append(vigild_round(peer, daemon, offset, 0, awake, app=APP_GATT, data=DATA_GATT, gatt=True, n=n))
    wait_count(peer, "notified", notified + 1, 120, "the awake app's notifications sent")
    mtus[f"{prefix} vigild"] = peer.events("notified")[-1]["mtu"]
    offset = app_size(DATA_GATT)  # after a loss the frozen round's bytes start where these ended
    start_of_pattern = peer.events("notified")[-1]["bytes"]
    ctl.app_action("background", APP_GATT)
    daemon.wait_state(APP_GATT, "suspended")
    wakes_before = len([d for d in daemon.decisions(APP_GATT, "wake") if "ble.notification" in d.get("reason", "")])
    times[frozen].append(vigild_round(peer, daemon, offset, start_of_pattern, frozen, app=APP_GATT,
                                      data=DATA_GATT, gatt=True, n=n))
    wait_count(peer, "notified", notified + 2, 120, "the frozen app's notifications sent")
    wakes[frozen] += len([d for d in daemon.decisions(APP_GATT, "wake")
                          if "ble.notification" in d.get("reason", "")]) - wakes_before
    down = len(peer.events("disconnected"))
    ctl.app_action("quit", APP_GATT)
    link_down(peer, down, "the GATT app rounds")


for round_ in range(ROUNDS):
    if not ONLY_GATT:
        # -- L2CAP: direct, then the app awake and frozen (100 ms window), then awake with no window.
        times["direct"].append(direct_round(peer, opened))
        opened += 1
        wait_count(peer, "channel-closed", opened, 30, "direct channel closed")
        # Bumble 0.0.236 keeps a closed channel's CID taken while its link lasts
        # ("source CID 64 already in use" refuses the next channel): a new link each time.
        link_down(peer, len(peer.events("disconnected")), "the direct round")
        # l2cap_app.py writes a channel's bytes at their stream offset (from 0 on
        # each channel): a new file per channel.
        for path in (DATA, DATA_NC):
            if os.path.exists(path):
                os.unlink(path)
        launch(APP, "channelOpened", round_, "the app's channel")
        wait_count(peer, "channel-open", opened + 1, 30, "the app's channel open")
        opened += 1
        offset = 0
        times["vigild, awake"].append(vigild_round(peer, daemon, offset, 0, "vigild, awake"))
        ctl.app_action("background", APP)
        daemon.wait_state(APP, "suspended")
        wakes_before = len([d for d in daemon.decisions(APP, "wake") if "session.data" in d.get("reason", "")])
        times["vigild, frozen"].append(vigild_round(peer, daemon, offset + N, N, "vigild, frozen"))  # the peer's pattern goes on
        wakes["vigild, frozen"] += len([d for d in daemon.decisions(APP, "wake") if "session.data" in d.get("reason", "")]) - wakes_before
        down = len(peer.events("disconnected"))
        ctl.app_action("quit", APP)  # closes the channel and lets go of the link
        wait_count(peer, "channel-closed", opened, 60, "the app's channel closed")
        link_down(peer, down, "the vigild rounds")  # if vigild has not dropped it yet

        launch(APP_NC, "channelOpened", round_, "the coalesce-0 app's channel")
        wait_count(peer, "channel-open", opened + 1, 30, "the coalesce-0 app's channel open")
        opened += 1
        times["vigild, awake, coalesce 0"].append(
            vigild_round(peer, daemon, 0, 0, "vigild, awake, coalesce 0", app=APP_NC, data=DATA_NC))
        down = len(peer.events("disconnected"))
        ctl.app_action("quit", APP_NC)
        wait_count(peer, "channel-closed", opened, 60, "the coalesce-0 app's channel closed")
        link_down(peer, down, "the coalesce-0 round")

    # -- GATT notifications at each ATT MTU.
    for prefix, n, att_mtu in GATT_VARIANTS:
        gatt_rounds(prefix, n, att_mtu, round_)
    log(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()) + f"; wakes so far {wakes}")

base = statistics.median(times["direct"]) if "direct" in times else None
rows = []
for path, values in times.items():
    n = NBYTES[path]
    median = statistics.median(values)
    gatt_base = (statistics.median(times[path.split(" ")[0] + " direct (AcquireNotify)"])
                 if path.startswith("GATT") else None)
    cpu = statistics.median(cpus[path])
    app_cpu = statistics.median(cpus[path + " (app)"]) if path + " (app)" in cpus else None
    bt_cpu = statistics.median(cpus[path + " (bluetoothd)"]) if path + " (bluetoothd)" in cpus else None
    got = received.get(path, [n] * len(values))
    per_mib = (1 << 20) / n
    rows.append({"path": path, "bytes": n, "seconds": values, "median_s": round(median, 3),
                 "s_per_mib": round(median * per_mib, 3), "kib_per_s": round(n / 1024 / median, 1),
                 # GATT at MTU 23 sends other byte counts: compare rates, not times
                 "ratio_to_direct": None if base is None else round((n / median) / (N / base), 3),
                 "ratio_to_gatt_direct": None if gatt_base is None else round(gatt_base / median, 3),
                 "events_per_mib": round(statistics.median(events[path]) * per_mib, 1) if path in events else None,
                 "cpu_s_per_mib": round(cpu * per_mib, 3),
                 "app_cpu_s_per_mib": None if app_cpu is None else round(app_cpu * per_mib, 3),
                 "bluetoothd_cpu_s_per_mib": None if bt_cpu is None else round(bt_cpu * per_mib, 3),
                 "received": got, "complete": all(g == n for g in got)})
print(f"\nL2CAP channel and GATT notifications, {N} bytes per path and round ({N23} at ATT MTU 23), {ROUNDS} rounds "
      f"(TCG: compare the ratios); ATT MTU {mtus}")
print(f"{'path':<30} {'s/MiB':>7} {'KiB/s':>7} {'x direct':>8} {'x GATT d':>8} {'ev/MiB':>7} {'CPU s/MiB':>10} {'app':>6} {'btd':>6}  rounds")
for row in rows:
    def f(v, w, d):
        return f"{'-':>{w}}" if v is None else f"{v:>{w}.{d}f}"
    print(f"{row['path']:<30} {row['s_per_mib']:>7.2f} {row['kib_per_s']:>7.1f} {f(row['ratio_to_direct'], 8, 3)} "
          f"{f(row['ratio_to_gatt_direct'], 8, 3)} "
          f"{f(row['events_per_mib'], 7, 0)} {row['cpu_s_per_mib']:>10.3f} {f(row['app_cpu_s_per_mib'], 6, 2)} "
          f"{f(row['bluetoothd_cpu_s_per_mib'], 6, 2)}  {[round(x, 2) for x in row['seconds']]}"
          + ("" if row["complete"] else f"  INCOMPLETE: received {row['received']} of {row['bytes']}"))
print("CPU: the direct clients' is their read loop; vigild's its whole process; app: the app process; "
      "btd: bluetoothd (GATT paths)")
print(f"frozen apps' wakes for their data, all rounds: {wakes}")
results = os.environ.get("VIGIL_LAB_RESULTS", "/tmp")
with open(os.path.join(results, "l2cap-bench.json"), "w") as file:
    json.dump({"bytes": N, "rounds": ROUNDS, "mtu": mtus, "paths": rows, "cpu_seconds": cpus, "events": events,
               "wakes": wakes}, file, indent=1)
daemon.stop()

#!/usr/bin/env python3
"""Benchmark (issue 5): Bluetooth LE notifications from a Bumble heart-rate
monitor to a consumer, directly from bluetoothd and through vigild, in one
lab boot.  Prints figures, asserts nothing (it fails only when it cannot
measure).  Not part of the CI suite: it lives in lab/bench, which
lab/tests/run-suite does not search; run it with scripts/bench-ble.

Paths, each measured alone (one subscriber at a time), in this order:
  direct StartNotify   python3-dbus client of bluetoothd: StartNotify +
                       PropertiesChanged (the baseline); vigild not running
  direct AcquireNotify the same client reading AcquireNotify's socket
  vigild control       a control-role client of vigild (ble.notify), pushes
    StartNotify /      (blePush ble.notification); vigild uses StartNotify or,
    AcquireNotify      with acquire: true, AcquireNotify
  vigild app, awake,   clients/python/example_app.py as an app with
    StartNotify /      bluetooth-central, in the foreground: one app
    AcquireNotify      subscribing with acquire: false (StartNotify), then
                       another with ble.notify's default (vigild acquires);
                       vigild batches values that come while an event is in
                       flight (the app records each value, acks the event and
                       calls finishedProcessing once per event)
  vigild app, frozen   the second app in the background: before each sample
                       the benchmark waits until its cgroup reports `frozen 1`,
                       so every notification is a real wake (thaw, deliver, the
                       app acks, records and calls finishedProcessing, freeze)
The whole sequence runs $LAB_BENCH_ROUNDS times (default 3; vigild is
started for each round's vigild paths and stopped before the next round's
direct ones), so that a slow drift of the machine (TCG shares the host's
cores) touches every path alike; figures pool the rounds.

Latency: lab/bench/bench_hrm_peer.py stamps CLOCK_MONOTONIC just before the
ACL packet carrying each measurement is written to hci1's HCI socket, and
carries the sequence number in the RR field; the consumer stamps the same
clock first thing when it gets the value (the guest is one kernel).
$LAB_BENCH_SAMPLES notifications per path and round, one every
$LAB_BENCH_INTERVAL s (default 34, 0.15 s).

Throughput: $LAB_BENCH_BURST notifications per path and round (default 250)
sent as fast as the controller takes them (the peer waits only for HCI flow
control); notifications/s = received / (first HCI write -> last receipt),
the median of the rounds; lost = sent - received; and the CPU time of
bluetoothd, vigild and the consumer during the bursts, per notification.

The table is printed at the end of the log; the figures (and every latency
sample) also go to $VIGIL_LAB_RESULTS/ble-bench.json and ble-bench.txt.
"""
# lab-timeout: 1100
import json
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402

REPO = lab.REPO
sys.path.insert(0, os.path.join(REPO, "Tests", "Lab"))
import accessory_lab as acc  # noqa: E402  (vigild with app manifests, from the lab tests)
from accessory_lab import log  # noqa: E402
from bench_hrm_peer import decode_seq  # noqa: E402

ROUNDS = int(os.environ.get("LAB_BENCH_ROUNDS", "3"))
SAMPLES = int(os.environ.get("LAB_BENCH_SAMPLES", "34"))
INTERVAL = float(os.environ.get("LAB_BENCH_INTERVAL", "0.15"))
BURST = int(os.environ.get("LAB_BENCH_BURST", "250"))
PEER = os.path.join(HERE, "bench_hrm_peer.py")
CONSUMER = os.path.join(HERE, "ble_consumer.py")
APP = "org.vigil.lab.blebench"             # ble.notify without acquire: vigild's default
APP_SN = "org.vigil.lab.blebench.startnotify"  # ble.notify with acquire: false
ADDRESS = "C0:DE:00:00:00:01"            # heart_rate_monitor.py's static random address
HRS, HRM = "180d", "2a37"
TICK = os.sysconf("SC_CLK_TCK")
T_START = time.monotonic()
PATHS = ["direct StartNotify", "direct AcquireNotify", "vigild control StartNotify",
         "vigild control AcquireNotify", "vigild app, awake, StartNotify", "vigild app, awake, AcquireNotify",
         "vigild app, frozen, AcquireNotify"]
W = max(len(p) for p in PATHS)

rounds: list[dict] = []                  # per round: {path: {"latency": ..., "throughput": ...}}
notes: list[str] = []
notify_log: list[str] = []
daemon = None
round_no = 0


# ---------------------------------------------------------------- helpers ----
def cpu_ns(pid: int | None) -> int | None:
    """utime + stime of a process (all its threads), in ns."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // TICK
    except (OSError, IndexError, ValueError):
        return None


def pid_of(name: str) -> int | None:
    try:
        return int(open(os.path.join(lab.RUN, f"{name}.pid")).read().strip())
    except (OSError, ValueError):
        return None


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest rank."""
    if not sorted_values:
        return float("nan")
    k = max(1, min(len(sorted_values), int(-(-p * len(sorted_values) // 1))))
    return sorted_values[k - 1]


class Peer(lab.Peer):
    """The stock helper, reading the events file incrementally: the burst-done
    lines are long, and a poll must stay cheap while a notification is in flight."""

    def events(self, kind: str | None = None) -> list[dict]:
        if not hasattr(self, "_seen"):
            self._seen, self._offset, self._partial = [], 0, b""
        try:
            with open(self.events_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            data = b""
        self._offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        self._seen += [json.loads(line) for line in complete if line.strip()]
        return [e for e in self._seen if kind is None or e.get("event") == kind]

    def subscriptions(self, notify: bool) -> int:
        return len([e for e in self.events("subscription") if e.get("notify") is notify])

    def burst(self, count: int, interval: float, quiet: float = 0.0) -> dict:
        """Sends `count` notifications, returns the peer's burst-done event.
        Polls nothing for count * interval + quiet seconds."""
        before = len(self.events("burst-done"))
        self.command(f"send {count} {interval:g}")
        time.sleep(count * interval + quiet)
        return lab.wait_for(lambda: self.events("burst-done")[before:] or None, 60 + count * interval,
                            f"the peer to finish sending {count}", interval=0.05)[0]


class Consumer:
    """lab/bench/ble_consumer.py in a process of its own."""

    def __init__(self, label: str, *args: str) -> None:
        self.label = label
        self.stderr = open(os.path.join(lab.LOGS, f"consumer-{label.replace(' ', '-')}.log"), "w")
        self.proc = subprocess.Popen([acc.APP_PYTHON, CONSUMER, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr)
        self.buf = b""
        ready = self.reply(60, "its subscription")
        if "ready" not in ready:
            raise LabError(f"consumer {label}: {ready}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def reply(self, timeout: float, what: str) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
                raise LabError(f"consumer {self.label}: no answer ({what}) within {timeout} s "
                               f"(exit {self.proc.poll()}); see {self.stderr.name}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 20)
                if not chunk and self.proc.poll() is not None:
                    continue
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def ask(self, command: str, timeout: float = 30) -> dict:
        self.proc.stdin.write((command + "\n").encode())
        self.proc.stdin.flush()
        return self.reply(timeout, command)

    def count(self) -> int:
        return self.ask("count")["count"]

    def stop(self) -> list[tuple[int, bytes]]:
        answer = self.ask("stop", timeout=120)
        self.proc.wait(30)
        self.stderr.close()
        if answer.get("other"):
            notes.append(f"{self.label}: other pushes: {answer['other'][:5]}")
        return [(t, bytes.fromhex(h)) for t, h in answer["received"]]


class AppReceiver:
    """example_app.py's record file, read as a consumer (counted incrementally):
    one line per value, with the seq of the event that carried it."""

    def __init__(self, daemon: acc.Daemon, app: str) -> None:
        self.daemon, self.app = daemon, app
        self.offset, self.partial, self.n = 0, b"", 0

    @property
    def pid(self) -> int | None:
        return self.daemon.app(self.app).get("pid")

    def received(self) -> list[tuple[int, bytes]]:
        return [(e["t"], bytes.fromhex(e["payloadHex"])) for e in self.daemon.events(self.app, "ble.notification")]

    def events_for(self, first: int, count: int) -> int:
        """How many events carried the values numbered first..first+count-1."""
        return len({e["seq"] for e in self.daemon.events(self.app, "ble.notification")
                    if (n := decode_seq(bytes.fromhex(e["payloadHex"]))) is not None and first <= n < first + count})

    def count(self) -> int:
        try:
            with open(self.daemon.records[self.app], "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return 0
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        self.n += sum(1 for line in complete if b'"ble.notification"' in line)
        return self.n


def settle(consumer, target: int, what: str, idle: float = 3.0, timeout: float = 120) -> int:
    """Waits until the consumer has `target` values, or got nothing new for `idle` s."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        n = consumer.count()
        if n >= target:
            return n
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > idle or time.monotonic() > deadline:
            log(f"{what}: {n} of {target} values arrived; going on")
            return n
        time.sleep(0.5)


def match(burst: dict, received: list[tuple[int, bytes]]) -> dict:
    """Latency and loss of one burst from what a consumer received."""
    first, count = burst["first"], burst["count"]
    t0 = burst["ref"]
    lat, seen, dups, foreign, order_breaks, last_seq = [], set(), 0, 0, 0, -1
    t_last = None
    for t, value in received:
        seq = decode_seq(value)
        if seq is None:
            foreign += 1
            continue
        if not first <= seq < first + count:
            continue
        if seq in seen:
            dups += 1
            continue
        seen.add(seq)
        if seq < last_seq:
            order_breaks += 1
        last_seq = seq
        lat.append((t - t0[seq - first]) / 1000)
        t_last = t if t_last is None else max(t_last, t)
    samples = [round(x) for x in lat]
    lat.sort()
    row = {"samples": samples, "sent": count, "received": len(seen), "lost": count - len(seen), "duplicates": dups,
           "outOfOrder": order_breaks, "foreign": foreign}
    if lat:
        row.update(p50=percentile(lat, .5), p90=percentile(lat, .9), p99=percentile(lat, .99), max=lat[-1],
                   min=lat[0], mean=sum(lat) / len(lat))
    if t_last is not None and len(seen) > 1:
        row["rate"] = len(seen) / ((t_last - t0[0]) / 1e9)
        row["seconds"] = (t_last - t0[0]) / 1e9
    row["sendRate"] = count / ((t0[-1] - t0[0]) / 1e9) if count > 1 else None
    row["peerToWireUs"] = sorted((b - a) / 1000 for a, b in zip(burst["t0"], t0))[len(t0) // 2]
    row["stampedOnWire"] = burst["wire"]
    return row


def measure(label: str, consumer, *, frozen: bool = False, throughput: bool = True,
            vigild: int | None = None) -> None:
    """Latency (and throughput) bursts for one subscribed consumer; the result
    goes into this round's entry for `label`."""
    t_phase = time.monotonic()
    latency_bursts = []
    c0 = consumer.count()
    if frozen:
        for i in range(SAMPLES):
            daemon.wait(app_frozen, 30, f"the app to be frozen before sample {i}", interval=0.005)
            latency_bursts.append(peer.burst(1, 0, quiet=INTERVAL))
    else:
        latency_bursts.append(peer.burst(SAMPLES, INTERVAL, quiet=0.2))
    settle(consumer, c0 + SAMPLES, f"{label}: latency")
    tp_burst, cpu = None, {}
    if throughput:
        pids = {"bluetoothd": pid_of("bluetoothd"), "vigild": vigild, "consumer": consumer.pid}
        before = {k: cpu_ns(p) for k, p in pids.items()}
        n0 = consumer.count()
        tp_burst = peer.burst(BURST, 0)
        settle(consumer, n0 + BURST, f"{label}: throughput")
        after = {k: cpu_ns(p) for k, p in pids.items()}
        cpu = {k: (after[k] - before[k]) if before[k] is not None and after[k] is not None else None
               for k in pids}
    received = consumer.stop() if isinstance(consumer, Consumer) else consumer.received()
    # Latency: all the latency bursts as one.
    merged = {"first": latency_bursts[0]["first"], "count": 0, "t0": [], "ref": [], "wire": 0}
    for b in latency_bursts:
        if b["first"] != merged["first"] + merged["count"]:
            raise LabError(f"{label}: peer bursts not contiguous: {b['first']}")
        merged["count"] += b["count"]
        merged["t0"] += b["t0"]
        merged["ref"] += b["tw"] or b["t1"]
        merged["wire"] += b["count"] if b["tw"] else 0
    row = {"latency": match(merged, received)}
    if tp_burst is not None:
        tp_burst = dict(tp_burst, ref=tp_burst["tw"] or tp_burst["t1"],
                        wire=tp_burst["count"] if tp_burst["tw"] else 0)
        row["throughput"] = match(tp_burst, received)
        row["throughput"].pop("samples", None)
        row["throughput"]["cpuNs"] = cpu
        if isinstance(consumer, AppReceiver):
            row["throughput"]["events"] = consumer.events_for(tp_burst["first"], tp_burst["count"])
    row["phaseSeconds"] = round(time.monotonic() - t_phase, 1)
    rounds[-1][label] = row
    lat = row["latency"]
    log(f"round {round_no} {label}: latency p50 {lat.get('p50', float('nan')):.0f} µs, "
        f"{lat['received']}/{lat['sent']}"
        + (f"; throughput {row['throughput'].get('rate', 0):.0f}/s, {row['throughput']['received']}/{BURST}"
           if tp_burst else ""))


def wait_subscribed(n_before: int, what: str) -> None:
    lab.wait_for(lambda: peer.subscriptions(True) > n_before, 60, f"the peer's subscription ({what})")


def wait_unsubscribed(n_before: int, what: str) -> None:
    lab.wait_for(lambda: peer.subscriptions(False) > n_before, 60, f"the peer's unsubscription ({what})")


def consumer_path(label: str, *args: str, vigild: int | None = None) -> None:
    s_on, s_off = peer.subscriptions(True), peer.subscriptions(False)
    consumer = Consumer(f"{label} {round_no}", *args)
    wait_subscribed(s_on, label)
    measure(label, consumer, vigild=vigild)
    wait_unsubscribed(s_off, label)


def bluez_connect() -> tuple[str, str]:
    bz.forget_all()
    dev = bz.discover(name="Vigil HRM")
    bz.connect(dev)
    return dev, bz.characteristic(dev, HRM)


def push(ctl, kind: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = ctl.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
        if message is not None and message.type == "blePush" and message["kind"] == kind:
            return message
    raise LabError(f"no {kind} from vigild within {timeout} s\n{daemon.diagnostics()}")


def app_frozen() -> bool:
    try:
        with open(f"{daemon.cgroup_root}/{APP}/cgroup.events") as f:
            return "frozen 1" in f.read()
    except OSError:
        return False


def notification_wakes() -> int:
    return len([d for d in daemon.decisions(APP, "wake") if "ble.notification" in d["reason"]])


# ------------------------------------------------------------- bring-up ----
lab.bt_up()
bz = lab.Bluez("hci0")
# The helper listens to every PropertiesChanged of org.bluez; this process does
# not pump its main loop while measuring, so that match would only make
# dbus-daemon copy every notification to a reader that never reads.
bz.bus.remove_signal_receiver(bz._on_props, "PropertiesChanged", "org.freedesktop.DBus.Properties",
                              "org.bluez", path_keyword="path")
bz.forget_all()
peer = Peer.start("hrm", PEER, "--name", "Vigil HRM")
log(f"bench: {ROUNDS} rounds; per path and round {SAMPLES} latency samples every {INTERVAL:g} s "
    f"and a burst of {BURST}; vigild from {acc.BIN}")

for round_no in range(1, ROUNDS + 1):
    rounds.append({})
    # ---------------------------------------------- direct (no vigild) ----
    dev, char = bluez_connect()
    consumer_path("direct StartNotify", "direct", "--char", char)
    consumer_path("direct AcquireNotify", "direct", "--char", char, "--acquire")
    bz.disconnect(dev)
    bz.wait(lambda: not bool(bz.prop(dev, "org.bluez.Device1", "Connected")), 30, "the direct link to go down")
    bz.forget_all()

    # ----------------------------------------------------------- vigild ----
    app_args = ["--ble-peripheral", ADDRESS, "--ble-notify", f"{HRS}/{HRM}"]
    daemon = acc.Daemon("90", apps={
        APP: {"modes": ["bluetooth-central"], "args": app_args},
        APP_SN: {"modes": ["bluetooth-central"], "args": [*app_args, "--ble-acquire", "false"]},
    }, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
    ctl = daemon.control
    vigild_pid = pid_of("vigild")
    # The benchmark's own control connection keeps the link up for every path.
    daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
    ctl.request("ble.registerCentral")
    ctl.request("ble.scan", services=[HRS])
    push(ctl, "ble.discovered")
    ctl.request("ble.stopScan")
    ctl.request("ble.connect", peripheral=ADDRESS)
    push(ctl, "ble.connected")
    ctl.request("ble.discover", peripheral=ADDRESS, timeout=60)

    for acquire in (False, True):
        consumer_path(f"vigild control {'AcquireNotify' if acquire else 'StartNotify'}", "control",
                      "--socket", daemon.socket, "--peripheral", ADDRESS, *(["--acquire"] if acquire else []),
                      vigild=vigild_pid)

    for app_id, label in ((APP_SN, "vigild app, awake, StartNotify"), (APP, "vigild app, awake, AcquireNotify")):
        s_on, s_off = peer.subscriptions(True), peer.subscriptions(False)
        ctl.app_action("launch", app_id)
        daemon.wait(lambda: daemon.records_of(app_id, "bleReady"), 60, f"{app_id}'s central manager")
        wait_subscribed(s_on, label)
        app = AppReceiver(daemon, app_id)
        measure(label, app, vigild=vigild_pid)
        if app_id == APP_SN:
            ctl.app_action("quit", app_id)   # its subscription ends with it (no restore identifier)
            wait_unsubscribed(s_off, label)
    ctl.app_action("background", APP)
    daemon.wait_state(APP, "suspended")
    wakes_before = notification_wakes()
    measure("vigild app, frozen, AcquireNotify", app, frozen=True, throughput=False, vigild=vigild_pid)
    rounds[-1]["vigild app, frozen, AcquireNotify"]["wakes"] = notification_wakes() - wakes_before
    notify_log += [f"round {round_no}: " + line.strip().split("bluetooth: ", 1)[-1]
                   for line in open(daemon.log_path, errors="replace")
                   if "notifications on for" in line or "starting notifications" in line
                   or "AcquireNotify for" in line or "closed the AcquireNotify socket" in line]
    daemon.stop()
peer.stop()


# ----------------------------------------------------------------- report ----
def pooled(path: str) -> dict:
    rows = [r[path] for r in rounds if path in r]
    lat = sorted(x for r in rows for x in r["latency"]["samples"])
    out = {"path": path, "n": len(lat), "sent": sum(r["latency"]["sent"] for r in rows),
           "received": sum(r["latency"]["received"] for r in rows),
           "duplicates": sum(r["latency"]["duplicates"] for r in rows),
           "outOfOrder": sum(r["latency"]["outOfOrder"] for r in rows),
           "roundP50": [r["latency"].get("p50") for r in rows]}
    if lat:
        out.update(p50=percentile(lat, .5), p90=percentile(lat, .9), p99=percentile(lat, .99), max=lat[-1])
    tps = [r["throughput"] for r in rows if "throughput" in r]
    if tps:
        rates = sorted(t["rate"] for t in tps if t.get("rate"))
        cpu = {}
        for k in ("bluetoothd", "vigild", "consumer"):
            v = [t["cpuNs"].get(k) for t in tps]
            cpu[k] = None if any(x is None for x in v) else sum(v) / 1000 / sum(t["sent"] for t in tps)
        out["throughput"] = {"rates": [t.get("rate") for t in tps], "rate": rates[len(rates) // 2] if rates else None,
                             "sent": sum(t["sent"] for t in tps), "received": sum(t["received"] for t in tps),
                             "duplicates": sum(t["duplicates"] for t in tps),
                             "outOfOrder": sum(t["outOfOrder"] for t in tps),
                             "sendRates": [t.get("sendRate") for t in tps], "cpuUsPerNotification": cpu,
                             "events": sum(t["events"] for t in tps) if all("events" in t for t in tps) else None}
    if path == "vigild app, frozen, AcquireNotify":
        out["wakes"] = sum(r.get("wakes", 0) for r in rows)
    return out


summary = [pooled(p) for p in PATHS]
base = summary[0]
lines = [f"Bluetooth LE central benchmark (issue 5), {time.strftime('%Y-%m-%d %H:%M')}, guest kernel "
         f"{os.uname().release}, {os.cpu_count()} vCPUs (TCG), vigild from {acc.BIN}",
         f"{ROUNDS} rounds; latency: {SAMPLES} notifications per path and round, {INTERVAL:g} s apart (frozen: "
         f"one at a time, each after the app's cgroup reported frozen 1); peer's HCI write -> consumer has "
         f"the value, µs; p50/direct: pooled, and per round (min-max)",
         "",
         f"| {'path':<{W}} | {'p50':>6} | {'p90':>6} | {'p99':>6} | {'max':>6} | {'p50/direct':>10} | "
         f"{'per round':>11} | {'recv/sent':>9} |",
         f"| {'-' * W} | {'-' * 6}:| {'-' * 6}:| {'-' * 6}:| {'-' * 6}:| {'-' * 10}:| {'-' * 11}:| {'-' * 9}:|"]
for r in summary:
    per_round = [a / b for a, b in zip(r["roundP50"], base["roundP50"]) if a and b]
    spread = f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else "-"
    lines.append(f"| {r['path']:<{W}} | {r.get('p50', 0):6.0f} | {r.get('p90', 0):6.0f} | {r.get('p99', 0):6.0f} | "
                 f"{r.get('max', 0):6.0f} | {r.get('p50', 0) / base['p50']:10.2f} | {spread:>11} | "
                 f"{r['received']:>4}/{r['sent']:<4} |")
lines += ["",
          f"throughput: {ROUNDS} bursts of {BURST} per path, sent as fast as btvirt's controller takes them; "
          f"notifications/s = received / (first HCI write -> last receipt), median of the rounds (min-max); "
          f"CPU µs per notification during the bursts; per event: values per app event (vigild batches what "
          f"comes while one is in flight)",
          "",
          f"| {'path':<{W}} | {'notif/s':>7} | {'rounds':>11} | {'vs direct':>9} | {'recv/sent':>9} | "
          f"{'bluetoothd':>10} | {'vigild':>6} | {'consumer':>8} | {'per event':>9} |",
          f"| {'-' * W} | {'-' * 7}:| {'-' * 11}:| {'-' * 9}:| {'-' * 9}:| {'-' * 10}:| {'-' * 6}:| {'-' * 8}:| {'-' * 9}:|"]


def f0(v) -> str:
    return "-" if v is None else f"{v:.0f}"


base_rate = base["throughput"]["rate"]
for r in summary:
    tp = r.get("throughput")
    if not tp:
        continue
    c = tp["cpuUsPerNotification"]
    rs = [x for x in tp["rates"] if x]
    per_event = f"{tp['received'] / tp['events']:.1f}" if tp.get("events") else "-"
    lines.append(f"| {r['path']:<{W}} | {f0(tp['rate']):>7} | {f0(min(rs)) + '-' + f0(max(rs)):>11} | "
                 f"{(tp['rate'] / base_rate if tp['rate'] and base_rate else 0):9.2f} | "
                 f"{tp['received']:>4}/{tp['sent']:<4} | {f0(c['bluetoothd']):>10} | {f0(c['vigild']):>6} | "
                 f"{f0(c['consumer']):>8} | {per_event:>9} |")
lines.append("")
frozen = summary[PATHS.index("vigild app, frozen, AcquireNotify")]
lines.append(f"frozen app: {frozen.get('wakes')} wakes for ble.notification over {frozen['sent']} samples")
dups = {r["path"]: (r["duplicates"], r.get("throughput", {}).get("duplicates", 0)) for r in summary}
lines.append("duplicates (latency, throughput): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in dups.items()))
wire = sum(r[p]["latency"]["stampedOnWire"] for r in rounds for p in r)
total = sum(r[p]["latency"]["sent"] for r in rounds for p in r)
lines.append(f"send stamps: {wire} of {total} latency samples stamped as their ACL packet was written to hci1 "
             f"(the others after Bumble's notify call returned); Bumble's own time from its notify call to "
             f"the write (median {rounds[0]['direct StartNotify']['latency']['peerToWireUs']:.0f} µs) is not counted")
lines.append("vigild notification sessions: " + " | ".join(notify_log))
for n in notes:
    lines.append("note: " + n)
lines.append(f"guest time for the benchmark: {time.monotonic() - T_START:.0f} s")
report = "\n".join(lines)
print("\n" + report, flush=True)
with open(os.path.join(lab.RESULTS, "ble-bench.json"), "w") as f:
    json.dump({"rounds": ROUNDS, "samples": SAMPLES, "interval": INTERVAL, "burst": BURST, "bin": acc.BIN,
               "summary": summary, "perRound": rounds, "notifyLog": notify_log, "notes": notes,
               "report": report}, f, indent=1)
with open(os.path.join(lab.RESULTS, "ble-bench.txt"), "w") as f:
    f.write(report + "\n")
print("OK")

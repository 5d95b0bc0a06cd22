#!/usr/bin/env python3
"""Benchmark (issue 6): vigild's Bluetooth LE peripheral role seen from a
Bumble central (hci1), against a plain python3-dbus GATT server registered
directly with BlueZ, in one lab boot.  Prints figures, asserts nothing (it
fails only when it cannot measure).  Not part of the CI suite: it lives in
lab/bench, which lab/tests/run-suite does not search; run it with
scripts/bench-ble-peripheral.

Read round trips: lab/bench/bench_ble_reader.py stays connected and times
$LAB_BENCH_SAMPLES reads (default 40) per path with CLOCK_MONOTONIC around
Bumble's Peer.read_value (ATT Read Request -> Read Response), in this order:
  direct, fixed       lab/bench/bench_gatt_server.py (the lab's python3-dbus
                      server, lab/tests/helpers/bluez_gatt_server.py): a
                      fixed value answered from memory in ReadValue (baseline)
  vigild app awake, dynamic   clients/python/example_app.py --ble-serve in
                      the foreground answers each ble.peripheral.read
  vigild fixed, app frozen    the service's fixed value, answered by vigild;
                      the app is suspended and must not be woken (checked in
                      vigild's decision log and the app's cgroup)
  vigild app frozen, dynamic  each read is a wake: before each one the
                      benchmark waits until the app's cgroup reports
                      `frozen 1` again
Reads are $LAB_BENCH_INTERVAL s apart (default 0.1) except the frozen ones.

Notification throughput: $LAB_BENCH_BURSTS bursts (default 3) of
$LAB_BENCH_BURST notifications (default 500) to the subscribed central:
  direct              the plain server emits PropertiesChanged(Value) back to
                      back (command `blast N`)
  vigild control      a control-role client of vigild publishes a notify
                      characteristic and sends ble.updateValue as fast as the
                      replies come, waiting for ble.peripheral.readyToUpdate
                      after `sent: false`
Each value is a uint32 LE sequence number; notifications/s = distinct
received / (CLOCK_MONOTONIC before the first send -> last receipt), the
median of the bursts; lost = sent - distinct received.

The table is printed at the end of the log and written to
$VIGIL_LAB_RESULTS/ble-peripheral-bench.txt (figures and samples: .json).
"""
# lab-timeout: 1100
import json
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
import vigillab as lab  # noqa: E402
from vigillab import LabError  # noqa: E402

REPO = lab.REPO
sys.path.insert(0, os.path.join(REPO, "Tests", "Lab"))
sys.path.insert(0, os.path.join(REPO, "lab", "tests", "helpers"))
import accessory_lab as acc  # noqa: E402
from accessory_lab import log  # noqa: E402
import bluez_gatt_server as gs  # noqa: E402

SAMPLES = int(os.environ.get("LAB_BENCH_SAMPLES", "40"))
INTERVAL = float(os.environ.get("LAB_BENCH_INTERVAL", "0.1"))
BURST = int(os.environ.get("LAB_BENCH_BURST", "500"))
BURSTS = int(os.environ.get("LAB_BENCH_BURSTS", "3"))
READER = os.path.join(HERE, "bench_ble_reader.py")
SERVER = os.path.join(HERE, "bench_gatt_server.py")
APP = "org.vigil.lab.periphbench"
SERVICE_UUID = "7a1c0001-0000-4000-8000-00000000be0c"
FIXED, DYNAMIC = (f"7a1c000{n}-0000-4000-8000-00000000be0c" for n in (2, 3))
SERVICE = {"uuid": SERVICE_UUID, "characteristics": [
    {"uuid": FIXED, "properties": ["read"], "value": b"vigil-lab".hex()},
    {"uuid": DYNAMIC, "properties": ["read"]},
]}
CTL_SERVICE_UUID = "7a1c0101-0000-4000-8000-00000000be0c"
CTL_NOTIFY = "7a1c0102-0000-4000-8000-00000000be0c"
CTL_SERVICE = {"uuid": CTL_SERVICE_UUID, "characteristics": [{"uuid": CTL_NOTIFY, "properties": ["notify"]}]}
T_START = time.monotonic()
READ_PATHS = ["direct, fixed", "vigild app awake, dynamic", "vigild fixed, app frozen", "vigild app frozen, dynamic"]
TP_PATHS = ["direct PropertiesChanged", "vigild control updateValue"]

reads: dict[str, dict] = {}
throughput: dict[str, list[dict]] = {p: [] for p in TP_PATHS}
notes: list[str] = []


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = max(1, min(len(sorted_values), int(-(-p * len(sorted_values) // 1))))
    return sorted_values[k - 1]


class Central(lab.Peer):
    def nth(self, kind: str, n: int, timeout: float, what: str) -> dict:
        def find():
            errors = self.events("error")
            if errors:
                raise LabError(f"bench central: {errors[-1].get('message')}")
            evs = self.events(kind)
            return evs[n] if len(evs) > n else None
        return lab.wait_for(find, timeout, f"the central: {what}", interval=0.02)

    def read(self, uuid: str, n: int, interval: float, timeout: float = 120) -> dict:
        k = len(self.events("reads"))
        self.command(f"read {uuid} {n} {interval:g}")
        return self.nth("reads", k, timeout + n * (interval + 1), f"{n} reads of {uuid}")

    def collect(self, n: int, idle: float = 5.0) -> dict:
        k = len(self.events("collected"))
        self.command(f"collect {n} {idle:g}")
        return self.nth("collected", k, 600, f"collect {n}")


def record_reads(path: str, ev: dict, extra: dict | None = None) -> None:
    ms = [x / 1e6 for x in ev["ns"]]
    s = sorted(ms)
    row = {"n": len(ms), "errors": ev["errors"], "values": ev["values"], "samples": [round(x, 3) for x in ms],
           "p50": percentile(s, .5), "p90": percentile(s, .9), "max": s[-1] if s else float("nan"),
           "min": s[0] if s else float("nan")}
    row.update(extra or {})
    reads[path] = row
    log(f"reads {path}: n={row['n']} p50 {row['p50']:.1f} ms p90 {row['p90']:.1f} max {row['max']:.1f} "
        f"values {ev['values']} errors {ev['errors'][:3]}")


def record_burst(path: str, sent: int, t0: int, t_send_end: int, got: dict, first: int) -> None:
    seen = set()
    dups = 0
    t_last = None
    for t, s in zip(got["t"], got["seq"]):
        if not first <= s < first + sent:
            continue
        if s in seen:
            dups += 1
            continue
        seen.add(s)
        t_last = t if t_last is None else max(t_last, t)
    row = {"sent": sent, "received": len(seen), "lost": sent - len(seen), "duplicates": dups,
           "sendSeconds": (t_send_end - t0) / 1e9}
    if t_last is not None:
        row["seconds"] = (t_last - t0) / 1e9
        row["rate"] = len(seen) / row["seconds"]
    row["sendRate"] = sent / row["sendSeconds"] if row["sendSeconds"] > 0 else None
    throughput[path].append(row)
    log(f"burst {path}: {row['received']}/{sent} in {row.get('seconds', 0):.2f} s = {row.get('rate', 0):.0f}/s "
        f"(sender {row['sendSeconds']:.2f} s)")


def app_frozen(daemon) -> bool:
    try:
        with open(f"{daemon.cgroup_root}/{APP}/cgroup.events") as f:
            return "frozen 1" in f.read()
    except OSError:
        return False


def push(ctl, kind: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = ctl.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
        if message is not None and message.type == "blePush" and message["kind"] == kind:
            return message
    raise LabError(f"no {kind} push from vigild within {timeout} s")


# ------------------------------------------------------------- baseline ----
lab.bt_up()
log(f"bench: {SAMPLES} reads per path, {INTERVAL:g} s apart; {BURSTS} bursts of {BURST}; vigild from {acc.BIN}")
server = lab.Peer.start("bench-gatt", SERVER, "--name", "Vigil Bench")
central = Central.start("bench-central", READER, "--service", gs.SERVICE_UUID, timeout=120)
central.nth("connected", 0, 10, "connected")
record_reads("direct, fixed", central.read(gs.READ_UUID, SAMPLES, INTERVAL))
central.command(f"subscribe {gs.NOTIFY_UUID}")
central.nth("subscribed", 0, 60, "subscribed")
server.wait_event("start-notify", 60)
for b in range(BURSTS):
    k = len(server.events("blast-done"))
    server.command(f"blast {BURST}")
    done = lab.wait_for(lambda: server.events("blast-done")[k:] or None, 300, "the server's blast")[0]
    got = central.collect(BURST)
    record_burst("direct PropertiesChanged", BURST, done["t0"], done["t1"], got, done["first"])
central.command("disconnect")
central.nth("done", 0, 30, "disconnect")
central.stop()
server.stop()
time.sleep(1)

# --------------------------------------------------------------- vigild ----
daemon = acc.Daemon("91", apps={APP: {
    "modes": ["bluetooth-peripheral"],
    "args": ["--ble-serve", json.dumps(SERVICE), "--ble-advertise", "Vigil Bench", "--restore-id", "bench"],
}}, timings="suspend-grace = 0.5\nwake-budget = 3.0\n")
ctl = daemon.control
daemon.wait(lambda: ctl.request("ble.state")["state"] == "poweredOn", 60, "vigild to see hci0 powered on")
ctl.request("ble.registerPeripheral")
ctl.request("ble.addService", service=CTL_SERVICE)
ctl.app_action("launch", APP)
daemon.wait(lambda: daemon.records_of(APP, "bleServing"), 60, "the app's service and advertisement")
central = Central.start("bench-central-vigild", READER, "--service", SERVICE_UUID, timeout=120)
central.nth("connected", 0, 10, "connected")
log(f"vigild: app state {daemon.state(APP)} before the awake reads")

# (c) dynamic, app awake (foreground)
state_before = daemon.state(APP)
record_reads("vigild app awake, dynamic", central.read(DYNAMIC, SAMPLES, INTERVAL),
             {"appState": state_before, "appStateAfter": daemon.state(APP)})

# (b) fixed, app frozen
ctl.app_action("background", APP)
daemon.wait_state(APP, "suspended")
daemon.wait(lambda: app_frozen(daemon), 30, "the app's cgroup to freeze")
decisions_before = len(daemon.decisions(APP))
reads_before = len(daemon.events(APP, "ble.peripheral.read"))
ev = central.read(FIXED, SAMPLES, INTERVAL)
new = daemon.decisions(APP)[decisions_before:]
record_reads("vigild fixed, app frozen", ev, {
    "newDecisions": [f"{d['action']}: {d.get('reason')}" for d in new],
    "appReadEvents": len(daemon.events(APP, "ble.peripheral.read")) - reads_before,
    "stateAfter": daemon.state(APP), "frozenAfter": app_frozen(daemon)})
if new or reads[ "vigild fixed, app frozen"]["appReadEvents"]:
    notes.append(f"fixed value: the app was woken or saw reads: {reads['vigild fixed, app frozen']['newDecisions'][:5]}")

# (d) dynamic, app frozen: one read per wake
wakes_before = len(daemon.decisions(APP, "wake"))
ns, values, errors, waits = [], [], [], []
for i in range(SAMPLES):
    t = time.monotonic()
    daemon.wait(lambda: app_frozen(daemon) and daemon.state(APP) == "suspended", 30,
                f"the app to be frozen before read {i}", interval=0.01)
    waits.append(time.monotonic() - t)
    ev = central.read(DYNAMIC, 1, 0)
    ns += ev["ns"]
    errors += ev["errors"]
    values += ev["values"][: max(0, 3 - len(values))]
record_reads("vigild app frozen, dynamic", {"ns": ns, "values": values, "errors": errors},
             {"wakes": len(daemon.decisions(APP, "wake")) - wakes_before,
              "medianRefreezeWaitS": sorted(waits)[len(waits) // 2]})

# notifications: a control client of vigild
central.command(f"subscribe {CTL_NOTIFY}")
central.nth("subscribed", 0, 60, "subscribed")
push(ctl, "ble.peripheral.subscribed")
seq = 0
not_sent = 0
for b in range(BURSTS):
    first = seq
    t0 = time.monotonic_ns()
    while seq < first + BURST:
        reply = ctl.request("ble.updateValue", service=CTL_SERVICE_UUID, characteristic=CTL_NOTIFY,
                            body=struct.pack("<I", seq))
        if reply.get("sent"):
            seq += 1
        elif not reply.get("subscribed", True):
            raise LabError(f"ble.updateValue: not subscribed at {seq}")
        else:
            not_sent += 1
            push(ctl, "ble.peripheral.readyToUpdate", 30)
    t1 = time.monotonic_ns()
    got = central.collect(BURST)
    record_burst("vigild control updateValue", BURST, t0, t1, got, first)
    throughput["vigild control updateValue"][-1]["notSentReplies"] = not_sent
central.command("disconnect")
central.nth("done", 0, 30, "disconnect")
central.stop()
daemon.stop()

# ----------------------------------------------------------------- report ----
base = reads["direct, fixed"]
lines = [f"Bluetooth LE peripheral benchmark (issue 6), {time.strftime('%Y-%m-%d %H:%M')}, guest kernel "
         f"{os.uname().release}, {os.cpu_count()} vCPUs (TCG), vigild from {acc.BIN}",
         f"read round trips seen by the Bumble central (hci1): ATT Read Request -> Response, ms; "
         f"{SAMPLES} reads per path, {INTERVAL:g} s apart (frozen dynamic: one per wake, each after the "
         f"app's cgroup reported frozen 1); ratios: p50 / direct p50",
         "",
         f"| {'path':<28} | {'n':>3} | {'p50':>7} | {'p90':>7} | {'max':>7} | {'p50/direct':>10} | {'errors':>6} |",
         f"| {'-' * 28} | {'-' * 3}:| {'-' * 7}:| {'-' * 7}:| {'-' * 7}:| {'-' * 10}:| {'-' * 6}:|"]
for p in READ_PATHS:
    r = reads.get(p)
    if not r:
        continue
    lines.append(f"| {p:<28} | {r['n']:>3} | {r['p50']:7.1f} | {r['p90']:7.1f} | {r['max']:7.1f} | "
                 f"{r['p50'] / base['p50']:10.2f} | {len(r['errors']):>6} |")
lines += ["",
          f"notification throughput: {BURSTS} bursts of {BURST}; notifications/s = distinct received / "
          f"(before the first send -> last receipt), median of the bursts (min-max); sender: sends/s",
          "",
          f"| {'path':<28} | {'notif/s':>7} | {'bursts':>11} | {'vs direct':>9} | {'recv/sent':>9} | "
          f"{'lost':>4} | {'sender/s':>8} |",
          f"| {'-' * 28} | {'-' * 7}:| {'-' * 11}:| {'-' * 9}:| {'-' * 9}:| {'-' * 4}:| {'-' * 8}:|"]
summary_tp = {}
for p in TP_PATHS:
    rows = throughput[p]
    rates = sorted(r["rate"] for r in rows if r.get("rate"))
    send = sorted(r["sendRate"] for r in rows if r.get("sendRate"))
    summary_tp[p] = {"rate": rates[len(rates) // 2] if rates else None, "rates": rates,
                     "sent": sum(r["sent"] for r in rows), "received": sum(r["received"] for r in rows),
                     "duplicates": sum(r["duplicates"] for r in rows),
                     "sendRate": send[len(send) // 2] if send else None}
base_rate = summary_tp[TP_PATHS[0]]["rate"]
for p in TP_PATHS:
    s = summary_tp[p]
    f0 = (lambda v: "-" if v is None else f"{v:.0f}")
    spread = f"{f0(min(s['rates']))}-{f0(max(s['rates']))}" if s["rates"] else "-"
    lines.append(f"| {p:<28} | {f0(s['rate']):>7} | {spread:>11} | "
                 f"{(s['rate'] / base_rate if s['rate'] and base_rate else 0):9.2f} | "
                 f"{s['received']:>4}/{s['sent']:<4} | {s['sent'] - s['received']:>4} | {f0(s['sendRate']):>8} |")
lines.append("")
fx = reads.get("vigild fixed, app frozen", {})
lines.append(f"fixed value with the app frozen: {len(fx.get('newDecisions', []))} new decisions for the app "
             f"({fx.get('newDecisions', [])[:3]}), {fx.get('appReadEvents')} ble.peripheral.read events, "
             f"state after {fx.get('stateAfter')}, cgroup frozen after: {fx.get('frozenAfter')}")
fd = reads.get("vigild app frozen, dynamic", {})
lines.append(f"frozen dynamic reads: {fd.get('wakes')} wakes for {fd.get('n')} reads; median wait for the "
             f"re-freeze before a read {fd.get('medianRefreezeWaitS', 0):.2f} s")
aw = reads.get("vigild app awake, dynamic", {})
lines.append(f"awake dynamic reads: app state {aw.get('appState')} -> {aw.get('appStateAfter')}; values "
             f"{aw.get('values')}")
lines.append("ble.updateValue replies with sent: false: "
             f"{throughput['vigild control updateValue'][-1].get('notSentReplies') if throughput['vigild control updateValue'] else '-'}")
lines.append("duplicates: " + ", ".join(f"{p} {summary_tp[p]['duplicates']}" for p in TP_PATHS))
for n in notes:
    lines.append("note: " + n)
lines.append(f"guest time for the benchmark: {time.monotonic() - T_START:.0f} s")
report = "\n".join(lines)
print("\n" + report, flush=True)
with open(os.path.join(lab.RESULTS, "ble-peripheral-bench.json"), "w") as f:
    json.dump({"samples": SAMPLES, "interval": INTERVAL, "burst": BURST, "bursts": BURSTS, "bin": acc.BIN,
               "reads": reads, "throughput": throughput, "summaryThroughput": summary_tp, "notes": notes,
               "report": report}, f, indent=1)
with open(os.path.join(lab.RESULTS, "ble-peripheral-bench.txt"), "w") as f:
    f.write(report + "\n")
print("OK")

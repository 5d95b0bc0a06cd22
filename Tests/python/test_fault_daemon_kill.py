"""Fault suite: SIGKILL of vigild during a serial stream (host tier, umockdev).

A fake USB serial accessory (accessory_testbed.py) sends numbered records,
`NUMBER,VALUE,CRC32`, at 250 records/s; the logger app (fault_app.py) holds a
`reopen` session with it, appends each `session.data` event to its record file,
fsyncs, then acknowledges, and says it has finished so that vigild suspends it
between bursts. vigild is SIGKILLed at random moments (seeded; the seed is
printed, VIGIL_FAULT_SEED replays it) 20 times and restarted at once in the
same testbed with the same state folder. Once the stream stops, the stored
records are counted against the emitted ones.

Run with the app in the background (suspended between bursts), with the cgroup
freezer (a second cgroup2 mount lets the daemon in the testbed use it) and
with the signal fallback (`suspension = "signal"`); and a third time with the
app kept in the foreground (never suspended), which measures what the daemon
itself keeps across its crash apart from adoption and wakes.

Figures: emitted, stored, lost, duplicated, reordered, corrupt; session data
events, redelivered copies (allowed: flagged), unflagged duplicates, sequence
numbers reused; the app's state at each kill; apps adopted and relaunched
(vigild's log); app processes left stopped (state T) or frozen that the
running daemon does not hold as suspended, and orphans. Fails on any loss,
reuse, unflagged duplicate, corruption, reordering or app left stopped.

Definitions:
- stored: distinct record numbers with a valid checksum in the stream the app
  stored, each event taken once (see fault_harness.analyse_stream);
- lost: emitted records (last byte written into the pty) not stored once the
  stream has stopped and the app has had 5 s without progress to catch up;
- reused: an event whose sequence number the app had already received for
  other content (a new event under an old number);
- unflagged duplicate: an event received again with the same content and
  `redelivered: false`.
"""

import os
import random
import shutil
import signal
import tempfile
import time
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, Emitter, SecondCgroupMount, TestbedDaemon, analyse_stream, app_info,
    app_manifest, cgroup_frozen, connect_control, daemon_config, decisions_in_log, freezer_available, kill_all,
    VigilError, log_tail, process_state, processes_with, read_jsonl, record_line, remove_cgroup_tree, seed, stranded,
    wait_for,
)

APP = "org.vigil.test.faultlogger"
PROTOCOL = "org.example.sensor"
KILLS = 20
RATE = 250
# Kill moments: this long after the restarted daemon first answers.
KILL_DELAY = (0.1, 1.6)
# After the stream stops: how long the app may go without storing anything before what is missing counts as lost.
DRAIN_QUIET = 5.0
DRAIN_LIMIT = 60.0


def missing():
    import shutil as which
    if not os.path.exists(VIGILD):
        return f"vigild is not built at {VIGILD}"
    if not which.which("umockdev-wrapper"):
        return "umockdev is not installed (apt install umockdev gir1.2-umockdev-1.0 python3-gi)"
    return None


# What vigild read is in its session log (a file-backed ring) the moment
# read(2) returns, so its death loses none of it. One window is left: a kill
# that lands while read(2) itself is copying bytes out of the tty; the count
# is never stored. The log marks every read in progress, so the next daemon
# reports it as a `session.loss` event with `interruptedReads`: never silent.
# A lost run is tolerated only as one such report: at most one emitter batch
# (one read), and no more runs than reports. Anything else fails.
def reported_read_losses(lost, batch, reports):
    runs = []
    for n in lost:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs, all(len(run) <= batch for run in runs) and len(runs) <= reports


@unittest.skipIf(missing(), missing() or "")
class DaemonKillTests(unittest.TestCase):
    def test_sigkill_during_a_stream_with_the_cgroup_freezer(self):
        if not freezer_available():
            self.skipTest("no writable cgroup v2 tree (needs root)")
        self.run_variant("cgroup")

    def test_sigkill_during_a_stream_with_the_signal_fallback(self):
        self.run_variant("signal")

    def test_sigkill_during_a_stream_with_the_app_in_the_foreground(self):
        # Never suspended: what the daemon itself keeps across its crash (the
        # data it read, its sequence numbers), apart from adoption and wakes.
        self.run_variant("signal", foreground=True)

    def test_what_a_port_received_and_vigild_had_not_read_survives_its_sigkill(self):
        # Bytes the port received and vigild had not read when it died reach the
        # app: the next daemon re-establishes the session on the same tty and
        # reads them. Here they surely wait unread: vigild is stopped (SIGSTOP)
        # while they arrive, then killed. A pty keeps its input while its
        # controller is open, so this holds here with or without the port
        # keeper; a real tty discards it at its last close, which the keeper
        # prevents (lab test 53 shows both).
        root = tempfile.mkdtemp(prefix="vigil-fault-unread-")
        self.addCleanup(shutil.rmtree, root, True)
        os.makedirs(os.path.join(root, "apps"))
        record = os.path.join(root, "app.jsonl")
        self.addCleanup(lambda: kill_all(processes_with(record)))
        with open(os.path.join(root, "apps", APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, FAULT_APP, "--record", record, "--accessory-protocol", PROTOCOL],
                                        modes=["external-accessory"], protocols=[PROTOCOL]))
        daemon = TestbedDaemon(root, daemon_config(root, "signal"))
        self.addCleanup(daemon.close)
        app_records = lambda: read_jsonl(record)  # noqa: E731
        daemon.wait_ready()
        with connect_control(daemon.socket) as control:
            control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "sessionOpened" for r in app_records()), 20),
                        "the app opened no session\n" + log_tail(daemon.log_path))
        rng = random.Random(seed())
        first = b"".join(record_line(n, rng) for n in range(1, 11))
        self.assertEqual(daemon.device(f"feed {first.hex()} 5"), "ok")
        self.assertTrue(wait_for(lambda: analyse_stream(app_records())["stored"] == set(range(1, 11)), 20),
                        "the first records did not reach the app\n" + log_tail(daemon.log_path))

        old = daemon.pid()
        os.kill(old, signal.SIGSTOP)
        unread = b"".join(record_line(n, rng) for n in range(11, 61))  # 50 records, well within the tty's buffer
        reply = daemon.device(f"feed {unread.hex()} 5")
        os.kill(old, signal.SIGKILL)
        daemon.wait_ready(not_pid=old)
        self.assertEqual(reply, "ok", "the testbed could not write the records")
        arrived = wait_for(lambda: analyse_stream(app_records())["stored"] >= set(range(1, 61)), 20)
        figures = analyse_stream(app_records())
        missing = sorted(set(range(11, 61)) - figures["stored"])
        print(f"\nbytes received while vigild was stopped, then SIGKILL: 50 records written, "
              f"{50 - len(missing)} reached the app, lost {len(missing)}; duplicated {figures['duplicated']}, "
              f"reordered {figures['reordered']}, corrupt {figures['corrupt']}")
        self.assertTrue(arrived and not figures["duplicated"] and not figures["reordered"] and not figures["corrupt"],
                        f"lost {missing}\n" + log_tail(daemon.log_path))

    def run_variant(self, suspension, foreground=False):
        value = seed()
        rng = random.Random(value)
        root = tempfile.mkdtemp(prefix="vigil-fault-kill-")
        self.addCleanup(shutil.rmtree, root, True)
        os.makedirs(os.path.join(root, "apps"))
        cgroup_root = mount = None
        if suspension == "cgroup":
            mount = SecondCgroupMount().__enter__()
            self.addCleanup(mount.__exit__, None, None, None)
            cgroup_root = f"{mount.path}/vigil-fault-{os.getpid()}"
            self.addCleanup(remove_cgroup_tree, cgroup_root)
        record = os.path.join(root, "app.jsonl")
        self.addCleanup(lambda: kill_all(processes_with(record)))
        with open(os.path.join(root, "apps", APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, FAULT_APP, "--record", record, "--accessory-protocol", PROTOCOL],
                                        modes=["external-accessory"], protocols=[PROTOCOL]))
        # In the foreground variant the adopted app (background, with a fresh grace period) is brought back
        # to the foreground after each restart, well within the grace.
        timings = {"suspend-grace": 5.0} if foreground else None
        daemon = TestbedDaemon(root, daemon_config(root, suspension, cgroup_root, timings))
        self.addCleanup(daemon.close)
        app_records = lambda: read_jsonl(record)  # noqa: E731

        def context():
            return (f"\n--- vigild log\n{log_tail(daemon.log_path)}\n--- app records\n"
                    + "\n".join(str(r)[:200] for r in app_records()[-15:]))

        daemon.wait_ready()
        with connect_control(daemon.socket) as control:
            status = control.status()
            self.assertEqual(status["suspension"], suspension,
                             f"the daemon does not use {suspension}: {status['suspensionDetail']}")
            control.app_action("launch", APP)
            self.assertTrue(wait_for(lambda: any(r["kind"] == "sessionOpened" for r in app_records()), 20),
                            "the app opened no session" + context())
            if not foreground:
                control.app_action("background", APP)

        emitter = Emitter(daemon, rate=RATE, seed_value=value)
        emitter.start()
        self.addCleanup(emitter.stop)
        self.assertTrue(wait_for(lambda: analyse_stream(app_records())["stored"], 20),
                        "no record reached the app" + context())

        at_kill = {"running": 0, "suspended (stopped)": 0, "suspended (frozen)": 0, "not running": 0}
        delays, kill_times, foreground_refused = [], [], []
        for _ in range(KILLS):
            delays.append(rng.uniform(*KILL_DELAY))
            time.sleep(delays[-1])  # a random moment, not a condition
            at_kill[self.app_condition(record)] += 1
            old = daemon.pid()
            kill_times.append(time.monotonic())
            os.kill(old, signal.SIGKILL)
            daemon.wait_ready(not_pid=old)
            if foreground:
                with connect_control(daemon.socket) as control:
                    try:
                        control.app_action("foreground", APP)
                    except VigilError as error:
                        foreground_refused.append(error.message)
        emitter.stop()

        # Let the app catch up: done when everything emitted is stored, or nothing moves for DRAIN_QUIET s.
        drain_started = time.monotonic()
        last_count, last_progress = -1, time.monotonic()
        while time.monotonic() - drain_started < DRAIN_LIMIT:
            stored = analyse_stream(app_records())["stored"]
            if all(n in stored for n in range(1, emitter.emitted + 1)):
                break
            if len(stored) != last_count:
                last_count, last_progress = len(stored), time.monotonic()
            elif time.monotonic() - last_progress > DRAIN_QUIET:
                break
            time.sleep(0.2)
        drain = time.monotonic() - drain_started

        figures = analyse_stream(app_records())
        emitted = emitter.emitted
        lost = [n for n in range(1, emitted + 1) if n not in figures["stored"]]
        with connect_control(daemon.socket) as control:
            left_stopped, left_frozen, orphaned, info = stranded(record, lambda: app_info(control, APP))
        adopted = len(decisions_in_log(daemon.log_path, "adopt"))
        relaunched = len(decisions_in_log(daemon.log_path, "relaunch"))
        refused = [r for r in app_records() if r["kind"] == "refused"]
        processes = len({r["pid"] for r in app_records() if r["kind"] == "hello"})
        duration = emitter.stopped_at - emitter.started_at

        print(f"\ndaemon SIGKILL during a stream, suspension = {suspension}"
              f"{', app in the foreground' if foreground else ''}: seed {value} (VIGIL_FAULT_SEED), "
              f"{KILLS} kills {', '.join(f'{d:.2f}' for d in delays)} s after each restart")
        print(f"  emitted {emitted} records in {duration:.1f} s ({emitted / duration:.0f}/s), "
              f"held back {emitter.held_back} times; drain {drain:.1f} s")
        print(f"  stored {len(figures['stored'])}, lost {len(lost)}"
              + (f" (first {lost[:5]}, last {lost[-1]})" if lost else "")
              + f", duplicated {figures['duplicated']}, reordered {figures['reordered']}, corrupt {figures['corrupt']}"
              + (f" {figures['corrupt_examples']}" if figures["corrupt"] else ""))
        print(f"  {figures['data_events']} data events; redelivered copies {figures['redelivered_copies']} "
              f"({figures['redelivered_records']} records, flagged: allowed), unflagged duplicates "
              f"{figures['unflagged_duplicates']}, sequence numbers reused {figures['reused']}"
              + (f" e.g. (seq, was, now, redelivered) {figures['reused_examples']}" if figures["reused"] else ""))
        print(f"  app at the kills: " + ", ".join(f"{k} {v}" for k, v in at_kill.items()))
        last_data = max((r["t"] for r in app_records() if r.get("eventKind") == "session.data"), default=None)
        if last_data is not None and lost:
            kills_before = sum(1 for t in kill_times if t < last_data)
            print(f"  the app stored its last data {last_data - emitter.started_at:.1f} s into the stream, "
                  f"after {kills_before} of {KILLS} kills")
        if foreground_refused:
            print(f"  foreground refused {len(foreground_refused)} times: {foreground_refused[0]}")
        print(f"  adopted {adopted}, relaunched {relaunched}, app processes {processes}, refused {len(refused)}"
              + (f" ({refused[0]['code']}: {refused[0]['error']})" if refused else ""))
        print(f"  at the end: app {info['state']} (pid {info['pid']}); left stopped {len(left_stopped)}, "
              f"left frozen {len(left_frozen)}, orphaned {len(orphaned)} {orphaned or ''}")

        reports = sum(int((r.get("attributes") or {}).get("interruptedReads", 0)) for r in app_records()
                      if r.get("eventKind") == "session.loss" and not r.get("redelivered"))
        print(f"  reads interrupted by a kill, as reported to the app: {reports}")
        runs, within_limit = reported_read_losses(lost, emitter.batch, reports)
        if lost and within_limit:
            print(f"  REPORTED LOSS: {len(lost)} records in {len(runs)} runs of at most {emitter.batch}, "
                  f"each a read vigild was killed in and said so; tolerated")
            lost = []
        problems = []
        for name, count in (("lost", len(lost)), ("sequence numbers reused", figures["reused"]),
                            ("unflagged duplicates", figures["unflagged_duplicates"]),
                            ("duplicated", figures["duplicated"]), ("reordered", figures["reordered"]),
                            ("corrupt", figures["corrupt"]), ("left stopped", len(left_stopped)),
                            ("left frozen", len(left_frozen))):
            if count:
                problems.append(f"{name} {count}")
        if emitter.errors:
            problems.append(f"testbed: {emitter.errors}")
        self.assertFalse(problems, ", ".join(problems) + context())

    @staticmethod
    def app_condition(record):
        states = [(pid, process_state(pid)) for pid in processes_with(record)]
        alive = [(pid, state) for pid, state in states if state not in (None, "Z")]
        if not alive:
            return "not running"
        if any(state == "T" for _, state in alive):
            return "suspended (stopped)"
        if any(cgroup_frozen(pid) for pid, _ in alive):
            return "suspended (frozen)"
        return "running"


if __name__ == "__main__":
    unittest.main()

"""Crash points: vigild killed right before and right after each durable
step, with a real app (issue 26, part 3; docs/reliability.md, "Crash points").

For each point, a vigild started with VIGIL_CRASH_POINT=NAME:MOMENT:HIT runs
one app (fault_app.py, which acknowledges each event once it is on disk)
launched, sent to the background and suspended, then woken by test events
one at a time until the daemon SIGKILLs itself at the point. A vigild
started again on the same state folder, without the variable, must:

- adopt the app (same pid) and never leave it frozen with work pending;
- deliver every event whose `wake` was answered (nothing lost), and the one
  in flight at the crash if it was journaled;
- never give out a seq twice (a new event's seq is above every seq seen);
- flag `redelivered` every copy of an event the app had received before;
- deliver again no event acknowledged more than BOUND before the crash.

Every point runs in CI (about 2-3 s each).

`processes.json` (`processes.file`, hit 2: the spawn at the launch; hit 1 is
the daemon's own start) has a test of its own: the app is launched and the
daemon dies right before or after recording its process. The next daemon
must adopt that process (with the freezer: found in its cgroup, recorded or
not; with signals: by its record, so before the write the process is not
known, its `hello` is refused and it exits, and the next event launches a
new one), and deliver a new event to it. The other durable steps have their
siblings: test_crash_points_sessions.py (sessions.json, session logs),
test_crash_points_mqtt.py (the MQTT outbox, held spool and store),
test_crash_points_ble.py (state.parts, the saved Bluetooth intents).
`journal.renumbered` has its own test below (a held event renumbered).
"""

import json
import os
import signal
import struct
import time
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, app_info, app_manifest, connect_control, daemon_with_app, decisions_in_log, read_jsonl,
    wait_for, processes_with,
)
from vigil_client import VigilError

APP = "org.vigil.test.crashpoints"
BOUND = 0.5
# For the scheduling of a loaded 2-core machine: the daemon's timer, this test's polling.
MARGIN = 0.5
STEP = 20.0
# (name, moment, hit): the hit counts from the daemon's start; its own
# start-up snapshot is the first `snapshot.*` hit, the second and third come
# 0.5 s after the second and third wakes (each follows a reload that added an app).
POINTS = [
    (name, moment, hit)
    for name, hit in (("journal.write", 2), ("journal.enqueued", 1), ("journal.enqueued", 2), ("journal.sent", 2),
                      ("journal.acknowledged", 1), ("snapshot.state", 3), ("snapshot.journal", 3))
    for moment in ("before", "after")
]


def journal_acknowledges(path, app, seq):
    """Whether the event journal at `path` holds an acknowledgement of `seq`
    by `app` (JournalFormat: a 16-byte header, then records of length, CRC
    and payload; a payload is its tag, the app as a length-prefixed string,
    then `acknowledged`'s seq or `acknowledgedEach`'s count and seqs)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return False
    offset = 16
    while offset + 8 <= len(data):
        length = struct.unpack_from("<I", data, offset)[0]
        payload = data[offset + 8:offset + 8 + length]
        offset += 8 + length
        if len(payload) < length or not payload:
            break  # a torn last record
        tag = payload[0]
        size = struct.unpack_from("<I", payload, 1)[0]
        if payload[5:5 + size].decode("utf-8", "replace") != app:
            continue
        rest = payload[5 + size:]
        if tag == 4 and struct.unpack_from("<Q", rest)[0] >= seq:
            return True
        if tag == 9 and seq in struct.unpack_from(f"<{struct.unpack_from('<I', rest)[0]}Q", rest, 4):
            return True
    return False


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class CrashPointTests(unittest.TestCase):
    def test_every_crash_point(self):
        figures = []
        for index, (name, moment, hit) in enumerate(POINTS):
            with self.subTest(point=f"{name}:{moment}:{hit}"):
                figures.append(self.run_point(f"{APP}{index}", name, moment, hit))
        print("\ncrash points (point: accepted events, delivered after the restart, lost, seqs reused, "
              "unflagged copies, acknowledged > bound delivered again, adopted)")
        for line in figures:
            print("  " + line)

    def run_point(self, APP, name, moment, hit):  # noqa: N803 - one app of its own per point
        point = f"{name}:{moment}:{hit}"
        daemon, _, record = daemon_with_app(
            self, "vigil-crash-point-", APP, [PYTHON, FAULT_APP, "--record", "{record}"], start=False,
            timings={"wake-budget": 1.0, "suspend-grace": 0.3}, extra='on-stop = "leave"')
        daemon.env = {"VIGIL_CRASH_POINT": point}
        daemon.start()
        self.addCleanup(daemon.stop)

        def quit_app():
            if daemon.process.poll() is None:
                with connect_control(daemon.socket) as control:
                    control.app_action("quit", APP)
        self.addCleanup(quit_app)
        records = lambda: read_jsonl(record)  # noqa: E731
        events = lambda: [r for r in records() if r["kind"] == "event"]  # noqa: E731

        def snapshot_empty():
            try:
                with open(os.path.join(daemon.root, "state", "state.json")) as file:
                    return not json.load(file)["apps"][APP]["queue"]["events"]
            except (OSError, ValueError, KeyError):
                return False

        def generation():
            try:
                with open(os.path.join(daemon.root, "state", "state.json")) as file:
                    return json.load(file)["journal"]
            except (OSError, ValueError, KeyError):
                return None

        def acknowledged(seq, before):
            """The ack is durable: in the journal (the coalesced save's append, at
            most 0.5 s on), or in a snapshot taken since `before` (a generation)
            that no longer holds the event."""
            return (journal_acknowledges(os.path.join(daemon.root, "state", "events.journal"), APP, seq)
                    or (generation() != before and snapshot_empty()))

        def context():
            return (f"\n--- point {point}\n--- vigild\n{daemon.log_tail(30)}\n--- app\n"
                    + "\n".join(map(str, records()[-12:])))

        accepted, unanswered = [], 0
        acked_at = {}
        try:
            control = connect_control(daemon.socket)
            control.app_action("launch", APP)
            wait_for(lambda: any(r["kind"] == "hello" for r in records()), STEP)
            control.app_action("background", APP)
            wait_for(lambda: daemon.process.poll() is not None or app_info(control, APP)["state"] == "suspended", STEP)
            for _ in range(4):
                before = generation()
                seq = control.wake(APP, payload=b"x")["seq"]
                accepted.append(seq)
                # Handled and acknowledged by the app, then the ack's write (a journal append, 0.5 s on).
                wait_for(lambda: any(e["seq"] == seq for e in events()) or daemon.process.poll() is not None, STEP)
                acked_at[seq] = time.monotonic()
                wait_for(lambda: daemon.process.poll() is not None
                         or app_info(control, APP)["state"] == "suspended", STEP)
                if daemon.process.poll() is not None:
                    break
                # The ack's own write: a journal append (at most 0.5 s on).
                wait_for(lambda: daemon.process.poll() is not None or acknowledged(seq, before), STEP)
                # Wakes take no snapshot (issue 34): an app added by a reload does (the engine
                # changed what the journal does not carry), at the save after the next wake.
                with open(os.path.join(daemon.apps_dir, f"{APP}.extra{seq}.toml"), "w") as manifest:
                    manifest.write(app_manifest(f"{APP}.extra{seq}", ["/bin/true"]))
                control.reload()
            control.close()
        except (VigilError, OSError):
            unanswered += 1
        died = wait_for(lambda: daemon.process.poll() is not None, STEP)
        self.assertTrue(died, f"the daemon never reached crash point {point}" + context())
        self.assertEqual(daemon.process.returncode, -signal.SIGKILL, context())
        crashed_at = time.monotonic()
        before_pid = next((r["pid"] for r in reversed(records()) if r["kind"] == "hello"), None)
        received_before = {e["seq"] for e in events()}

        daemon.env = {}
        adoptions = len(decisions_in_log(daemon.output, "adopt"))
        daemon.start()
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        adopted = wait_for(lambda: len(decisions_in_log(daemon.output, "adopt")) > adoptions, STEP)
        control.app_action("foreground", APP)  # no window: everything pending comes
        self.assertTrue(wait_for(lambda: (lambda i: i["unacknowledgedEvents"] + i["queuedEvents"] == 0)(
            app_info(control, APP)), STEP), "pending events not handled after the restart" + context())
        after = control.wake(APP, payload=b"after")["seq"]
        self.assertTrue(wait_for(lambda: any(e["seq"] == after for e in events()), STEP), context())

        copies = events()
        lost = [seq for seq in accepted if seq not in {e["seq"] for e in copies}]
        seen_before = [e["seq"] for e in copies if e["t"] <= crashed_at] + accepted
        reused = int(bool(seen_before) and after <= max(seen_before))
        first = {}
        reused += sum(1 for e in copies if first.setdefault(e["seq"], e["payloadHex"]) != e["payloadHex"])
        restart = [e for e in copies if e["t"] > crashed_at]
        unflagged = sum(1 for e in restart if e["seq"] in received_before and not e["redelivered"])
        again = [e["seq"] for e in restart if e["seq"] in acked_at and crashed_at - acked_at[e["seq"]] > BOUND + MARGIN]
        pid = app_info(control, APP)["pid"]
        line = (f"{point:28} accepted {len(accepted)}, after the restart {len(restart)}, lost {len(lost)}, "
                f"reused {reused}, unflagged {unflagged}, again {len(again)}, "
                f"adopted {adopted and pid == before_pid}")
        self.assertFalse(lost, f"lost {lost}" + context())
        self.assertEqual(reused, 0, "a seq given out twice" + context())
        self.assertEqual(unflagged, 0, "a copy not flagged redelivered" + context())
        self.assertFalse(again, f"acknowledged long before the crash, delivered again: {again}" + context())
        self.assertTrue(adopted and pid == before_pid, f"not adopted ({before_pid} -> {pid})" + context())
        return line

    def test_process_record_points(self):
        self.before_and_after("processes.json crash points (point: suspension, app processes, adopted, new event "
                              "delivered to)", lambda moment: self.run_process_record_point(
                                  f"{APP}.processes{moment}", f"processes.file:{moment}:2"))

    def before_and_after(self, title, run):
        """`run(moment)` for both moments, each a subtest; prints their figure lines under `title`."""
        lines = []
        for moment in ("before", "after"):
            with self.subTest(moment=moment):
                lines.append(run(moment))
        print(f"\n{title}")
        for line in lines:
            print("  " + line)

    def run_process_record_point(self, APP, point):  # noqa: N803 - one app of its own per point
        daemon, _, record = daemon_with_app(
            self, "vigil-crash-processes-", APP, [PYTHON, FAULT_APP, "--record", "{record}"], start=False,
            extra='on-stop = "leave"')
        daemon.env = {"VIGIL_CRASH_POINT": point}
        daemon.start()
        self.addCleanup(daemon.stop)
        records = lambda: read_jsonl(record)  # noqa: E731

        def context():
            return f"\n--- point {point}\n--- vigild\n{daemon.log_tail(30)}\n--- app\n" + "\n".join(map(str, records()[-12:]))

        try:
            with connect_control(daemon.socket) as control:
                control.app_action("launch", APP)
        except (VigilError, OSError):
            pass  # the daemon died before its reply
        self.assertTrue(wait_for(lambda: daemon.process.poll() is not None, STEP), "the point was not reached" + context())
        self.assertEqual(daemon.process.returncode, -signal.SIGKILL, context())
        self.assertTrue(wait_for(lambda: processes_with(record), STEP), "no app process" + context())
        started = processes_with(record)
        daemon.env = {}
        daemon.start()
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        adopted = bool(decisions_in_log(daemon.output, "adopt"))
        found = daemon.suspension == "cgroup" or point.endswith(":after:2")
        if found:
            self.assertTrue(adopted, "not adopted" + context())
            self.assertEqual(app_info(control, APP)["pid"], started[0], context())
        after = control.wake(APP, payload=b"after")["seq"]
        self.assertTrue(wait_for(lambda: any(r["kind"] == "event" and r["seq"] == after for r in records()), STEP),
                        "the new event was not delivered" + context())
        to = next(r["pid"] for r in records() if r["kind"] == "event" and r["seq"] == after)
        if found:
            self.assertEqual(to, started[0], "delivered to another process than the adopted one" + context())
        else:
            self.assertTrue(any(r["kind"] == "refused" for r in records()), "the unknown process was not refused" + context())
        control.app_action("quit", APP)
        processes = len({r["pid"] for r in records() if r["kind"] == "started"})
        return (f"{point:28} {daemon.suspension}, app processes {processes}, adopted {adopted}, "
                f"event to {'the first process' if to == started[0] else 'a new process'}")

    def test_renumbered_point(self):
        """`journal.renumbered`: an event held for the foreground (its source's
        mode is not declared) is given a new seq when it is sent behind a later
        event of another source (docs/lifecycle.md, "Order"); the daemon dies
        right before or right after writing that renumbering. The next daemon
        must deliver the held event (once, in the foreground, with a seq above
        every seq the app saw, flagged only if the app had it; or, when the
        later event's acknowledgement was lost in the same write, first on the
        new connection, the later event again behind it, flagged), never
        deliver the acknowledged later event again beyond the bound, and give
        a new event a fresh seq."""
        self.before_and_after("journal.renumbered crash points (point: held event's seqs seen, later event's copies, "
                              "new seq, adopted)", lambda moment: self.run_renumbered_point(
                                  f"{APP}.renumbered{moment}", f"journal.renumbered:{moment}:1"))

    def run_renumbered_point(self, APP, point):  # noqa: N803 - one app of its own per point
        daemon, _, record = daemon_with_app(
            self, "vigil-crash-renumbered-", APP, [PYTHON, FAULT_APP, "--record", "{record}"], modes=(), start=False,
            timings={"suspend-grace": 0.3}, extra='on-stop = "leave"')
        daemon.env = {"VIGIL_CRASH_POINT": point}
        daemon.start()
        self.addCleanup(daemon.stop)
        records = lambda: read_jsonl(record)  # noqa: E731
        events = lambda: [r for r in records() if r["kind"] == "event"]  # noqa: E731

        def context():
            return f"\n--- point {point}\n--- vigild\n{daemon.log_tail(30)}\n--- app\n" + "\n".join(map(str, records()[-12:]))

        control = connect_control(daemon.socket)
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in records()), STEP), "no app" + context())
        control.app_action("background", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", STEP), context())
        held = control.wake(APP, kind="accessory.connected", attributes={"connectionID": 1, "protocolStrings": []})
        self.assertEqual(held["disposition"], "queued", held)
        later = control.wake(APP, payload=b"later")
        self.assertEqual(later["disposition"], "woke", later)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["unacknowledgedEvents"] == 0
                                 and any(e["seq"] == later["seq"] for e in events()), STEP), context())
        acked_at = time.monotonic()
        try:
            control.app_action("foreground", APP)  # the held event goes out behind `later`: renumbered
        except (VigilError, OSError):
            pass  # the daemon died before its reply
        control.close()
        self.assertTrue(wait_for(lambda: daemon.process.poll() is not None, STEP), "the point was not reached" + context())
        self.assertEqual(daemon.process.returncode, -signal.SIGKILL, context())
        crashed_at = time.monotonic()
        before_pid = next(r["pid"] for r in reversed(records()) if r["kind"] == "hello")

        daemon.env = {}
        daemon.start()
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        adopted = wait_for(lambda: bool(decisions_in_log(daemon.output, "adopt")), STEP)
        control.app_action("foreground", APP)
        self.assertTrue(wait_for(lambda: "accessory.connected" in [e["eventKind"] for e in events()]
                                 and app_info(control, APP)["unacknowledgedEvents"] + app_info(control, APP)["queuedEvents"] == 0,
                                 STEP), "the held event was not delivered after the restart" + context())
        after = control.wake(APP, payload=b"after")["seq"]
        self.assertTrue(wait_for(lambda: any(e["seq"] == after for e in events()), STEP), context())
        copies = events()
        held_seqs = [e["seq"] for e in copies if e["eventKind"] == "accessory.connected"]
        later_copies = [e for e in copies if e["seq"] == later["seq"] and e["t"] > crashed_at]
        if later_copies:
            # The later event's acknowledgement was in the write the crash lost (within the bound): the new
            # connection starts again from the first unacknowledged event, so the held event may come first under
            # its first seq, then the later one again, flagged; the seqs of the new connection increase.
            new_connection = [e["seq"] for e in copies if e["t"] > crashed_at]
            self.assertEqual(new_connection, sorted(set(new_connection)), "seqs of the new connection" + context())
            self.assertTrue(all(e["redelivered"] for e in later_copies), "the later event again, unflagged" + context())
            self.assertTrue(all(seq < after for seq in held_seqs), f"held event seqs {held_seqs}" + context())
        else:
            # The held event: above the later event's seq wherever the app saw it, and below the new one.
            self.assertTrue(all(later["seq"] < seq < after for seq in held_seqs), f"held event seqs {held_seqs}" + context())
        self.assertTrue(all(e["redelivered"] for e in copies if e["eventKind"] == "accessory.connected"
                            and e["t"] > crashed_at and len(held_seqs) > 1), "a second copy not flagged" + context())
        self.assertFalse(later_copies and crashed_at - acked_at > BOUND + MARGIN,
                         "the acknowledged later event was delivered again" + context())
        seen = [e["seq"] for e in copies if e["seq"] != after]
        self.assertGreater(after, max(seen), "a seq given out twice" + context())
        pid = app_info(control, APP)["pid"]
        self.assertTrue(adopted and pid == before_pid, f"not adopted ({before_pid} -> {pid})" + context())
        control.app_action("quit", APP)
        return (f"{point:28} held event seqs {held_seqs} (later {later['seq']}), later copies after {len(later_copies)}, "
                f"new seq {after}, adopted {adopted and pid == before_pid}")


if __name__ == "__main__":
    unittest.main()

"""Crash points of accessory sessions (issue 26, part 3; docs/reliability.md,
"Crash points"): vigild in the umockdev testbed with the fake USB serial
accessory, the logger app (fault_app.py, a `reopen` session, each
`session.data` stored and fsynced before its `ack`), and vigild SIGKILLing
itself at the point; the supervisor starts it again at once on the same
state, without VIGIL_CRASH_POINT.

- `sessions.file`: `sessions.json` written at the session's open (hit 3;
  the first two are the daemon's start);
- `session.written`: a read's byte count stored in the session log (the
  read's bytes are in the log already, its count not yet);
- `session.acknowledged`: the app's acknowledged offset stored in the log.

For each point, before and after: ten numbered records are fed before the
crash, ten after; every record must reach the app once in order (a copy
flagged `redelivered` is allowed), no sequence number may be reused, and no
record may be lost unless vigild reported the read it died in (a
`session.loss` with `interruptedReads`, docs/reliability.md).
"""

import os
import random
import shutil
import tempfile
import unittest

from fault_harness import (
    FAULT_APP, PYTHON, VIGILD, TestbedDaemon, analyse_stream, app_manifest, connect_control, daemon_config,
    kill_all, log_tail, processes_with, read_jsonl, record_line, wait_for,
)

APP = "org.vigil.test.crashsessions"
PROTOCOL = "org.example.sensor"
STEP = 30.0
# Hits 1 and 2 of `sessions.file` are the daemon's own start (the accessories' and the L2CAP
# channels' restores each write what they re-established); 3 is the open.
POINTS = [(name, moment, hit) for name, hit in (("sessions.file", 3), ("session.written", 1), ("session.acknowledged", 1))
          for moment in ("before", "after")]


def missing():
    if not os.path.exists(VIGILD):
        return f"vigild is not built at {VIGILD}"
    if not shutil.which("umockdev-wrapper"):
        return "umockdev is not installed (apt install umockdev gir1.2-umockdev-1.0 python3-gi)"
    return None


@unittest.skipIf(missing(), missing() or "")
class SessionCrashPointTests(unittest.TestCase):
    def test_every_session_crash_point(self):
        lines = []
        for name, moment, hit in POINTS:
            with self.subTest(point=f"{name}:{moment}:{hit}"):
                try:
                    lines.append(self.run_point(f"{name}:{moment}:{hit}"))
                finally:
                    self.doCleanups()  # this point's broker, daemon and folder, failed or not
        print("\nsession crash points (point: records fed, stored, lost, reported lost, redelivered copies, "
              "unflagged duplicates, seqs reused, app processes)")
        for line in lines:
            print("  " + line)

    def run_point(self, point):
        root = tempfile.mkdtemp(prefix="vigil-crash-sessions-")
        self.addCleanup(shutil.rmtree, root, True)
        os.makedirs(os.path.join(root, "apps"))
        record = os.path.join(root, "app.jsonl")
        self.addCleanup(lambda: kill_all(processes_with(record)))
        with open(os.path.join(root, "apps", APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, FAULT_APP, "--record", record, "--accessory-protocol", PROTOCOL],
                                        modes=["external-accessory"], protocols=[PROTOCOL]))
        daemon = TestbedDaemon(root, daemon_config(root, "signal"), env={"VIGIL_CRASH_POINT": point})
        self.addCleanup(daemon.close)
        records = lambda: read_jsonl(record)  # noqa: E731

        def context():
            return (f"\n--- point {point}\n--- vigild log\n{log_tail(daemon.log_path)}\n--- app records\n"
                    + "\n".join(str(r)[:200] for r in records()[-15:]))

        first = daemon.wait_ready()
        try:
            with connect_control(daemon.socket) as control:
                control.app_action("launch", APP)
        except OSError:
            pass  # `sessions.file` may end the daemon before it answers
        rng = random.Random(26)
        opened = lambda: any(r["kind"] == "sessionOpened" for r in records())  # noqa: E731
        wait_for(lambda: opened() or daemon.pid() != first, STEP)
        fed = set()
        if daemon.pid() == first:
            for n in range(1, 11):
                if daemon.device(f"feed {record_line(n, rng).hex()} 5") == "ok":
                    fed.add(n)
        # The first daemon reaches the point (at the open, the first read, or the first ack).
        self.assertTrue(wait_for(lambda: daemon.pid() not in (None, first), STEP), "the point was not reached" + context())
        with open(daemon.log_path, errors="replace") as log:
            self.assertIn(f"crash point {point.rsplit(':', 1)[0]}", log.read(), context())
        daemon.wait_ready(not_pid=first)
        self.assertTrue(wait_for(lambda: sum(r["kind"] == "sessionOpened" for r in records()) >= 1
                                 and daemon.pid() != first, STEP), "no session after the restart" + context())
        for n in range(11, 21):
            self.assertEqual(daemon.device(f"feed {record_line(n, rng).hex()} 5"), "ok")
            fed.add(n)
        wait_for(lambda: analyse_stream(records())["stored"] >= fed, STEP)
        figures = analyse_stream(records())
        lost = sorted(fed - figures["stored"])
        reported = sum(int((r.get("attributes") or {}).get("interruptedReads", 0)) for r in records()
                       if r.get("eventKind") == "session.loss" and not r.get("redelivered"))
        processes = len({r["pid"] for r in records() if r["kind"] == "hello"})
        line = (f"{point:28} fed {len(fed)}, stored {len(figures['stored'] & fed)}, lost {len(lost)}, reported {reported}, "
                f"redelivered {figures['redelivered_copies']}, unflagged {figures['unflagged_duplicates']}, "
                f"reused {figures['reused']}, app processes {processes}")
        # A loss is allowed only where vigild said a read was cut short by its death, and only before the count.
        self.assertTrue(not lost or (point == "session.written:before:1" and reported), f"lost {lost}" + context())
        self.assertEqual(figures["unflagged_duplicates"], 0, context())
        self.assertEqual(figures["reused"], 0, context())
        self.assertEqual(figures["duplicated"], 0, context())
        self.assertEqual(figures["reordered"], 0, context())
        self.assertEqual(figures["corrupt"], 0, context())
        return line


if __name__ == "__main__":
    unittest.main()

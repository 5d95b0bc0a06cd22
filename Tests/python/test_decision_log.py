"""The decision log lasts and can be followed (host tier, the real vigild):
decisions survive a SIGKILL of vigild (the log is appended per decision),
a torn last line is skipped with a warning, the files are bounded
(`decision-log-size` per file, one older file kept), `log` filters by
`since`, and `vigilctl log --follow` prints each new decision as it is
made. docs/observability.md.
"""

import json
import os
import select
import signal
import subprocess
import time
import unittest

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, connect_control, daemon_with_app, read_jsonl, wait_for

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(REPO, ".build", "debug", "vigilctl")
APP = "org.vigil.test.decisions"
CAPACITY = 12


@unittest.skipUnless(os.access(VIGILD, os.X_OK) and os.access(VIGILCTL, os.X_OK), "vigild/vigilctl are not built")
class DecisionLogTests(unittest.TestCase):
    def setUp(self):
        self.daemon, _, self.record = daemon_with_app(
            self, "vigil-decisions-", APP, [PYTHON, FAULT_APP, "--record", "{record}"],
            extra=f"decision-log-size = {CAPACITY}", start=False)
        self.log_file = os.path.join(os.path.dirname(self.record), "state", "decisions.jsonl")

    def start(self):
        self.daemon.start()
        self.addCleanup(self.daemon.stop)
        control = connect_control(self.daemon.socket)
        self.addCleanup(control.close)
        return control

    def suspended_app(self, control):
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "active", 15), self.daemon.log_tail())
        control.app_action("background", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), self.daemon.log_tail())

    def wake(self, control, n):
        control.wake(APP, payload=f"{n}".encode())
        self.assertTrue(wait_for(lambda: len([r for r in read_jsonl(self.record) if r["kind"] == "event"]) > n, 15))
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), self.daemon.log_tail())

    def test_decisions_survive_a_sigkill_and_the_files_are_bounded(self):
        control = self.start()
        self.suspended_app(control)
        for n in range(3):
            self.wake(control, n)
        middle = time.time()
        for n in range(3, 6):
            self.wake(control, n)
        before = control.log(app=APP)
        self.assertEqual(len(before), CAPACITY, "the in-memory log keeps decision-log-size decisions")
        recent = control.log(app=APP, since=middle)
        self.assertTrue(recent and all(d["time"] >= middle for d in recent), recent)
        self.assertLess(len(recent), len(before))
        self.assertEqual(recent, before[-len(recent):])

        os.kill(self.daemon.process.pid, signal.SIGKILL)
        self.daemon.process.wait()
        with open(self.log_file, "a") as file:
            file.write('{"action":"wake","app":"torn')  # a line cut short
        self.daemon.start()
        control = connect_control(self.daemon.socket)
        self.addCleanup(control.close)
        after = control.log(app=APP)
        self.assertIn(before[-1], after, "the killed daemon's last decision is back")
        kept = after.index(before[-1]) + 1
        self.assertEqual(after[:kept], before[-kept:], "the killed daemon's decisions, in order")
        self.assertIn("unreadable line", self.daemon.log_tail(200))
        self.assertTrue(os.path.exists(self.log_file + ".1"), "more than decision-log-size decisions: rotated")
        for path in (self.log_file, self.log_file + ".1"):
            if os.path.exists(path):
                with open(path) as file:
                    self.assertLessEqual(len(file.read().splitlines()), CAPACITY + 1, path)  # + the torn line

    def test_vigilctl_log_follow_prints_each_new_decision(self):
        control = self.start()
        self.suspended_app(control)
        follower = subprocess.Popen([VIGILCTL, "--socket", self.daemon.socket, "--json", "log", "--follow", "--app", APP],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(follower.kill)
        lines, pending = [], b""

        def read_until(predicate, timeout):
            # os.read on the pipe itself: a buffered reader would hold lines select() cannot see.
            nonlocal pending
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if predicate():
                    return True
                ready, _, _ = select.select([follower.stdout.fileno()], [], [], 0.2)
                if ready:
                    chunk = os.read(follower.stdout.fileno(), 65536)
                    if not chunk:
                        return predicate()
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    lines.extend(json.loads(line) for line in complete if line)
            return predicate()

        self.assertTrue(read_until(lambda: any(d["action"] == "suspend" for d in lines), 15), lines)
        seen = len(lines)
        self.wake(control, 0)
        self.assertTrue(read_until(lambda: any(d["action"] == "wake" for d in lines[seen:]), 15),
                        f"no wake followed: {lines[seen:]}\n{follower.stderr.read() if follower.poll() is not None else ''}")
        self.assertTrue(all(d["app"] == APP for d in lines))
        follower.kill()
        follower.wait()

    def test_a_fifo_or_a_huge_file_in_place_of_the_log_does_not_stall_the_start(self):
        state = os.path.dirname(self.log_file)
        os.makedirs(state, exist_ok=True)
        os.mkfifo(self.log_file + ".1")  # nobody writes it: reading it would block for ever
        with open(self.log_file, "wb") as file:  # 40 MiB of one unterminated line, then a record
            file.write(b"x" * (40 << 20) + b"\n")
            file.write(b'{"action":"wake","app":"org.old","reason":"r","state":"suspended","time":1.5}\n')
        control = self.start()
        old = control.log(app="org.old")
        self.assertEqual([d["time"] for d in old], [1.5], "the record after the damage is read back")
        self.suspended_app(control)
        self.assertTrue(control.log(app=APP))

    def test_bad_since_is_a_usage_error(self):
        self.start()
        result = subprocess.run([VIGILCTL, "--socket", self.daemon.socket, "log", "--since", "0"],
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 64, result.stderr)


if __name__ == "__main__":
    unittest.main()

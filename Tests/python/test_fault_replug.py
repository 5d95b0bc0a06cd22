"""Fault suite: a replug storm against a `reopen` session (host tier, umockdev).

vigild runs in the umockdev testbed of test_accessory_daemon.py; the example
app holds a session opened with `reopen`. The device is unplugged and plugged
150 times with 20 ms pauses and 150 times with 100 ms pauses (CI's bound:
VIGIL_FAULT_REPLUG_CYCLES=300 or more for the long variant); before that, it
is replugged several times while vigild is stopped (SIGSTOP), so that vigild
sees plugs whose node is gone again before it can open it, as a busy daemon
would (unplug, plug, unplug faster than it reads its uevents). Afterwards the same session
carries the device's data to the app, every notification the app saw follows
the model (docs/protocol.md, "Accessories"), and vigild's file descriptors and
memory are back where they were, with no CPU spent while idle. The figures are
printed; only clear faults fail (a lost session, a per-cycle leak, spinning).
"""

import os
import signal
import time
import unittest

from test_accessory_daemon import SENSOR_APP, AccessoryDaemonHarness

CYCLES = int(os.environ.get("VIGIL_FAULT_REPLUG_CYCLES", "150"))
# Rounds of replugs while vigild is stopped, and cycles per round.
FROZEN_ROUNDS, FROZEN_CYCLES = 10, 3
PAUSES = (0.020, 0.100)
# Slack for the allocator and the daemon's bounded histories: a leak of one fd
# or a few hundred bytes per cycle over 600 cycles is well past these.
FD_SLACK = 3
RSS_SLACK_KB = 6 * 1024
# A daemon spinning on a dead port or a retry loop burns most of a core.
SPIN_LIMIT = 0.30


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ReplugStormTests(AccessoryDaemonHarness):
    def session_events(self, session):
        return [r for r in self.read(SENSOR_APP) if r.get("kind") == "event"
                and r.get("eventKind") in ("session.closed", "session.reopened")
                and r["attributes"].get("session") == session]

    def wait_settled(self, session, what):
        """Until the session is open again on the accessory now plugged in;
        fails at once if the session ended for good."""
        def settled():
            ended = [e for e in self.session_events(session)
                     if e["eventKind"] == "session.closed" and not e["attributes"]["willReopen"]]
            if ended:
                self.fail(f"{what}: session {session} ended for good: {ended[0]['attributes']['reason']}\n"
                          f"{self.diagnostics()}")
            accessories = self.control.accessories()
            if len(accessories["accessories"]) != 1:
                return False
            current = accessories["accessories"][0]["connectionID"]
            events = self.session_events(session)
            return bool(events) and events[-1]["eventKind"] == "session.reopened" \
                and events[-1]["attributes"]["connectionID"] == current
        self.wait_until(settled, what, timeout=60)

    def figures(self, pid):
        return fd_count(pid), rss_kb(pid)

    def test_a_reopen_session_survives_a_replug_storm(self):
        self.control.app_action("launch", SENSOR_APP)
        self.wait_until(lambda: any(r["kind"] == "sessionOpened" for r in self.read(SENSOR_APP)), "the app's session")
        session = next(r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened")["session"]
        pid = int(self.device("pid").split()[1])

        # A few cycles first, so that what the daemon keeps for good (allocator
        # arenas, buffers sized once) is in the baseline.
        self.device(f"storm 10 {PAUSES[0]}")
        self.wait_settled(session, "the session after the warm-up")
        fds0, rss0 = self.figures(pid)
        print(f"\nreplug storm: baseline {fds0} fds, RSS {rss0} kB")

        for _ in range(FROZEN_ROUNDS):
            os.kill(pid, signal.SIGSTOP)
            try:
                self.device(f"storm {FROZEN_CYCLES} 0")
            finally:
                os.kill(pid, signal.SIGCONT)
            self.wait_settled(session, "the session after replugs it could not follow")
        print(f"  {FROZEN_ROUNDS} x {FROZEN_CYCLES} cycles while vigild was stopped: {fd_count(pid) - fds0:+d} fds")

        for pause in PAUSES:
            started = time.monotonic()
            self.device(f"storm {CYCLES} {pause}")
            storm = time.monotonic() - started
            self.wait_settled(session, f"the session after {CYCLES} cycles with {pause * 1000:.0f} ms pauses")
            fds, rss = self.figures(pid)
            reopened = sum(1 for e in self.session_events(session) if e["eventKind"] == "session.reopened")
            print(f"  {CYCLES} cycles, {pause * 1000:.0f} ms pauses: {storm:.1f} s; "
                  f"{fds} fds ({fds - fds0:+d}), RSS {rss} kB ({rss - rss0:+d} kB); reopened {reopened} times so far")

        # The same session carries the device's data to the app.
        payload = b"after the storm\n"
        self.device("write " + payload.hex())
        received = lambda: b"".join(bytes.fromhex(e["payloadHex"]) for e in self.events(SENSOR_APP, "session.data")
                                    if e["attributes"]["session"] == session)
        self.wait_until(lambda: received().endswith(payload), "the data after the storm in the app")
        opened = [r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened"]
        self.assertEqual(len(opened), 1, f"the app had to open another session: {opened}")

        # Notifications as the model promises: the session alternates between
        # closed (willReopen) and reopened; each connection is connected, then
        # disconnected (or neither, when both were withdrawn unsent), in order;
        # the first was there before the app registered.
        kinds = [e["eventKind"] for e in self.session_events(session)]
        self.assertEqual(kinds, ["session.closed", "session.reopened"] * (len(kinds) // 2),
                         f"session events out of order: {kinds[:20]}")
        self.assertTrue(all(e["attributes"]["willReopen"] for e in self.session_events(session)
                            if e["eventKind"] == "session.closed"))
        notes = [(e["eventKind"].split(".")[1], e["attributes"]["connectionID"])
                 for e in self.read(SENSOR_APP) if e.get("kind") == "event"
                 and e.get("eventKind") in ("accessory.connected", "accessory.disconnected")]
        current = self.control.accessories()["accessories"][0]["connectionID"]
        first = next(r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened")["connectionID"]
        expected, ids = [("disconnected", first)], sorted({id for _, id in notes} - {first})
        for id in ids:
            expected += [("connected", id)] + ([("disconnected", id)] if id != current else [])
        self.assertEqual(notes, expected, "connect/disconnect notifications do not pair up in order")
        print(f"  app saw {len(ids)} connections, {kinds.count('session.reopened')} reopens of session {session}")

        # Back to baseline, and idle means idle.
        fds, rss = self.figures(pid)
        before = cpu_seconds(pid)
        time.sleep(3)
        idle = (cpu_seconds(pid) - before) / 3
        print(f"  after: {fds} fds ({fds - fds0:+d}), RSS {rss} kB ({rss - rss0:+d} kB), "
              f"idle CPU {idle * 100:.1f}% of a core")
        self.assertLessEqual(fds - fds0, FD_SLACK, "vigild leaks file descriptors across replugs")
        self.assertLessEqual(rss - rss0, RSS_SLACK_KB, "vigild's memory grows with replugs")
        self.assertLess(idle, SPIN_LIMIT, "vigild spins after the storm")

    def test_a_reopen_that_cannot_open_a_present_node_retries_until_it_can(self):
        self.control.app_action("launch", SENSOR_APP)
        self.wait_until(lambda: any(r["kind"] == "sessionOpened" for r in self.read(SENSOR_APP)), "the app's session")
        session = next(r for r in self.read(SENSOR_APP) if r["kind"] == "sessionOpened")["session"]
        pid = int(self.device("pid").split()[1])

        # Replugged, and the new node cannot be opened when vigild gets to it.
        os.kill(pid, signal.SIGSTOP)
        try:
            self.device("unplug")
            self.device("plug")
            self.device("jam")
        finally:
            os.kill(pid, signal.SIGCONT)
        def attempts():
            # Logged at attempts 1, 2, 4, 8, ...
            with open(f"{self.dir}/vigild.log") as log:
                return max([int(line.split("(attempt ")[1].split(")")[0]) for line in log
                            if f"session {session}: could not reopen" in line] or [0])
        self.wait_until(lambda: attempts() >= 4, "retries of the reopen")
        before = cpu_seconds(pid)
        time.sleep(2)
        jammed_cpu = (cpu_seconds(pid) - before) / 2
        kinds = [(e["eventKind"], e["attributes"].get("willReopen")) for e in self.session_events(session)]
        self.assertEqual(kinds, [("session.closed", True)], "the app heard more than that its session waits")

        self.device("unjam")
        self.wait_settled(session, "the session once its node opens")
        print(f"\nreopen retries: at least {attempts()} failed opens before the node opened, "
              f"CPU while failing {jammed_cpu * 100:.1f}% of a core")
        self.assertLess(jammed_cpu, SPIN_LIMIT, "vigild spins retrying the reopen")
        self.device("write " + b"ping\n".hex())
        self.wait_until(lambda: any(bytes.fromhex(e["payloadHex"]) == b"ping\n" and e["attributes"]["session"] == session
                                    for e in self.events(SENSOR_APP, "session.data")), "data on the reopened session")


if __name__ == "__main__":
    unittest.main()

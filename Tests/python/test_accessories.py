"""Clients' accessory code against fake_daemon.FakeDaemon (the "Accessories"
part of docs/protocol.md, scripted): the stdlib client always, and vigilctl's
`accessories`, `accessories watch` and `accessory open` when it is built.

    VIGILCTL=.build/debug/vigilctl /usr/bin/python3 -m unittest discover -s Tests/python -v
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from fake_daemon import ACCESSORY, PROTOCOL, SESSION, FakeDaemon

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import AppClient, ControlClient, Event, VigilError  # noqa: E402

VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(REPO, ".build", "debug", "vigilctl")
TIMEOUT = 10.0


class FakeDaemonTestCase(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="vigil-fake-")
        self.socket = os.path.join(self.folder.name, "vigild.sock")
        self.daemon = FakeDaemon(self.socket)

    def tearDown(self):
        self.daemon.close()
        self.folder.cleanup()


class PythonClientTests(FakeDaemonTestCase):
    def test_accessories_list_sessions_with_loss_counters(self):
        with ControlClient(self.socket) as control:
            reply = control.accessories()
        self.assertEqual(reply["accessories"], [ACCESSORY])
        self.assertEqual(reply["sessions"][0]["overruns"], 2)

    def test_watch_gives_the_list_then_pushed_changes(self):
        with ControlClient(self.socket) as control:
            self.assertEqual(control.watch_accessories()["accessories"], [ACCESSORY])
            changes = [control.next_accessory_event(TIMEOUT) for _ in range(2)]
        self.assertEqual([change["change"] for change in changes], ["disconnected", "connected"])
        self.assertEqual(changes[1]["accessory"]["connectionID"], 8)

    def test_terminal_session_writes_and_reads_bytes(self):
        with ControlClient(self.socket) as control:
            opened = control.open_session(7, PROTOCOL, line_settings="9600 8N1")
            self.assertEqual(opened["session"], 3)
            self.assertEqual(control.next_session_output(TIMEOUT).body, b"hello from the device\n")
            self.assertEqual(control.write(3, b"\x00abc\xff"), 5)
            self.assertEqual(control.next_session_output(TIMEOUT).body, b"\x00ABC\xff")
            control.write(3, b"UNPLUG")
            closed = control.next_session_output(TIMEOUT)
            self.assertEqual((closed.type, closed["reason"]), ("sessionClosed", "the accessory was unplugged"))
        self.assertEqual(self.daemon.requests_of("openSession")[0]["lineSettings"], "9600 8N1")

    def test_large_write_goes_in_bodies_of_at_most_64_kib(self):
        data = bytes(range(256)) * 1024  # 256 KiB
        with ControlClient(self.socket) as control:
            control.open_session(7, PROTOCOL)
            control.write(3, data)
        self.assertEqual(b"".join(self.daemon.bodies), data)
        self.assertEqual([len(body) for body in self.daemon.bodies], [65536] * 4)

    def test_refused_open_raises_the_daemons_error(self):
        with ControlClient(self.socket) as control:
            with self.assertRaises(VigilError) as raised:
                control.open_session(7, "org.example.other")
        self.assertEqual(raised.exception.code, "invalidArgument")

    def test_app_gets_accessory_events_in_its_queue(self):
        with AppClient(self.socket) as app:
            self.assertEqual(app.accessories(), [ACCESSORY])
            app.register_for_accessory_notifications()
            app.open_session(7, PROTOCOL, reopen=True)
            events = [app.next_event(TIMEOUT) for _ in range(4)]
            app.ack(events[-1].seq)
        self.assertTrue(all(isinstance(event, Event) for event in events))
        self.assertEqual([event.kind for event in events],
                         ["accessory.connected", "session.data", "session.loss", "session.closed"])
        self.assertEqual(events[1].payload, b"line 1\n")
        self.assertIs(self.daemon.requests_of("openSession")[0]["reopen"], True)


@unittest.skipUnless(os.access(VIGILCTL, os.X_OK), f"vigilctl not built at {VIGILCTL}")
class VigilctlTests(FakeDaemonTestCase):
    def vigilctl(self, *arguments, stdin=b""):
        return subprocess.run([VIGILCTL, "--socket", self.socket, *arguments], input=stdin,
                              capture_output=True, timeout=TIMEOUT)

    def test_accessories_table_shows_identity_sessions_and_loss(self):
        result = self.vigilctl("accessories")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.decode().splitlines()
        self.assertEqual(lines[0].split(), ["CONN", "NAME", "MANUFACTURER", "MODEL", "SERIAL", "FW", "PROTOCOLS", "NODE"])
        self.assertIn("SN0001", lines[1])
        self.assertIn("/dev/ttyACM0", lines[1])
        session_header = next(line for line in lines if line.startswith("SESSION"))
        for column in ("HOLDER", "IN", "OUT", "BUFFERED", "PAUSED", "OVERRUNS", "PARITY", "FRAME"):
            self.assertIn(column, session_header.split())
        self.assertIn("session 3: the device reported loss: 2 overrun(s), 0 parity and 1 framing error(s)", lines)

    def test_accessories_json_is_the_reply(self):
        result = self.vigilctl("accessories", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), {"accessories": [ACCESSORY], "sessions": [SESSION]})

    def test_watch_prints_one_json_line_per_change(self):
        result = self.vigilctl("accessories", "watch", "--json")
        lines = [json.loads(line) for line in result.stdout.decode().splitlines()]
        self.assertEqual([line["change"] for line in lines], ["present", "disconnected", "connected"])
        self.assertEqual([line["accessory"]["connectionID"] for line in lines], [7, 7, 8])
        self.assertEqual(result.returncode, 69, "the daemon going away is EX_UNAVAILABLE")

    def test_open_is_a_terminal_until_eof(self):
        result = self.vigilctl("accessory", "open", "7", "--protocol", PROTOCOL, "--line-settings", "9600 8N1",
                               stdin=b"abc\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, b"hello from the device\nABC\n")
        self.assertEqual(self.daemon.requests_of("openSession")[0]["lineSettings"], "9600 8N1")
        self.assertEqual(len(self.daemon.requests_of("closeSession")), 1)

    def test_open_with_a_rigs_line_control(self):
        result = self.vigilctl("accessory", "open", "7", "--protocol", PROTOCOL, "--line-settings", "9600 8N1 hupcl",
                               "--baud", "250000", "--no-hupcl", "--reset-pulse", "200", "--send-break", "50")
        self.assertEqual(result.returncode, 0, result.stderr)
        # --baud and --no-hupcl replace the settings' own tokens of their kind.
        self.assertEqual(self.daemon.requests_of("openSession")[0]["lineSettings"], "250000 8N1 nohupcl")
        down, up = self.daemon.requests_of("sessionLines")
        self.assertEqual((down["session"], down["dtr"], down["rts"]), (3, False, False))
        self.assertEqual((up["dtr"], up["rts"]), (True, True))
        self.assertGreaterEqual(up["receivedAt"] - down["receivedAt"], 0.2, "the pulse lasts --reset-pulse ms")
        brk = self.daemon.requests_of("sendBreak")[0]
        self.assertEqual((brk["session"], brk["milliseconds"]), (3, 50))
        self.assertGreater(brk["receivedAt"], up["receivedAt"], "the break follows the pulse")
        stderr = result.stderr.decode()
        self.assertIn("reset pulse of 200 ms sent; lines now DTR up, RTS up, CTS down, DSR up, DCD up, RI down", stderr)
        self.assertIn("break of 50 ms sent", stderr)

    def test_open_refuses_a_rate_out_of_range_before_connecting(self):
        result = self.vigilctl("accessory", "open", "7", "--protocol", PROTOCOL, "--baud", "30000000")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(b"--baud must be 50 to 20000000", result.stderr)
        self.assertEqual(self.daemon.requests_of("openSession"), [])

    def test_open_writes_large_input_in_awaited_pieces(self):
        data = os.urandom(200_000)
        result = self.vigilctl("accessory", "open", "7", "--protocol", PROTOCOL, stdin=data)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(b"".join(self.daemon.bodies), data)
        self.assertTrue(all(len(body) <= 65536 for body in self.daemon.bodies))

    def test_open_exits_1_with_the_reason_when_the_device_goes(self):
        result = self.vigilctl("accessory", "open", "7", "--protocol", PROTOCOL, stdin=b"UNPLUG\n")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"the accessory was unplugged", result.stderr)

    def test_open_refused_is_one_line_and_exit_1(self):
        result = self.vigilctl("accessory", "open", "7", "--protocol", "org.example.other")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"does not speak", result.stderr)


if __name__ == "__main__":
    unittest.main()

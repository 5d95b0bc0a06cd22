"""L2CAP channels through the real vigild, host tier: what can be proven
without a Bluetooth stack in the kernel. vigild runs against the BlueZ mock
(Tests/bluez-mock) as in test_ble_daemon; the refusals come before any socket
(bad PSM, security or MTU, a peripheral the client is not connected to, a PSM
it did not publish), and a request that passes them meets the host kernel's
missing Bluetooth (socket(AF_BLUETOOTH) fails with EAFNOSUPPORT): `unavailable`,
"Bluetooth unavailable", and nothing left behind. The lab tier
(Tests/Lab/58-vigild-l2cap.py) opens real channels against a Bumble peer.
"""

import json
import os
import socket
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_ble_daemon as ble  # noqa: E402
from vigil_client import VigilError  # noqa: E402


def kernel_has_bluetooth():
    try:
        socket.socket(socket.AF_BLUETOOTH, socket.SOCK_SEQPACKET, socket.BTPROTO_L2CAP).close()
        return True
    except (OSError, AttributeError):
        return False


@unittest.skipIf(ble.missing(), ble.missing() or "")
class L2CAPRefusalTests(ble.CentralRig):
    """The BLE tests' rig: a mock BlueZ with a heart-rate monitor, a real vigild."""

    def refused(self, client, type, code, contains=None, **members):
        with self.assertRaises(VigilError) as error:
            client.request(type, **members)
        self.assertEqual(error.exception.code, code, f"{type} {members}: {error.exception}")
        if contains:
            self.assertIn(contains, str(error.exception))
        return error.exception

    def session_logs(self):
        directory = f"{self.dir}/state/session-logs"
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []

    def test_bad_arguments_and_a_peripheral_not_connected_are_refused(self):
        c = self.control
        for psm in (0, 256, -1, 0x1001):
            self.refused(c, "ble.openL2CAPChannel", "invalidArgument", "LE PSM", peripheral=ble.HRM, psm=psm)
        self.refused(c, "ble.openL2CAPChannel", "invalidArgument", "paranoid", peripheral=ble.HRM, psm=0x80, security="paranoid")
        self.refused(c, "ble.openL2CAPChannel", "invalidArgument", "receiveMTU", peripheral=ble.HRM, psm=0x80, receiveMTU=22)
        self.refused(c, "ble.openL2CAPChannel", "invalidArgument", "Bluetooth address", peripheral="nope", psm=0x80)
        self.refused(c, "ble.openL2CAPChannel", "invalidArgument", peripheral=ble.HRM, psm="x")
        for window in (-1, 1001, 100000):
            self.refused(c, "ble.openL2CAPChannel", "invalidArgument", "coalesceMilliseconds", peripheral=ble.HRM,
                         psm=0x80, coalesceMilliseconds=window)
            self.refused(c, "ble.publishL2CAPChannel", "invalidArgument", "coalesceMilliseconds", coalesceMilliseconds=window)
        for window in ("x", 1.5, True):
            self.refused(c, "ble.openL2CAPChannel", "invalidArgument", peripheral=ble.HRM, psm=0x80, coalesceMilliseconds=window)
        # Never asked for the link: notConnected, before any socket (the window's
        # bounds pass the argument checks).
        self.refused(c, "ble.openL2CAPChannel", "notConnected", "ble.connect", peripheral=ble.HRM, psm=0x80)
        for window in (0, 1000):
            self.refused(c, "ble.openL2CAPChannel", "notConnected", peripheral=ble.HRM, psm=0x80, coalesceMilliseconds=window)
        self.refused(c, "ble.publishL2CAPChannel", "invalidArgument", "LE PSM", psm=300)
        self.refused(c, "ble.unpublishL2CAPChannel", "notFound", "not published", psm=0x80)
        self.assertEqual(c.request("ble.state")["state"], "poweredOn", "the connection stays usable")
        self.assertEqual(self.session_logs(), [], "a refused channel leaves no session log")

    @unittest.skipIf(kernel_has_bluetooth(), "this kernel has Bluetooth: the lab test covers it")
    def test_without_bluetooth_in_the_kernel_a_connected_peripheral_says_unavailable(self):
        c = self.control
        c.request("ble.registerCentral")
        c.request("ble.connect", peripheral=ble.HRM)
        self.push(c, "ble.connected")
        error = self.refused(c, "ble.openL2CAPChannel", "unavailable", "Bluetooth unavailable", peripheral=ble.HRM, psm=0x80)
        self.assertIn("AF_BLUETOOTH", str(error))
        self.refused(c, "ble.publishL2CAPChannel", "unavailable", "Bluetooth unavailable")
        self.refused(c, "ble.publishL2CAPChannel", "unavailable", "Bluetooth unavailable", psm=0x81)
        self.refused(c, "ble.publishL2CAPChannel", "unavailable", "Bluetooth unavailable", coalesceMilliseconds=0)
        self.refused(c, "ble.openL2CAPChannel", "unavailable", peripheral=ble.HRM, psm=0x80, coalesceMilliseconds=1000)
        # Nothing half-made: no session, no log, and the next request works.
        self.assertEqual(self.session_logs(), [])
        self.assertEqual(c.request("accessories").get("sessions") or [], [])
        self.refused(c, "ble.unpublishL2CAPChannel", "notFound", psm=0x81)


@unittest.skipIf(ble.missing(), ble.missing() or "")
@unittest.skipIf(kernel_has_bluetooth(), "this kernel has Bluetooth: the lab test covers it")
class L2CAPRestartTests(ble.CentralRig):
    """What a restarted vigild does with the L2CAP intents an earlier one
    saved (docs/bluetooth.md, "L2CAP channels", "Daemon restarts"): the state
    of a daemon that had a published PSM, a `reopen` channel with bytes in its
    log and a channel without reopen is written as that daemon would have
    left it (this kernel cannot open channels), then vigild starts on it."""

    PSM, REOPENED, ENDED = 0x85, 7, 8
    LOGGED = b"read before the kill"

    def state_files(self):
        return f"{self.dir}/state/state.json", f"{self.dir}/state/sessions.json"

    def saved_l2cap(self):
        with open(self.state_files()[0]) as file:
            return (json.load(file).get("bluetooth") or {}).get("l2cap") or {}

    def leave_state_of_a_killed_daemon(self):
        state_path, sessions_path = self.state_files()
        with open(state_path) as file:
            state = json.load(file)
        bluetooth = state.setdefault("bluetooth", {"central": {}, "peripheral": {}})
        bluetooth["central"][self.APP] = {"connects": [ble.HRM], "subscriptions": [], "scanAll": False,
                                          "allowDuplicates": False}
        options = {"security": None, "receiveMTU": 2048, "coalesceMilliseconds": 100}
        bluetooth["l2cap"] = {self.APP: {
            "published": [dict(psm=self.PSM, dynamic=True, **options)],
            "channels": [dict(session=self.REOPENED, peer=ble.HRM, psm=0x80, **options)]}}
        with open(state_path, "w") as file:
            json.dump(state, file)

        def record(session, reopen_psm):
            name = f"l2cap:{ble.HRM}/{reopen_psm}"
            return {"id": session, "holder": {"app": {"_0": self.APP}}, "connectionID": 0, "identity": {"key": name},
                    "sysPath": "", "protocolString": name, "lineSettings": "", "reopen": False}
        with open(sessions_path, "w") as file:
            json.dump({"version": 1, "nextSessionID": 9,
                       "sessions": [record(self.REOPENED, 0x80), record(self.ENDED, 0x81)]}, file)
        # Session 7's log: bytes vigild read from the channel and had not announced yet.
        os.makedirs(f"{self.dir}/state/session-logs", exist_ok=True)
        header = bytearray(4096)
        header[0:8] = b"VIGILLOG"
        struct.pack_into("<IxxxxQQQQ", header, 8, 1, 4096, len(self.LOGGED), 0, 0)
        with open(f"{self.dir}/state/session-logs/{self.REOPENED}.log", "wb") as file:
            file.write(bytes(header) + self.LOGGED.ljust(4096, b"\0"))

    def app_events(self, kind):
        return [r for r in self.records() if r.get("kind") == "event" and r.get("eventKind") == kind]

    def test_a_restart_relistens_reopens_and_ends_what_it_cannot_keep(self):
        self.stop_daemon()
        self.leave_state_of_a_killed_daemon()
        self.start_daemon()

        def logged(text):
            with open(f"{self.dir}/vigild.log") as log:
                return text in log.read()
        # The published PSM: listening on it again fails on this kernel; logged, and the app is told.
        self.wait_until(lambda: logged(f"cannot listen on PSM {self.PSM} again"), "the failed re-listen in the log")
        # The reopen channel waits for its link, which the restored central brings back; opening
        # it then meets this kernel, and it keeps waiting (same session).
        self.wait_until(lambda: logged(f"session {self.REOPENED}: cannot reopen yet"), "the reopen attempt once the link is up")
        sessions = {s["session"]: s for s in self.control.request("accessories").get("sessions") or []}
        self.assertIn(self.REOPENED, sessions, "the reopen channel's session is kept")
        self.assertNotIn(self.ENDED, sessions, "a channel without reopen ends")
        # `ble.l2cap` (vigilctl ble l2cap list): no PSM listened on, the channel waiting for its link.
        listed = lambda: self.control.request("ble.l2cap")
        self.wait_until(lambda: [c["state"] for c in listed()["channels"]] == ["waiting"], "the channel listed as waiting")
        self.assertEqual(listed()["published"], [])
        self.assertEqual([(c["session"], c["holder"], c["psm"], c["reopen"]) for c in listed()["channels"]],
                         [(self.REOPENED, f"app {self.APP}", 0x80, True)])
        self.wait_until(lambda: self.saved_l2cap().get(self.APP, {}).get("published") == [],
                        "the PSM no longer in the state file")
        self.assertEqual([c["session"] for c in self.saved_l2cap()[self.APP]["channels"]], [self.REOPENED])

        self.control.app_action("launch", self.APP)
        self.wait_until(lambda: self.app_events("ble.l2cap.unpublished") and len(self.app_events("session.closed")) == 2,
                        "the app told what the restart did")
        unpublished = self.app_events("ble.l2cap.unpublished")[0]["attributes"]
        self.assertEqual(unpublished["psm"], self.PSM)
        self.assertIn("Bluetooth unavailable", unpublished["reason"])
        closed = {e["attributes"]["session"]: e["attributes"] for e in self.app_events("session.closed")}
        self.assertTrue(closed[self.REOPENED]["willReopen"])
        self.assertFalse(closed[self.ENDED]["willReopen"])
        self.assertIn("not opened with reopen", closed[self.ENDED]["reason"])
        # What vigild had read before it died reaches the app, byte-exact.
        self.wait_until(lambda: self.app_events("session.data"), "the logged bytes")
        data = self.app_events("session.data")
        self.assertEqual([e["attributes"]["session"] for e in data], [self.REOPENED])
        self.assertEqual(bytes.fromhex(data[0]["payloadHex"]), self.LOGGED)


if __name__ == "__main__":
    unittest.main()

"""L2CAP channels through the real vigild, host tier: what can be proven
without a Bluetooth stack in the kernel. vigild runs against the BlueZ mock
(Tests/bluez-mock) as in test_ble_daemon; the refusals come before any socket
(bad PSM, security or MTU, a peripheral the client is not connected to, a PSM
it did not publish), and a request that passes them meets the host kernel's
missing Bluetooth (socket(AF_BLUETOOTH) fails with EAFNOSUPPORT): `unavailable`,
"Bluetooth unavailable", and nothing left behind. The lab tier
(Tests/Lab/58-vigild-l2cap.py) opens real channels against a Bumble peer.
"""

import os
import socket
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
        # Never asked for the link: notConnected, before any socket.
        self.refused(c, "ble.openL2CAPChannel", "notConnected", "ble.connect", peripheral=ble.HRM, psm=0x80)
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
        # Nothing half-made: no session, no log, and the next request works.
        self.assertEqual(self.session_logs(), [])
        self.assertEqual(c.request("accessories").get("sessions") or [], [])
        self.refused(c, "ble.unpublishL2CAPChannel", "notFound", psm=0x81)


if __name__ == "__main__":
    unittest.main()

"""RFCOMM channels through the real vigild, host tier: what can be proven
without a Bluetooth stack in the kernel. vigild runs against the BlueZ mock
as in test_ble_daemon; the refusals come before any socket (a bad address,
channel, uuid or option; a device BlueZ does not know), and a request that
passes them meets the host kernel's missing Bluetooth (socket(AF_BLUETOOTH)
fails): `unavailable`, and nothing left behind. The lab tier
(Tests/Lab/65-vigild-rfcomm.py) opens real channels against a Bumble SPP device.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_ble_daemon as ble  # noqa: E402
from test_l2cap_daemon import kernel_has_bluetooth  # noqa: E402
from vigil_client import VigilError  # noqa: E402

OPEN = "bluetooth.openRFCOMMChannel"
SPP = "00:AA:01:00:00:23"  # a BR/EDR device (public address) the mock knows


@unittest.skipIf(ble.missing(), ble.missing() or "")
class RFCOMMRefusalTests(ble.CentralRig):
    """The BLE tests' rig (a mock BlueZ with an LE heart-rate monitor at
    ble.HRM, a real vigild) and a BR/EDR device at SPP."""

    def prepare_mock(self):
        super().prepare_mock()
        self.mock.control.AddLEDevice("hci0", SPP, "Vigil SPP",
                                      self.dbus.Dictionary({"AddressType": self.dbus.String("public")}, signature="sv"))

    def refused(self, code, contains=None, **members):
        with self.assertRaises(VigilError) as error:
            self.control.request(OPEN, **members)
        self.assertEqual(error.exception.code, code, f"{members}: {error.exception}")
        if contains:
            self.assertIn(contains, str(error.exception))
        return error.exception

    def session_logs(self):
        directory = f"{self.dir}/state/session-logs"
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []

    def test_bad_requests_and_an_unknown_device_are_refused_clearly(self):
        for channel in (0, 31, -1, 256):
            self.refused("invalidArgument", "outside 1-30", device=SPP, channel=channel)
        for channel in ("x", 1.5, True):
            self.refused("invalidArgument", device=SPP, channel=channel)
        self.refused("invalidArgument", "Bluetooth address", device="nope", channel=1)
        self.refused("invalidArgument", "channel (1-30) or the service's uuid", device=SPP)
        self.refused("invalidArgument", "not both", device=SPP, channel=1, uuid="0x1101")
        self.refused("invalidArgument", "not a Bluetooth UUID", device=SPP, uuid="serial")
        self.refused("invalidArgument", "paranoid", device=SPP, channel=1, security="paranoid")
        for window in (-1, 1001):
            self.refused("invalidArgument", "coalesceMilliseconds", device=SPP, channel=1, coalesceMilliseconds=window)
        self.refused("invalidArgument", "LE device", device=ble.HRM, channel=1)
        error = self.refused("notFound", "pair it first", device="00:AA:BB:CC:DD:EE", channel=1)
        self.assertIn("00:AA:BB:CC:DD:EE", str(error))
        self.refused("invalidArgument", device=SPP)  # a missing member is an argument error, not a crash
        self.assertEqual(self.control.request("ble.state")["state"], "poweredOn", "the connection stays usable")
        self.assertEqual(self.session_logs(), [], "a refused channel leaves no session log")

    @unittest.skipIf(kernel_has_bluetooth(), "this kernel has Bluetooth: the lab test covers it")
    def test_without_bluetooth_in_the_kernel_a_known_device_says_unavailable(self):
        error = self.refused("unavailable", "Bluetooth unavailable", device=SPP, channel=1)
        self.assertIn("AF_BLUETOOTH", str(error))
        self.assertEqual(self.session_logs(), [], "nothing left behind")


if __name__ == "__main__":
    unittest.main()

"""RFCOMM channels through the real vigild, host tier: what can be proven
without a Bluetooth stack in the kernel. vigild runs against the BlueZ mock
as in test_ble_daemon; the refusals come before any socket (a bad address,
channel, uuid or option; a device BlueZ does not know), and a request that
passes them meets the host kernel's missing Bluetooth (socket(AF_BLUETOOTH)
fails): `unavailable`, and nothing left behind. The lab tier
(Tests/Lab/65-vigild-rfcomm.py) opens real channels against a Bumble SPP device.
"""

import json
import os
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_ble_daemon as ble  # noqa: E402
from test_l2cap_daemon import kernel_has_bluetooth  # noqa: E402
from ble_harness import EXAMPLE_APP, PYTHON, VIGILD, MockBlueZDaemonTest  # noqa: E402
from vigil_client import VigilError  # noqa: E402

OPEN = "bluetooth.openRFCOMMChannel"
PUBLISH = "bluetooth.publishRFCOMMService"
UNPUBLISH = "bluetooth.unpublishRFCOMMService"
SERIAL_PORT = "00001101-0000-1000-8000-00805f9b34fb"
VIGILCTL = os.path.join(os.path.dirname(os.environ.get("VIGILD") or VIGILD), "vigilctl")
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


@unittest.skipIf(ble.missing(), ble.missing() or "")
class RFCOMMServiceTests(ble.CentralRig):
    """Incoming SPP through the mock's ProfileManager1: vigild registers a
    published service with bluetoothd, and the mock's ConnectProfile plays a
    device connecting (bluetoothd's NewConnection, a socket pair standing in
    for the accepted RFCOMM socket): the data path past the socket is the
    real one. The lab tier connects a real BR/EDR device."""

    def prepare_mock(self):
        super().prepare_mock()
        self.spp = self.mock.control.AddLEDevice("hci0", SPP, "Vigil SPP",
                                                 self.dbus.Dictionary({"AddressType": self.dbus.String("public")}, signature="sv"))

    def profiles(self):
        return {str(uuid): {str(k): v for k, v in options.items()} for _owner, _path, uuid, options in self.mock.control.Profiles()}

    def refused(self, code, contains=None, request=PUBLISH, **members):
        with self.assertRaises(VigilError) as error:
            self.control.request(request, **members)
        self.assertEqual(error.exception.code, code, f"{members}: {error.exception}")
        if contains:
            self.assertIn(contains, str(error.exception))

    def connect_device(self, uuid=SERIAL_PORT):
        """A device connecting to the service: the test's end of the socket."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(ours.close)
        self.mock.control.ConnectProfile(self.spp, uuid, self.dbus.types.UnixFd(theirs.fileno()))
        theirs.close()
        ours.settimeout(20)
        return ours

    def test_bad_publications_are_refused_clearly(self):
        self.refused("invalidArgument", "not a Bluetooth UUID", uuid="serial")
        for channel in (0, 31):
            self.refused("invalidArgument", "outside 1-30", channel=channel)
        self.refused("invalidArgument", "1-248 bytes", name="")
        self.refused("invalidArgument", "coalesceMilliseconds", coalesceMilliseconds=1001)
        self.refused("notFound", "not published", request=UNPUBLISH, uuid="0x1101")
        self.assertEqual(self.profiles(), {}, "nothing registered with bluetoothd")

    def test_a_device_connecting_to_a_published_service_is_a_session_with_bytes_both_ways(self):
        reply = self.control.request(PUBLISH, uuid="0x1101", channel=3, name="Vigil test port")
        self.assertEqual((reply["uuid"], reply["channel"]), (SERIAL_PORT, 3))
        self.wait_until(lambda: SERIAL_PORT in self.profiles(), "the profile registered with bluetoothd")
        options = self.profiles()[SERIAL_PORT]
        self.assertEqual((str(options["Role"]), int(options["Channel"]), str(options["Name"])), ("server", 3, "Vigil test port"))
        self.assertEqual(self.control.request(PUBLISH, uuid="1101", channel=3, name="Vigil test port")["uuid"], SERIAL_PORT,
                         "publishing again is idempotent")
        device = self.connect_device()
        attributes = self.push(self.control, "bluetooth.rfcomm.incoming")["attributes"]
        self.assertEqual((attributes["peer"], attributes["channel"], attributes["uuid"]), (SPP, 3, SERIAL_PORT))
        session = int(attributes["session"])
        payload = bytes(range(256)) * 64
        device.sendall(payload)
        received = b""
        while len(received) < len(payload):
            output = self.control.next_session_output(20)
            self.assertIsNotNone(output, f"only {len(received)} of {len(payload)} bytes arrived")
            self.assertEqual(output.header.get("type"), "sessionData", output.header)
            received += output.body
        self.assertEqual(received, payload, "byte-exact, device to client")
        self.control.write(session, b"ATZ\r")
        self.assertEqual(device.recv(16), b"ATZ\r", "client to device")
        device.close()
        closed = self.control.next_session_output(20)
        self.assertEqual(closed.header.get("type"), "sessionClosed", closed.header)
        self.control.request(UNPUBLISH, uuid="0x1101")
        self.wait_until(lambda: SERIAL_PORT not in self.profiles(), "the profile unregistered")

    def test_a_service_or_channel_another_client_published_is_refused(self):
        self.control.request(PUBLISH, uuid="0x1101", channel=5)
        other = self.connect()
        with self.assertRaises(VigilError) as error:
            other.request(PUBLISH, uuid="0x1101")
        self.assertEqual(error.exception.code, "invalidState")
        with self.assertRaises(VigilError) as error:
            other.request(PUBLISH, uuid="0000aaaa-0000-1000-8000-00805f9b34fb", channel=5)
        self.assertEqual(error.exception.code, "invalidState")
        self.assertIn("channel 5", str(error.exception))

    def test_vigilctl_listen_serves_the_first_device_that_connects(self):
        terminal = subprocess.Popen([VIGILCTL, "--socket", self.socket, "ble", "rfcomm", "--listen", "7"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.wait_until(lambda: SERIAL_PORT in self.profiles() or terminal.poll() is not None, "vigilctl's service")
            self.assertIsNone(terminal.poll(), terminal.stderr.read().decode() if terminal.poll() is not None else "")
            self.assertEqual(int(self.mock.control.Profiles()[0][3]["Channel"]), 7)
            device = self.connect_device()
            device.sendall(b"from the device\n")
            self.assertEqual(terminal.stdout.readline(), b"from the device\n")
            terminal.stdin.write(b"from the terminal\n")
            terminal.stdin.close()  # EOF: vigilctl closes the channel once the write is done
            self.assertEqual(device.recv(64), b"from the terminal\n")
            self.assertEqual(terminal.wait(timeout=20), 0, terminal.stderr.read().decode())
        finally:
            if terminal.poll() is None:
                terminal.kill()
                terminal.wait()
            for stream in (terminal.stdout, terminal.stderr):
                stream.close()
        self.wait_until(lambda: SERIAL_PORT not in self.profiles(), "the service gone with vigilctl's connection")

    def test_a_restarted_bluetoothd_gets_the_service_again(self):
        self.control.request(PUBLISH, uuid="0x1101", channel=4)
        self.wait_until(lambda: SERIAL_PORT in self.profiles(), "the profile registered")
        self.mock.restart_bluez()
        self.wait_until(lambda: SERIAL_PORT in self.profiles(), "the profile registered with the new bluetoothd")


RFCOMM_APP = "org.vigil.test.sppapp"


class RFCOMMAppRig(MockBlueZDaemonTest):
    """An app (example_app.py --rfcomm-publish) that publishes a serial port
    service at launch and echoes what each incoming channel brings."""

    APP = RFCOMM_APP
    MODES = '["bluetooth-peripheral"]'

    def prepare_mock(self):
        self.spp = self.mock.control.AddLEDevice("hci0", SPP, "Vigil SPP",
                                                 self.dbus.Dictionary({"AddressType": self.dbus.String("public")}, signature="sv"))

    def manifest(self):
        service = json.dumps(json.dumps({"uuid": "0x1101", "channel": 6, "name": "Echo"}))
        return (f'id = "{RFCOMM_APP}"\n'
                f'exec = ["{PYTHON}", "{EXAMPLE_APP}", "--record", "{self.record}", "--rfcomm-publish", {service}]\n'
                f"background-modes = {self.MODES}\n")

    def profiles(self):
        return [str(uuid) for _owner, _path, uuid, _options in self.mock.control.Profiles()]

    def state(self):
        return next(a for a in self.control.apps() if a["id"] == RFCOMM_APP)["state"]

    def echo(self, data):
        """A device connects, sends `data`, and reads the app's echo."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            self.mock.control.ConnectProfile(self.spp, SERIAL_PORT, self.dbus.types.UnixFd(theirs.fileno()))
            theirs.close()
            ours.settimeout(30)
            ours.sendall(data)
            received = b""
            while len(received) < len(data):
                chunk = ours.recv(65536)
                self.assertTrue(chunk, f"the channel closed after {len(received)} bytes\n{self.diagnostics()}")
                received += chunk
            return received


@unittest.skipIf(ble.missing(), ble.missing() or "")
class RFCOMMAppTests(RFCOMMAppRig):
    def test_a_suspended_app_is_woken_and_a_stopped_one_relaunched_by_a_device_connecting(self):
        self.control.app_action("launch", RFCOMM_APP)
        self.wait_until(lambda: any(r["kind"] == "rfcommPublished" for r in self.records()), "the service published")
        self.wait_until(lambda: SERIAL_PORT in self.profiles(), "the profile registered")
        self.control.app_action("background", RFCOMM_APP)
        self.wait_until(lambda: self.state() == "suspended", "suspended")
        self.assertEqual(self.echo(b"ping while frozen"), b"ping while frozen")
        wakes = [d for d in self.control.log(app=RFCOMM_APP) if d["action"] == "wake"]
        self.assertTrue(wakes, "the incoming channel woke the app")

        self.control.app_action("terminate", RFCOMM_APP)
        self.wait_until(lambda: self.state() == "notRunning", "terminated")
        self.assertIn(SERIAL_PORT, self.profiles(), "the service stays while the app is not running")
        self.assertEqual(self.echo(b"ping while stopped"), b"ping while stopped")
        self.assertEqual(len([r for r in self.records() if r["kind"] == "launch"]), 2, "relaunched by the connection")

        # A daemon restart: the saved intent publishes the service again (the old registration left with the old vigild).
        self.stop_daemon()
        self.wait_until(lambda: SERIAL_PORT not in self.profiles(), "the old registration gone with its vigild")
        self.start_daemon()
        self.wait_until(lambda: SERIAL_PORT in self.profiles(), "the service published again by the restarted vigild")
        self.assertEqual(self.echo(b"ping after a restart"), b"ping after a restart")

        # The user force-quits the app: now the service goes.
        self.control.app_action("quit", RFCOMM_APP)
        self.wait_until(lambda: SERIAL_PORT not in self.profiles(), "the service withdrawn after a force-quit")


@unittest.skipIf(ble.missing(), ble.missing() or "")
class RFCOMMWithoutModeTests(RFCOMMAppRig):
    MODES = '["bluetooth-central"]'

    def test_an_app_without_the_peripheral_mode_is_refused(self):
        self.control.app_action("launch", RFCOMM_APP)
        self.wait_until(lambda: any(r["kind"] == "rfcommRefused" for r in self.records()), "the refusal")
        refused = next(r for r in self.records() if r["kind"] == "rfcommRefused")
        self.assertEqual(refused["code"], "notPermitted")
        self.assertIn("bluetooth-peripheral", refused["error"])
        self.assertEqual(self.profiles(), [])


if __name__ == "__main__":
    unittest.main()

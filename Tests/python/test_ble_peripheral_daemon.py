"""Bluetooth LE peripheral through the real vigild, against the host-tier
BlueZ mock (Tests/bluez-mock). The mock plays bluetoothd: RegisterApplication
calls back vigild's GetManagedObjects asynchronously (a daemon that blocked
its loop while registering would fail), and its Remote* control methods
stand in for a remote central calling ReadValue/WriteValue/StartNotify on
vigild's exported objects. Clients are a control connection (as `vigilctl ble
serve`) or an app (clients/python/example_app.py, relaunched by requests).
"""

import asyncio
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ble_harness import EXAMPLE_APP, PYTHON, REPO, VIGILD, MockBlueZDaemonTest, missing  # noqa: E402,F401
from vigil_client import VigilError  # noqa: E402
import vigil  # noqa: E402  (clients/python, put on sys.path by ble_harness)

HRS = "0000180d-0000-1000-8000-00805f9b34fb"
MEASUREMENT = "00002a37-0000-1000-8000-00805f9b34fb"
LOCATION = "00002a38-0000-1000-8000-00805f9b34fb"
CONTROL_POINT = "00002a39-0000-1000-8000-00805f9b34fb"
APP = "org.vigil.test.peripheralapp"

SERVICE = {"uuid": "180d", "characteristics": [
    {"uuid": "2a37", "properties": ["notify"]},
    {"uuid": "2a38", "properties": ["read"], "value": "02"},
    {"uuid": "2a39", "properties": ["write", "read"]},
]}


@unittest.skipIf(missing(), missing() or "")
class BluetoothPeripheralTests(MockBlueZDaemonTest):
    APP = APP
    # RegisterApplication's callback to vigild and a remote central's requests time out as BlueZ's do.
    mock_options = {"register_timeout": 3.0}
    config_lines = "bluetooth-request-timeout = 10.0\n"
    use_cgroups = False

    def prepare_mock(self):
        self.mock.control.SetTimeouts(3.0, 25.0)

    def manifest(self):
        return (f'id = "{APP}"\n'
                f'exec = ["{PYTHON}", "{EXAMPLE_APP}", "--record", "{self.record}", "--ble-serve", {json.dumps(json.dumps(SERVICE))}, '
                '"--restore-id", "hrs"]\n'
                'background-modes = ["bluetooth-peripheral"]\n')

    def application(self):
        """The one registered GATT application: {object path: {interface: props}}."""
        apps = self.mock.control.Applications()
        self.assertEqual(len(apps), 1, apps)
        return {str(path): {str(i): dict(p) for i, p in ifaces.items()} for path, ifaces in apps[0][2].items()}

    def characteristic_path(self, uuid):
        return next(path for path, ifaces in self.application().items()
                    if str(ifaces.get("org.bluez.GattCharacteristic1", {}).get("UUID", "")) == uuid)

    def remote(self, method, *args):
        """Calls a Remote* method from another thread (it blocks until vigild answers)."""
        result = {}

        def run():
            bus = self.dbus.bus.BusConnection(self.mock.address)
            control = self.dbus.Interface(bus.get_object("org.bluez", "/org/vigil/mock"), "org.vigil.BlueZMock")
            try:
                result["value"] = getattr(control, method)(*args, timeout=30)
            except Exception as error:  # noqa: BLE001 - reported to the test
                result["error"] = error
            bus.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread, result

    def mock_calls(self):
        return [str(call[4]) for call in self.mock.control.Calls()]

    def daemon_log_text(self):
        with open(f"{self.dir}/vigild.log", encoding="utf-8", errors="replace") as log:
            return log.read()

    # Tests

    # Control-role tests, written with the vigil package (clients/python/vigil):
    # its PeripheralManager instead of hand-written ble.* requests and pushes.

    def peripheral_test(self, body):
        """Runs `body(manager)` on a fresh event loop with a vigil.Control's peripheral manager."""
        async def run():
            async with vigil.Control(self.socket) as control:
                await body(await control.peripheral())
        asyncio.run(run())

    async def next_request(self, manager, kind, timeout=15):
        request = await manager.next_request(timeout)
        self.assertIsNotNone(request, f"no {kind} request within {timeout} s\n{self.diagnostics()}")
        self.assertEqual(request.kind, kind, request)
        return request

    def test_bad_definitions_are_refused_before_bluez_sees_them(self):
        async def body(manager):
            for service, words in (
                ({"uuid": "xyz", "characteristics": []}, "not a Bluetooth UUID"),
                (vigil.service_definition("180d", [vigil.characteristic_definition("2a37", ["notify"], b"\x01")]),
                 "read-only"),
                (vigil.service_definition("180d", [vigil.characteristic_definition("2a37", ["fly"])]), "unknown property"),
                (vigil.service_definition("180d", [vigil.characteristic_definition("2a37", ["read"])] * 2), "twice"),
            ):
                with self.assertRaises(vigil.VigilError) as refused:
                    await manager.add_service(service)
                self.assertEqual(refused.exception.code, "invalidArgument")
                self.assertIn(words, refused.exception.message)
        self.peripheral_test(body)
        self.assertEqual(len(self.mock.control.Applications()), 0, "nothing reached BlueZ")

    def test_control_client_serves_fixed_and_dynamic_values_and_notifies(self):
        async def body(manager):
            await manager.add_service(SERVICE)
            tree = self.application()
            services = [p for p in tree.values() if "org.bluez.GattService1" in p]
            self.assertEqual([str(s["org.bluez.GattService1"]["UUID"]) for s in services], [HRS])

            # A fixed value is answered by vigild itself: no request reaches the client.
            thread, result = self.remote("RemoteRead", self.characteristic_path(LOCATION), self.dbus.UInt16(0))
            thread.join(10)
            self.assertEqual((str(result["value"][0]), bytes(result["value"][1])), ("", b"\x02"), result)
            # A dynamic read goes to the client, who answers with the value.
            thread, result = self.remote("RemoteRead", self.characteristic_path(CONTROL_POINT), self.dbus.UInt16(0))
            request = await self.next_request(manager, "read")
            self.assertEqual(request.characteristic, CONTROL_POINT)
            await request.respond(b"\x07\x08")
            thread.join(10)
            self.assertEqual(bytes(result["value"][1]), b"\x07\x08", result)
            # A write with response: the client gets the value and may refuse it.
            thread, result = self.remote("RemoteWrite", self.characteristic_path(CONTROL_POINT), b"\x02", "request")
            write = await self.next_request(manager, "write")
            self.assertEqual(write.value, b"\x02")
            await write.fail("writeNotPermitted")
            thread.join(10)
            self.assertEqual(str(result["value"]), "org.bluez.Error.NotPermitted", result)
            # Subscribe, then updates reach the central in order.
            thread, result = self.remote("RemoteStartNotify", self.characteristic_path(MEASUREMENT))
            thread.join(10)
            await self.next_request(manager, "subscribed")
            for bpm in (70, 71, 72):
                self.assertTrue((await manager.update_value("180d", "2a37", bytes([0, bpm]))).sent)
            path = self.characteristic_path(MEASUREMENT)
            self.wait_until(lambda: len(self.mock.control.RemoteNotifications(path)) == 3, "3 notifications at the central")
            self.assertEqual([bytes(v) for v in self.mock.control.RemoteNotifications(path)], [b"\x00F", b"\x00G", b"\x00H"])
        self.peripheral_test(body)

    def test_an_unanswered_request_gets_the_central_an_error_not_a_hang(self):
        async def body(manager):
            await manager.add_service(SERVICE)
            started = time.monotonic()
            thread, result = self.remote("RemoteRead", self.characteristic_path(CONTROL_POINT), self.dbus.UInt16(0))
            await self.next_request(manager, "read")
            thread.join(24)  # the daemon's request timeout (10 s here) answers it, before the mock's own (25 s)
            self.assertFalse(thread.is_alive())
            self.assertEqual(str(result["value"][0]), "org.bluez.Error.Failed", result)
            self.assertLess(time.monotonic() - started, 22)
        self.peripheral_test(body)

    def test_advertising_limits_come_back_as_clear_errors(self):
        async def body(manager):
            await manager.start_advertising(local_name="Vigil", service_uuids=["180d"])
            ads = self.mock.control.Advertisements()
            self.assertEqual(len(ads), 1)
            self.assertEqual(str(ads[0][2]["LocalName"]), "Vigil")
            with self.assertRaises(vigil.VigilError) as refused:
                await manager.start_advertising(local_name="Vigil", manufacturer_data={65535: bytes(40)})
            self.assertEqual(refused.exception.code, "deviceError")
            self.assertIn("InvalidLength", refused.exception.message)
        self.peripheral_test(body)

    def test_an_advertisement_withdrawn_while_bluez_registers_it_is_not_left_behind(self):
        # The client goes while BlueZ is still registering its advertisement:
        # the registration must be undone when it completes, or BlueZ
        # advertises for nobody (and a later one at the same path met
        # AlreadyExists after a daemon restart).
        self.mock.control.HoldAdvertisements(True)

        async def start_and_leave():
            async with vigil.Control(self.socket) as control:
                manager = await control.peripheral()
                start = asyncio.ensure_future(manager.start_advertising(local_name="Gone", service_uuids=["180d"]))
                deadline = time.monotonic() + 10
                while "RegisterAdvertisement" not in self.mock_calls():
                    self.assertLess(time.monotonic(), deadline, "vigild never asked to advertise")
                    await asyncio.sleep(0.05)
                start.cancel()
        asyncio.run(start_and_leave())
        self.wait_until(lambda: "advertising withdrawn" in self.daemon_log_text(), "vigild to withdraw the client's state")
        self.mock.control.HoldAdvertisements(False)
        self.wait_until(lambda: "UnregisterAdvertisement" in self.mock_calls(), "the late registration undone")
        self.assertEqual(list(self.mock.control.Advertisements()), [], "an advertisement left registered for nobody")

        # The next one registers normally.
        async def advertise():
            async with vigil.Control(self.socket) as control:
                await (await control.peripheral()).start_advertising(local_name="Next", service_uuids=["180d"])
                self.assertEqual([str(ad[2]["LocalName"]) for ad in self.mock.control.Advertisements()], ["Next"])
        asyncio.run(advertise())

    def test_a_killed_app_keeps_its_service_and_is_relaunched_by_the_next_request(self):
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleServing" for r in self.records()), "the app's service")
        self.control.app_action("background", APP)
        self.wait_until(lambda: next(a for a in self.control.apps() if a["id"] == APP)["state"] == "suspended", "suspended")
        path = self.characteristic_path(CONTROL_POINT)
        # The fixed value is answered with the app frozen: it is not woken.
        wakes = len([d for d in self.control.log(app=APP) if d["action"] == "wake"])
        thread, result = self.remote("RemoteRead", self.characteristic_path(LOCATION), self.dbus.UInt16(0))
        thread.join(10)
        self.assertEqual(bytes(result["value"][1]), b"\x02")
        self.assertEqual(len([d for d in self.control.log(app=APP) if d["action"] == "wake"]), wakes)
        # A dynamic read wakes it, and it answers (example_app answers reads with "value-N").
        thread, result = self.remote("RemoteRead", path, self.dbus.UInt16(0))
        thread.join(20)
        self.assertEqual(bytes(result["value"][1]), b"value-1", result)

        # Killed by the system: the service stays; the next read relaunches it, and it answers.
        self.control.app_action("terminate", APP)
        self.wait_until(lambda: next(a for a in self.control.apps() if a["id"] == APP)["state"] == "notRunning", "terminated")
        self.assertEqual(len(self.mock.control.Applications()), 1, "the service went with the app")
        thread, result = self.remote("RemoteRead", path, self.dbus.UInt16(0))
        thread.join(30)
        self.assertEqual(bytes(result["value"][1]), b"value-1", f"{result}\n{self.diagnostics()}")
        registered = [r for r in self.records() if r["kind"] == "peripheralRegistered"]
        self.assertEqual(len(registered), 2)
        self.assertEqual(registered[-1]["restored"]["services"][0]["uuid"], HRS)
        # The user force-quits it: now the service goes.
        self.control.app_action("quit", APP)
        self.wait_until(lambda: len(self.mock.control.Applications()) == 0, "the service withdrawn after a force-quit")


if __name__ == "__main__":
    unittest.main()

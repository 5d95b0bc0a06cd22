"""Bluetooth LE central through the real vigild, against the host-tier BlueZ
mock (Tests/bluez-mock: dbusmock's bluez5 on a private system-like bus,
extended with GATT, notifications and fault injection).

vigild talks to "BlueZ" over D-Bus exactly as it would to bluetoothd; the test
drives the radio through the mock's control interface and talks to vigild as
vigilctl does (control role: events arrive as `blePush`) or through an app
(clients/python/example_app.py, launched by vigild: events are queued, wake it
and relaunch it). What a pass proves: vigild's handling of BlueZ's API as the
mock models it. The lab tier (Tests/Lab) checks the same against real BlueZ.
"""

import asyncio
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ble_harness import EXAMPLE_APP, PYTHON, REPO, VIGILD, MockBlueZDaemonTest, extra_threads, missing  # noqa: E402,F401
from vigil_client import VigilError  # noqa: E402
import vigil  # noqa: E402

HRM = "AA:BB:CC:DD:EE:01"
HRS, HRM_MEASUREMENT, BODY_LOCATION = "180d", "2a37", "2a38"
FULL = lambda short: f"0000{short}-0000-1000-8000-00805f9b34fb"  # noqa: E731
APP = "org.vigil.test.bleapp"


class CentralRig(MockBlueZDaemonTest):
    """The mock with a heart-rate monitor (`self.hrm`, at HRM) and an app in the
    bluetooth-central mode that subscribes to its measurements. No tests: the
    modules that need this rig subclass it."""

    APP = APP

    def prepare_mock(self):
        self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")

    def manifest(self):
        return (f'id = "{APP}"\n'
                f'exec = ["{PYTHON}", "{EXAMPLE_APP}", "--record", "{self.record}", "--ble-peripheral", "{HRM}", '
                f'"--ble-notify", "{HRS}/{HRM_MEASUREMENT}", "--restore-id", "hrm"]\n'
                'background-modes = ["bluetooth-central"]\n')


@unittest.skipIf(missing(), missing() or "")
class BluetoothCentralTests(CentralRig):
    def heart_rate(self, bpm, rr=()):
        dbus = self.dbus
        return self.mock.control.NotifyHeartRate(self.hrm, dbus.UInt16(bpm), dbus.Array([dbus.UInt16(v) for v in rr], signature="q"))

    @staticmethod
    def measurement(message):
        """Decodes a 0x2A37 value (flags, uint8/uint16 rate, RR intervals) from a push."""
        return BluetoothCentralTests.measurement_of(message.body)

    @staticmethod
    def measurement_of(value):
        """Decodes a 0x2A37 value (flags, uint8/uint16 rate, RR intervals)."""
        flags, rate, offset = value[0], value[1], 2
        if flags & 1:
            rate, offset = value[1] | value[2] << 8, 3
        if flags & 8:
            offset += 2
        rr = [value[i] | value[i + 1] << 8 for i in range(offset, len(value), 2)] if flags & 16 else []
        return rate, rr

    def connected_and_subscribed(self, client, acquire=False):
        client.request("ble.registerCentral")
        client.request("ble.connect", peripheral=HRM)
        self.push(client, "ble.connected")
        client.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=True,
                       acquire=acquire)
        self.wait_until(lambda: self.notifying(), "notifications on at the mock")

    def notifying(self):
        """Whether the mock's 0x2A37 is notifying (StartNotify) or acquired (AcquireNotify)."""
        characteristic = self.mock.bus.get_object("org.bluez", f"{self.hrm}/service000a/char000b")
        properties = characteristic.GetAll("org.bluez.GattCharacteristic1", dbus_interface="org.freedesktop.DBus.Properties")
        return bool(properties.get("Notifying") or properties.get("NotifyAcquired"))

    def calls(self, method):
        return [call for call in self.mock.control.Calls() if str(call[4]) == method]

    def subscription_saved(self):
        """Whether the daemon's state file holds the app's 0x2A37 subscription."""
        try:
            with open(f"{self.dir}/state/state.json") as file:
                central = json.load(file).get("bluetooth", {}).get("central", {}).get(APP, {})
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        return any(s["path"]["characteristic"].startswith("00002a37") for s in central.get("subscriptions", []))

    def state(self, app=APP):
        return next(a for a in self.control.apps() if a["id"] == app)["state"]

    # Tests

    def test_scan_by_service_coalesces_duplicates_then_connect_discover_read_and_notify(self):
        # Written with the vigil package (clients/python/vigil): its Bleak-like
        # Central, Scanner and BLEClient instead of hand-written ble.* requests.
        async def next_advertisement(scanner, timeout=15):
            return await asyncio.wait_for(anext(scanner.advertisements()), timeout)

        async def body():
            async with vigil.Control(self.socket) as control:
                central = await control.central()
                async with central.scanner(services=[HRS]) as scanner:
                    found = await next_advertisement(scanner)
                    self.assertEqual(found.address, HRM)
                    self.assertIn(FULL(HRS), found.service_uuids)
                    self.assertEqual(found.name, "Vigil HRM")
                    # A re-advertisement (new RSSI) is a duplicate: coalesced without allowDuplicates.
                    self.mock.control.SetAdvertisement(self.hrm, {"RSSI": self.dbus.Int16(-40)})
                    with self.assertRaises(asyncio.TimeoutError):
                        await next_advertisement(scanner, 1.0)
                # With duplicates allowed (a foreground client), it is reported.
                async with central.scanner(services=[HRS], allow_duplicates=True) as scanner:
                    await next_advertisement(scanner)
                    self.mock.control.SetAdvertisement(self.hrm, {"RSSI": self.dbus.Int16(-30)})
                    again = await next_advertisement(scanner)
                    self.assertEqual(again.rssi, -30)

                client = await central.client(HRM.lower()).connect(timeout=15)
                services = await client.get_services()
                heart = services.get_service(HRS)
                self.assertEqual(heart.get_characteristic(HRM_MEASUREMENT).properties, ("notify",))
                self.assertEqual(await client.read_gatt_char((HRS, BODY_LOCATION)), b"\x01")
                with self.assertRaises(vigil.VigilError) as missing_characteristic:
                    await client.read_gatt_char((HRS, "2a99"))
                self.assertEqual(missing_characteristic.exception.code, "notFound")

                # A write: the control point's 0x01 resets energy expended; BlueZ's refusals come back named.
                resets = int(self.mock.control.HeartRateState(self.hrm)["EnergyResets"])
                await client.write_gatt_char("2a39", b"\x01", response=True)
                self.assertEqual(int(self.mock.control.HeartRateState(self.hrm)["EnergyResets"]), resets + 1)
                with self.assertRaises(vigil.VigilError) as refused:  # 0x2A39 has no write-without-response
                    await client.write_gatt_char("2a39", b"\x01", response=False)
                self.assertEqual(refused.exception.code, "deviceError")
                self.assertIn("org.bluez.Error.NotPermitted", refused.exception.message)
                types = [str(dict(call[5][1])["type"]) for call in self.calls("WriteValue")]
                self.assertEqual(types, ["request", "command"])

                values = asyncio.Queue()
                await client.start_notify(HRM_MEASUREMENT, lambda characteristic, data: values.put_nowait(bytes(data)))
                self.wait_until(self.notifying, "StartNotify at the mock")
                sent = [(60, [1024]), (300, []), (75, [800, 820, 790])]
                for bpm, rr in sent:
                    self.heart_rate(bpm, rr)
                got = [self.measurement_of(await asyncio.wait_for(values.get(), 15)) for _ in sent]
                self.assertEqual(got, sent)

        asyncio.run(body())

    def test_connect_survives_in_progress_aborts_and_an_absent_device(self):
        # With the vigil package: BLEClient.connect waits through the daemon's retries.
        async def body():
            async with vigil.Control(self.socket) as control:
                central = await control.central()
                dbus = self.dbus
                self.mock.control.FailNextConnect(self.hrm, "org.bluez.Error.InProgress", dbus.UInt32(1))
                self.mock.control.FailNextConnectWithMessage(self.hrm, "org.bluez.Error.Failed",
                                                             "le-connection-abort-by-local", dbus.UInt32(2))
                losses = asyncio.Queue()
                client = central.client(HRM, disconnected_callback=lambda c: losses.put_nowait(c.will_reconnect))
                await client.connect(timeout=30)
                self.assertGreaterEqual(len(self.calls("Connect")), 4, "one failure each, then success")

                # The peer goes away (the link times out): disconnected with willReconnect; the request stays pending.
                self.mock.control.DeviceAway(self.hrm, False)
                self.assertTrue(await asyncio.wait_for(losses.get(), 15), "willReconnect")
                with self.assertRaises(asyncio.TimeoutError):
                    await client.wait_until_connected(2.0)
                self.assertIn(HRM, [device.address for device in await central.peripherals()])
                # It comes back: connected again, with no new request.
                self.mock.control.DeviceBack(self.hrm)
                await client.wait_until_connected(30)

        asyncio.run(body())

    # A connect never stalls: BlueZ's state decides, not the signals vigild
    # happened to see (issue 10, item 16: a bridge stayed at "connecting"
    # while the link was up and bluetoothd said "already connected").

    # Written with the vigil package: BLEClient.connect returns once vigild announced the link.

    def central_test(self, body):
        """Runs `body(central)` on a fresh event loop with a vigil.Control's central."""
        async def run():
            async with vigil.Control(self.socket) as control:
                await body(await control.central())
        asyncio.run(run())

    async def eventually(self, condition, what, timeout=20):
        """wait_until, letting the event loop run meanwhile."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}\n{self.diagnostics()}")
            await asyncio.sleep(0.05)

    def test_connect_completes_when_bluez_never_signals_connected(self):
        # Connect replies and the link is up, but no PropertiesChanged says so
        # (lost, merged into another signal, or sent before vigild listened).
        self.mock.control.SetConnectSignals(self.hrm, False)

        async def body(central):
            client = await central.client(HRM).connect(timeout=15)
            # The re-read brought ServicesResolved too: GATT works.
            self.assertEqual(await client.read_gatt_char((HRS, BODY_LOCATION)), b"\x01")
        self.central_test(body)
        self.assertEqual(len(self.calls("Connect")), 1)

    def test_connect_completes_when_bluez_says_already_connected(self):
        # The link is up with no signal ever seen: vigild's Connect gets AlreadyConnected.
        self.mock.control.ConnectSilently(self.hrm)

        async def body(central):
            client = await central.client(HRM).connect(timeout=15)
            self.assertEqual(await client.read_gatt_char((HRS, BODY_LOCATION)), b"\x01")
        self.central_test(body)
        self.assertEqual(len(self.calls("Connect")), 1, "answered AlreadyConnected, and that was enough")

    def test_a_device_that_appears_connected_is_announced(self):
        # bluetoothd creates a device for a link with Connected=true in its
        # InterfacesAdded and sends no PropertiesChanged for it.
        late = "AA:BB:CC:DD:EE:02"

        async def body(central):
            connecting = asyncio.ensure_future(central.client(late).connect(timeout=15))
            await self.eventually(lambda: self.calls("StartDiscovery"), "discovery for the unknown device")
            self.mock.control.AddLEDevice("hci0", late, "Late HRM", {"Connected": self.dbus.Boolean(True)})
            self.assertTrue((await connecting).is_connected)
        self.central_test(body)

    def test_a_connect_left_unanswered_is_checked_and_announced(self):
        # The link comes up without a signal and Connect's reply does not come
        # (BlueZ still resolving): vigild's check of the pending connect finds it.
        self.mock.control.SetConnectSignals(self.hrm, False)
        self.mock.control.SetResolveDelay(self.hrm, 600.0)

        async def body(central):
            await central.client(HRM).connect(timeout=30)
        self.central_test(body)

        def logged():
            with open(f"{self.dir}/vigild.log") as log:
                return "Connect still unanswered" in log.read()
        self.wait_until(logged, "the pending connect's check in vigild's log")

    def test_a_connect_bluez_never_answers_with_the_link_down_is_cancelled_and_tried_again(self):
        # Seen in the lab: BlueZ's Connect left pending for good while the peer
        # advertised. vigild cancels it (Disconnect) after 10 s and connects again.
        self.mock.control.HangConnects(self.hrm, 1)

        async def body(central):
            await central.client(HRM).connect(timeout=40)
        self.central_test(body)
        connects = self.calls("Connect")
        self.assertGreaterEqual(len(connects), 2, f"Connect calls: {connects}")
        self.assertTrue(self.calls("Disconnect"), "the hung Connect was not cancelled")
        # Discovery ran while the Connect hung (the controller must see the
        # peer advertise), and stops once the link is up.
        self.assertTrue(self.calls("StartDiscovery"), "no discovery while the Connect hung")
        self.wait_until(lambda: len(self.calls("StopDiscovery")) >= 1, "discovery off once connected")
        with open(f"{self.dir}/vigild.log") as log:
            self.assertIn("cancelling the Connect unanswered", log.read())

    def test_letting_go_before_connect_replies_takes_the_link_down(self):
        # Connected arrives before Connect's reply (BlueZ replies after resolving
        # services); a client that lets go in between still gets the link cut.
        self.mock.control.SetResolveDelay(self.hrm, 3.0)

        async def body(central):
            client = await central.client(HRM).connect(timeout=15)
            await client.disconnect()
            await self.eventually(lambda: self.calls("Disconnect"), "vigild's Disconnect of the link it made")
        self.central_test(body)

    def test_subscriptions_come_back_after_a_link_loss_and_a_bluetoothd_restart(self):
        # With the vigil package: a BLEClient's disconnected callback, the central's state callback.
        async def body():
            async with vigil.Control(self.socket) as control:
                central = await control.central()
                states, losses = asyncio.Queue(), asyncio.Queue()
                central.state_callback = states.put_nowait
                client = central.client(HRM, disconnected_callback=lambda c: losses.put_nowait(c.will_reconnect))
                await client.connect(timeout=15)
                await client.start_notify((HRS, HRM_MEASUREMENT), acquire=False)  # StartNotify, as before the package
                self.wait_until(self.notifying, "StartNotify at the mock")

                async def measured(bpm):
                    self.heart_rate(bpm)
                    value = await asyncio.wait_for(anext(client.notifications()), 15)
                    return self.measurement_of(value.value)[0]

                self.assertEqual(await measured(61), 61)
                self.mock.control.DisconnectDevice(self.hrm, "org.bluez.Reason.Remote")
                self.assertTrue(await asyncio.wait_for(losses.get(), 15), "willReconnect")
                await client.wait_until_connected(30)
                self.wait_until(self.notifying, "StartNotify again after the reconnect")
                self.assertEqual(await measured(62), 62)

                # bluetoothd restarts: its objects are gone; when it and the device are back, so is everything.
                connections = client.connections
                self.mock.restart_bluez()
                while await asyncio.wait_for(states.get(), 15) not in ("resetting", "unsupported"):
                    pass
                self.hrm = self.mock.control.AddHeartRateMonitor("hci0", HRM, "Vigil HRM")
                async def reconnected():  # ble.connected again, on the new bluetoothd
                    while client.connections == connections:
                        await asyncio.sleep(0.05)
                await asyncio.wait_for(reconnected(), 30)
                self.wait_until(self.notifying, "StartNotify after bluetoothd's restart")
                self.assertEqual(await measured(63), 63)

        asyncio.run(body())

    def test_two_clients_share_one_link_and_one_subscription(self):
        # With the vigil package: two control connections, each with its central and client.
        async def body():
            async with vigil.Control(self.socket) as first, vigil.Control(self.socket) as second:
                clients = []
                for control in (first, second):
                    client = await (await control.central()).client(HRM).connect(timeout=15)
                    await client.start_notify((HRS, HRM_MEASUREMENT), acquire=False)  # StartNotify
                    clients.append(client)
                self.wait_until(self.notifying, "notifications on at the mock")
                self.assertEqual(len(self.calls("StartNotify")), 1, "one notify session for both")

                async def measured(client):
                    value = await asyncio.wait_for(anext(client.notifications()), 15)
                    return self.measurement_of(value.value)[0]

                self.heart_rate(70)
                self.assertEqual([await measured(c) for c in clients], [70, 70])
                # One client lets go: the other keeps the link and its values.
                await clients[0].disconnect()
                self.heart_rate(71)
                self.assertEqual(await measured(clients[1]), 71)
                self.assertEqual(self.calls("Disconnect"), [], "the link was cut while another client used it")
                # The last one lets go: vigild disconnects the link it made.
                await clients[1].disconnect()
                self.wait_until(lambda: self.calls("Disconnect"), "Disconnect once nobody uses the link")

        asyncio.run(body())

    def test_acquire_notify_delivers_through_the_socket(self):
        c = self.control
        self.connected_and_subscribed(c, acquire=True)
        self.assertEqual(len(self.calls("AcquireNotify")), 1)
        for bpm in (80, 81, 82):
            self.heart_rate(bpm)
        self.assertEqual([self.measurement(self.push(c, "ble.notification"))[0] for _ in range(3)], [80, 81, 82])

    # Notifications by default, fallbacks, and batches to apps

    def burst(self, first, count, chunk=20):
        """`count` measurements numbered first.. (in the RR field), back to back in chunks of
        `chunk`, 2 ms apart: an AcquireNotify socket holds ~270 unread values, then BlueZ (and
        the mock) drop them, and a debug vigild taking a batch of hundreds can be that slow."""
        dbus = self.dbus
        char = f"{self.hrm}/service000a/char000b"
        for start in range(first, first + count, chunk):
            values = [dbus.Array([0x16, 60, n & 0xFF, n >> 8], signature="y") for n in range(start, min(first + count, start + chunk))]
            self.mock.control.NotifyMany(char, dbus.Array(values, signature="ay"))
            time.sleep(0.002)

    def app_values(self):
        """(seq, RR number) of every ble.notification value the app recorded, in record order."""
        out = []
        for r in self.records():
            if r.get("eventKind") == "ble.notification":
                value = bytes.fromhex(r["payloadHex"])
                out.append((r["seq"], value[2] | value[3] << 8 if len(value) >= 4 else None))
        return out

    def test_notifications_use_acquire_notify_by_default_and_start_notify_when_asked(self):
        c = self.control
        c.request("ble.registerCentral")
        c.request("ble.connect", peripheral=HRM)
        self.push(c, "ble.connected")
        c.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=True)
        self.wait_until(self.notifying, "notifications on at the mock")
        self.assertEqual((len(self.calls("AcquireNotify")), len(self.calls("StartNotify"))), (1, 0))
        # An empty value comes through the socket as a value (recv returns 0 for it, as at the end).
        self.mock.control.Notify(f"{self.hrm}/service000a/char000b", self.dbus.Array([], signature="y"))
        self.heart_rate(83)
        self.assertEqual(self.push(c, "ble.notification").body, b"")
        self.assertEqual(self.measurement(self.push(c, "ble.notification"))[0], 83)
        # acquire: false is StartNotify (for a peripheral that notifies before the subscription is confirmed).
        c.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=False)
        self.wait_until(lambda: not self.notifying(), "notifications off")
        c.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=True, acquire=False)
        self.wait_until(self.notifying, "StartNotify at the mock")
        self.assertEqual((len(self.calls("AcquireNotify")), len(self.calls("StartNotify"))), (1, 1))
        self.heart_rate(84)
        self.assertEqual(self.measurement(self.push(c, "ble.notification"))[0], 84)

    def test_a_stopping_vigild_hands_its_acquired_sockets_back_before_leaving_the_bus(self):
        # bluetoothd 5.66 crashes when an acquired session's owner leaves the bus first (lab, 2026-11-25).
        c = self.control
        c.request("ble.registerCentral")
        c.request("ble.connect", peripheral=HRM)
        self.push(c, "ble.connected")
        c.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=True)
        self.wait_until(self.notifying, "AcquireNotify at the mock")
        self.daemon.terminate()
        self.daemon.wait(timeout=15)
        with open(f"{self.dir}/vigild.log") as log:
            self.assertIn("handed back 1 AcquireNotify socket(s) before leaving the bus", log.read())
        self.assertFalse(self.notifying())

    def test_acquire_notify_refused_falls_back_to_start_notify(self):
        # Another D-Bus client of BlueZ holds a StartNotify session: AcquireNotify is refused (InProgress).
        c = self.control
        c.request("ble.registerCentral")
        c.request("ble.connect", peripheral=HRM)
        self.push(c, "ble.connected")
        characteristic = self.mock.bus.get_object("org.bluez", f"{self.hrm}/service000a/char000b")
        characteristic.StartNotify(dbus_interface="org.bluez.GattCharacteristic1")
        c.request("ble.notify", peripheral=HRM, service=HRS, characteristic=HRM_MEASUREMENT, enabled=True)
        self.wait_until(lambda: len(self.calls("StartNotify")) == 2, "vigild's StartNotify after the refusal")
        self.assertEqual(len(self.calls("AcquireNotify")), 1)
        self.heart_rate(85)
        self.assertEqual(self.measurement(self.push(c, "ble.notification"))[0], 85)
        with open(f"{self.dir}/vigild.log") as log:
            self.assertIn("using StartNotify", log.read())

    def launch_app(self, *extra):
        """Launches the test app with `extra` arguments added to its manifest's exec."""
        if extra:
            path = f"{self.dir}/apps/{APP}.toml"
            with open(path) as manifest:
                text = manifest.read()
            with open(path, "w") as manifest:
                manifest.write(text.replace('"--restore-id", "hrm"]', '"--restore-id", "hrm", ' + ", ".join(f'"{a}"' for a in extra) + "]"))
            self.control.reload()
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's central")
        self.wait_until(self.notifying, "the app's subscription at the mock")

    def test_a_burst_to_a_suspended_app_arrives_complete_in_order_and_batched(self):
        self.launch_app()
        self.assertEqual(len(self.calls("AcquireNotify")), 1, "the app's subscription is acquired by default")
        self.control.app_action("background", APP)
        self.wait_until(lambda: self.state() == "suspended", "suspension")
        wakes_before = len([d for d in self.control.log(app=APP) if d["action"] == "wake"])
        # 1200 values: more than the app's event queue holds (1000) were each its own event.
        self.burst(1, 1200)
        self.wait_until(lambda: len(self.app_values()) >= 1200, "1200 values in the app", timeout=60)
        values = self.app_values()
        self.assertEqual([n for _, n in values], list(range(1, 1201)), "complete, in order, each once")
        events = sorted({seq for seq, _ in values})
        self.assertLess(len(events), 1200 / 5, f"batched: {len(events)} events for 1200 values")
        self.assertTrue(all(r["batch"] >= 1 for r in self.records() if r.get("eventKind") == "ble.notification"))
        self.assertEqual(self.control.apps()[0]["droppedEvents"], 0)
        wakes = len([d for d in self.control.log(app=APP) if d["action"] == "wake"]) - wakes_before
        self.assertLessEqual(wakes, len(events), "at most a wake per event")

    def test_a_burst_to_a_busy_app_with_start_notify_arrives_complete_in_order_and_batched(self):
        # The app takes 20 ms per event: values gather while one is in flight.
        self.launch_app("--ble-acquire", "false", "--ack-delay", "0.02")
        self.assertEqual((len(self.calls("AcquireNotify")), len(self.calls("StartNotify"))), (0, 1))
        self.burst(1, 600)
        self.wait_until(lambda: len(self.app_values()) >= 600, "600 values in the app", timeout=60)
        values = self.app_values()
        self.assertEqual([n for _, n in values], list(range(1, 601)), "complete, in order, each once")
        events = sorted({seq for seq, _ in values})
        self.assertLess(len(events), 600 / 5, f"batched: {len(events)} events for 600 values")
        # At a low rate every value is an event of its own, sent at once.
        time.sleep(0.5)
        for n in (601, 602):
            self.burst(n, 1)
            self.wait_until(lambda: self.app_values()[-1][1] == n, f"value {n}")
            time.sleep(0.2)
        tail = self.app_values()[-2:]
        self.assertEqual(len({seq for seq, _ in tail}), 2, "one event per value at a low rate")

    def test_bad_requests_get_clear_errors(self):
        c = self.control
        for members, code in (
            ({"type": "ble.connect", "peripheral": "not-an-address"}, "invalidArgument"),
            ({"type": "ble.read", "peripheral": HRM, "service": HRS, "characteristic": BODY_LOCATION}, "notConnected"),
            ({"type": "ble.scan", "services": ["zz"]}, "invalidArgument"),
            ({"type": "ble.frobnicate"}, "unknownMessage"),
        ):
            with self.assertRaises(VigilError) as error:
                c.request(members.pop("type"), **members)
            self.assertEqual(error.exception.code, code, members)
        self.assertEqual(c.request("ble.state")["state"], "poweredOn", "the connection stays usable")

    def test_suspended_app_is_woken_per_notification_and_relaunched_with_its_state_restored(self):
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's central")
        self.wait_until(self.notifying, "the app's subscription at the mock")
        self.control.app_action("background", APP)
        self.wait_until(lambda: self.state() == "suspended", "suspension")

        sent = [64, 65, 66]
        for bpm in sent:
            self.heart_rate(bpm)
            time.sleep(0.2)
        notifications = lambda: [r for r in self.records() if r.get("eventKind") == "ble.notification"]  # noqa: E731
        self.wait_until(lambda: len(notifications()) >= len(sent), "the notifications in the app")
        self.assertEqual([bytes.fromhex(r["payloadHex"])[1] for r in notifications()], sent)
        wakes = [d for d in self.control.log(app=APP) if d["action"] == "wake" and "ble.notification" in d["reason"]]
        self.assertTrue(wakes, "no wake for a notification")

        # Killed by the system: the link and subscription stay; the next value relaunches it.
        self.control.app_action("terminate", APP)
        self.wait_until(lambda: self.state() == "notRunning", "termination")
        self.heart_rate(67)
        self.wait_until(lambda: len([r for r in self.records() if r["kind"] == "launch"]) == 2, "a relaunch")
        self.wait_until(lambda: len([r for r in self.records() if r["kind"] == "centralRegistered"]) == 2,
                        "the relaunched app's central manager")
        relaunch = [r for r in self.records() if r["kind"] == "launch"][-1]["launch"]
        self.assertNotEqual(relaunch["reason"], "user")
        self.assertEqual(relaunch["restoreIdentifiers"], ["hrm"], "launch options name the manager to recreate")
        registered = [r for r in self.records() if r["kind"] == "centralRegistered"]
        restored = registered[-1]["restored"]
        self.assertIsNotNone(restored, registered)
        self.assertEqual(restored["peripherals"][0]["peripheral"]["address"], HRM)
        self.assertEqual(restored["peripherals"][0]["peripheral"]["state"], "connected")
        heart = next(s for s in restored["peripherals"][0]["services"] if s["uuid"] == FULL(HRS))
        self.assertTrue(next(ch for ch in heart["characteristics"] if ch["uuid"] == FULL(HRM_MEASUREMENT))["notifying"])
        self.wait_until(lambda: [bytes.fromhex(r["payloadHex"])[1] for r in notifications()][-1:] == [67],
                        "the value that relaunched it")
        self.assertEqual(len(self.calls("Connect")), 1, "the link was kept, not remade")

    def test_a_daemon_restart_keeps_what_the_app_asked_for(self):
        self.control.app_action("launch", APP)
        self.wait_until(lambda: any(r["kind"] == "bleReady" for r in self.records()), "the app's central")
        self.wait_until(self.notifying, "the app's subscription at the mock")
        self.heart_rate(90)
        notifications = lambda: [r for r in self.records() if r.get("eventKind") == "ble.notification"]  # noqa: E731
        self.wait_until(lambda: len(notifications()) == 1, "a value before the restart")
        self.wait_until(self.subscription_saved, "the subscription in the state file")

        # vigild stops (its BlueZ client and notify session go with it) and starts again.
        self.stop_daemon()
        self.wait_until(lambda: not self.notifying(), "the old daemon's notify session to end")
        self.start_daemon()
        # The new daemon subscribes again by itself, from the state file. (This Python app exits when
        # its connection drops, unlike VigilKit's, which reconnects: the value relaunches it.)
        self.wait_until(self.notifying, "StartNotify from the restarted daemon")
        self.heart_rate(91)
        self.wait_until(lambda: [bytes.fromhex(r["payloadHex"])[1] for r in notifications()][-1:] == [91],
                        "the value after the restart")
        registered = [r for r in self.records() if r["kind"] == "centralRegistered"]
        self.assertEqual(len(registered), 2)
        self.assertEqual(registered[-1]["restored"]["peripherals"][0]["peripheral"]["address"], HRM,
                         "the restarted daemon kept the app's central state for it")


if __name__ == "__main__":
    unittest.main()

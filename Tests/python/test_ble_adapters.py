"""Adapter choice and characteristics by instance, through the real vigild,
against the host-tier BlueZ mock with two adapters (hci0, hci1).

- Each client's scan and connect go through the adapter it named (or the
  default), the adapter is in every peripheral record and link event, and a
  chosen adapter that is powered off or vanishes is reported
  (`ble.adapterState`), never replaced by another.
- The default adapter is the configured one, else hci0 (the first by name),
  kept: powering it off makes the state `poweredOff`, it does not move to hci1.
- A device with two characteristics of one UUID (Environmental Sensing with
  two Temperatures) is read, subscribed to and told apart by instance; a
  descriptor is written (the central-side descriptor write).

The lab test Tests/Lab/63-vigild-ble-adapters.py checks the same against
real bluetoothd where it can.
"""

import asyncio
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ble_harness import PYTHON, REPO, VIGILD, MockBlueZDaemonTest, missing  # noqa: E402,F401
from vigil_client import VigilError  # noqa: E402
import vigil  # noqa: E402

SENSOR = "AA:BB:CC:DD:EE:63"
ESS, TEMPERATURE, USER_DESCRIPTION, CCCD = "181a", "2a6e", "2901", "2902"
FULL = lambda short: f"0000{short}-0000-1000-8000-00805f9b34fb"  # noqa: E731
VIGILCTL = os.path.join(os.path.dirname(VIGILD), "vigilctl")


class TwoAdapterRig(MockBlueZDaemonTest):
    """hci0 and hci1; the sensor is seen by both (one object per adapter)."""

    APP = "org.vigil.test.adapters"
    mock_options = {"adapters": ["hci0", "hci1"]}

    def manifest(self):
        return f'id = "{self.APP}"\nexec = ["/bin/sleep", "1000"]\n'

    def prepare_mock(self):
        control = self.mock.control
        dbus = self.dbus
        self.sensors = {}
        for adapter in ("hci0", "hci1"):
            device = control.AddLEDevice(adapter, SENSOR, f"Sensor via {adapter}",
                                         {"UUIDs": dbus.Array([FULL(ESS)], signature="s")})
            service = control.AddGattService(device, ESS, True)
            indoor = control.AddGattCharacteristic(service, TEMPERATURE, ["read", "notify"], self.ay(b"\x34\x08"))    # 21.00 C
            outdoor = control.AddGattCharacteristic(service, TEMPERATURE, ["read", "write", "notify"], self.ay(b"\x2c\x01"))   # 3.00 C
            label = control.AddGattDescriptor(outdoor, USER_DESCRIPTION, ["read", "write"], self.ay(b"outdoor"))
            control.AddGattDescriptor(outdoor, CCCD, ["read", "write"], self.ay(b"\x00\x00"))
            self.sensors[adapter] = {"device": device, "indoor": indoor, "outdoor": outdoor, "label": label}

    def ay(self, data):
        return self.dbus.Array([self.dbus.Byte(b) for b in data], signature="y")

    def adapter_path(self, name):
        return f"/org/bluez/{name}"

    def pushes(self, client, kinds, timeout=15):
        """The first blePush of each of `kinds`, whatever their order."""
        found = {}
        deadline = time.monotonic() + timeout
        while found.keys() != kinds and time.monotonic() < deadline:
            message = client.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
            if message is not None and message.type == "blePush" and message["kind"] in kinds - found.keys():
                found[message["kind"]] = message
        if found.keys() != kinds:
            self.fail(f"no {sorted(kinds - found.keys())} push within {timeout} s\n{self.diagnostics()}")
        return found

    def calls(self, method):
        return [call for call in self.mock.control.Calls() if str(call[4]) == method]


@unittest.skipIf(missing(), missing() or "")
class AdapterChoiceTests(TwoAdapterRig):
    def test_each_client_scans_and_connects_through_the_adapter_it_named(self):
        on_hci1, on_default = self.connect(), self.connect()
        # A scan named hci1 sees only hci1's object of the sensor; the default (hci0) only hci0's.
        on_hci1.request("ble.scan", services=[ESS], adapter="hci1")
        on_default.request("ble.scan", services=[ESS])
        found = self.push(on_hci1, "ble.discovered")
        self.assertEqual((found["attributes"]["address"], found["attributes"]["adapter"]), (SENSOR, "hci1"))
        found = self.push(on_default, "ble.discovered")
        self.assertEqual(found["attributes"]["adapter"], "hci0")
        # Discovery ran on each adapter for its own client.
        self.wait_until(lambda: self.mock.control.DiscoverySessions(self.adapter_path("hci1")), "discovery on hci1")
        self.wait_until(lambda: self.mock.control.DiscoverySessions(self.adapter_path("hci0")), "discovery on hci0")
        on_hci1.request("ble.stopScan")
        on_default.request("ble.stopScan")

        # A connect through hci1, by the adapter's address this time.
        hci1_address = str(self.mock.bus.get_object("org.bluez", self.adapter_path("hci1")).Get(
            "org.bluez.Adapter1", "Address", dbus_interface="org.freedesktop.DBus.Properties"))
        on_hci1.request("ble.connect", peripheral=SENSOR, adapter=hci1_address)
        connected = self.push(on_hci1, "ble.connected")
        self.assertEqual(connected["attributes"]["adapter"], "hci1")
        connects = {str(call[2]) for call in self.calls("Connect")}
        self.assertEqual(connects, {self.sensors["hci1"]["device"]}, "Connect only on hci1's object of the sensor")
        records = [p for p in self.control.request("ble.peripherals")["peripherals"] if p["address"] == SENSOR]
        self.assertEqual({(p["adapter"], p["state"]) for p in records}, {("hci0", "disconnected"), ("hci1", "connected")})

        # Through another adapter while hci1 is wanted: refused, not moved.
        with self.assertRaises(VigilError) as refused:
            on_default.request("ble.connect", peripheral=SENSOR)
        self.assertEqual(refused.exception.code, "invalidState")
        self.assertIn("hci1", refused.exception.message)
        # The same adapter by name: shared.
        on_default.request("ble.connect", peripheral=SENSOR, adapter="hci1")
        self.assertEqual(self.push(on_default, "ble.connected")["attributes"]["adapter"], "hci1")

        # Reads go to hci1's object: the two objects hold different values.
        self.mock.control.SetCharacteristicValue(self.sensors["hci0"]["indoor"], self.ay(b"\x00\x00"))
        value = on_hci1.request("ble.read", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE).body
        self.assertEqual(bytes(value), b"\x34\x08")

        # hci1 powered off: reported to its clients, the default's state untouched, nothing moves to hci0.
        self.mock.control.SetPowered(self.adapter_path("hci1"), False)
        seen = self.pushes(on_hci1, {"ble.adapterState", "ble.disconnected"})  # in either order
        change = seen["ble.adapterState"]
        self.assertEqual((change["attributes"]["adapter"], change["attributes"]["state"]), ("hci1", "poweredOff"))
        self.assertEqual(seen["ble.disconnected"]["attributes"]["adapter"], "hci1")
        self.assertEqual(self.control.request("ble.state")["state"], "poweredOn")
        self.assertEqual({str(call[2]) for call in self.calls("Connect")}, {self.sensors["hci1"]["device"]})
        # Back on: the connect request (never given up) brings the link back through hci1.
        self.mock.control.SetPowered(self.adapter_path("hci1"), True)
        self.assertEqual(self.push(on_hci1, "ble.adapterState")["attributes"]["state"], "poweredOn")
        self.assertEqual(self.push(on_hci1, "ble.connected")["attributes"]["adapter"], "hci1")

        # hci1 vanishes: reported as unsupported, and the scan that named it stays its own.
        on_hci1.request("ble.scan", services=[ESS], adapter="hci1")
        self.mock.control.RemoveAdapter("hci1")
        gone = self.push(on_hci1, "ble.adapterState", where=lambda m: m["attributes"]["state"] == "unsupported")
        self.assertEqual(gone["attributes"]["adapter"], "hci1")
        self.assertEqual({str(call[2]) for call in self.calls("Connect")}, {self.sensors["hci1"]["device"]})
        self.assertEqual(self.control.request("ble.state")["state"], "poweredOn")

    def test_letting_go_names_the_adapter_the_link_was_through(self):
        self.control.request("ble.connect", peripheral=SENSOR, adapter="hci1")
        self.assertEqual(self.push(self.control, "ble.connected")["attributes"]["adapter"], "hci1")
        self.control.request("ble.disconnect", peripheral=SENSOR)
        gone = self.push(self.control, "ble.disconnected")
        self.assertEqual((gone["attributes"]["adapter"], gone["attributes"]["willReconnect"]), ("hci1", False))

    def test_bad_adapter_choices_get_clear_errors(self):
        for members, code in (
            ({"type": "ble.scan", "adapter": "hci7"}, "notFound"),
            ({"type": "ble.connect", "peripheral": SENSOR, "adapter": "hci7"}, "notFound"),
            ({"type": "ble.connect", "peripheral": SENSOR, "adapter": "usb-dongle"}, "invalidArgument"),
            ({"type": "ble.scan", "adapter": "11:22:33:44:55:66"}, "notFound"),
        ):
            with self.assertRaises(VigilError) as error:
                self.control.request(members.pop("type"), **members)
            self.assertEqual(error.exception.code, code, members)
        self.assertIn("hci0, hci1", error.exception.message, "the error names the adapters there are")

    def test_services_and_advertisements_go_to_the_adapter_named(self):
        c = self.control
        battery = {"uuid": "180f", "characteristics": [{"uuid": "2a19", "properties": ["read"], "value": "64"}]}
        info = {"uuid": "180a", "characteristics": [{"uuid": "2a29", "properties": ["read"], "value": "5669676c"}]}
        c.request("ble.addService", service=battery, adapter="hci1")
        c.request("ble.startAdvertising", advertisement={"localName": "On hci1"}, adapter="hci1")
        c.request("ble.addService", service=info)
        self.assertEqual([str(call[2]) for call in self.calls("RegisterApplication")],
                         [self.adapter_path("hci1"), self.adapter_path("hci0")])
        self.assertEqual([str(call[2]) for call in self.calls("RegisterAdvertisement")], [self.adapter_path("hci1")])
        c.request("ble.removeService", uuid="180f")
        c.request("ble.stopAdvertising")
        self.assertEqual([str(call[2]) for call in self.calls("UnregisterApplication")], [self.adapter_path("hci1")])
        self.assertEqual([str(call[2]) for call in self.calls("UnregisterAdvertisement")], [self.adapter_path("hci1")])
        with self.assertRaises(VigilError) as refused:
            c.request("ble.addService", service=battery, adapter="hci9")
        self.assertEqual(refused.exception.code, "notFound")

    def test_the_default_adapter_is_kept_when_powered_off(self):
        reply = self.control.request("ble.state")
        self.assertEqual((reply["state"], reply["adapter"]), ("poweredOn", "hci0"))
        # "The first powered one" would now be hci1: the default stays hci0, powered off.
        self.mock.control.SetPowered(self.adapter_path("hci0"), False)
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "poweredOff", "poweredOff")
        self.assertEqual(self.control.request("ble.state")["adapter"], "hci0")
        # A connect without an adapter waits for hci0; hci1 is not used for it.
        self.control.request("ble.connect", peripheral=SENSOR)
        self.no_push(self.control, "ble.connected", within=1.0)
        self.assertEqual(self.calls("Connect"), [])
        self.mock.control.SetPowered(self.adapter_path("hci0"), True)
        self.assertEqual(self.push(self.control, "ble.connected")["attributes"]["adapter"], "hci0")
        self.assertEqual({str(call[2]) for call in self.calls("Connect")}, {self.sensors["hci0"]["device"]})


@unittest.skipIf(missing(), missing() or "")
class ConfiguredAdapterTests(TwoAdapterRig):
    config_lines = 'bluetooth-adapter = "hci1"\n'

    def test_the_configured_adapter_is_the_default(self):
        reply = self.control.request("ble.state")
        self.assertEqual((reply["state"], reply["adapter"]), ("poweredOn", "hci1"))
        self.control.request("ble.connect", peripheral=SENSOR)
        self.assertEqual(self.push(self.control, "ble.connected")["attributes"]["adapter"], "hci1")
        self.assertEqual({str(call[2]) for call in self.calls("Connect")}, {self.sensors["hci1"]["device"]})
        self.mock.control.RemoveAdapter("hci1")
        self.wait_until(lambda: self.control.request("ble.state")["state"] == "unsupported", "unsupported")
        detail = self.control.request("ble.state")["detail"]
        self.assertIn("configured adapter hci1 is not present", detail)


@unittest.skipIf(missing(), missing() or "")
class CharacteristicInstanceTests(TwoAdapterRig):
    def connected(self, client):
        client.request("ble.connect", peripheral=SENSOR)
        self.push(client, "ble.connected")

    def test_two_characteristics_of_one_uuid_by_instance(self):
        c = self.control
        self.connected(c)
        services = c.request("ble.discover", peripheral=SENSOR)["services"]
        temperatures = [ch for s in services if s["uuid"] == FULL(ESS) for ch in s["characteristics"]
                        if ch["uuid"] == FULL(TEMPERATURE)]
        self.assertEqual([t["instance"] for t in temperatures], [0, 1])
        self.assertLess(temperatures[0]["handle"], temperatures[1]["handle"])

        def read(**members):
            return bytes(c.request("ble.read", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE, **members).body)

        self.assertEqual(read(), b"\x34\x08", "no instance: the first")
        self.assertEqual(read(instance=0), b"\x34\x08")
        self.assertEqual(read(instance=1), b"\x2c\x01")
        with self.assertRaises(VigilError) as missing_instance:
            read(instance=2)
        self.assertEqual(missing_instance.exception.code, "notFound")
        self.assertIn("instances 0-1", missing_instance.exception.message)
        with self.assertRaises(VigilError) as negative:
            read(instance=-1)
        self.assertEqual(negative.exception.code, "invalidArgument")

        # Descriptors of instance 1: read, write, read back; the CCCD is BlueZ's.
        self.assertEqual(read(instance=1, descriptor=USER_DESCRIPTION), b"outdoor")
        c.request("ble.write", body=b"garden", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE, instance=1,
                  descriptor=USER_DESCRIPTION, withResponse=True)
        self.assertEqual(read(instance=1, descriptor=USER_DESCRIPTION), b"garden")
        with self.assertRaises(VigilError) as cccd:
            c.request("ble.write", body=b"\x01\x00", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE,
                      instance=1, descriptor=CCCD, withResponse=True)
        self.assertEqual(cccd.exception.code, "notPermitted")
        # A write by instance lands on that characteristic only.
        c.request("ble.write", body=b"\x10\x00", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE, instance=1,
                  withResponse=True)
        self.assertEqual(read(instance=1), b"\x10\x00")
        self.assertEqual(read(instance=0), b"\x34\x08")

        # Notifications of instance 1 say so; instance 0's do not.
        c.request("ble.notify", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE, instance=1, enabled=True,
                  acquire=False)
        self.wait_until(lambda: self.calls("StartNotify"), "StartNotify")
        self.assertEqual({str(call[2]) for call in self.calls("StartNotify")}, {self.sensors["hci0"]["outdoor"]})
        self.mock.control.Notify(self.sensors["hci0"]["outdoor"], self.ay(b"\x2d\x01"))
        pushed = self.push(c, "ble.notification")
        self.assertEqual((pushed["attributes"]["instance"], bytes(pushed.body)), (1, b"\x2d\x01"))
        c.request("ble.notify", peripheral=SENSOR, service=ESS, characteristic=TEMPERATURE, enabled=True, acquire=False)
        # A subscription is an intent vigild carries out after replying: a value BlueZ sends before
        # its StartNotify is not a notification (CI once notified first and waited in vain).
        self.wait_until(lambda: {str(call[2]) for call in self.calls("StartNotify")} >= {self.sensors["hci0"]["indoor"]},
                        "StartNotify on instance 0")
        self.mock.control.Notify(self.sensors["hci0"]["indoor"], self.ay(b"\x35\x08"))
        pushed = self.push(c, "ble.notification")
        self.assertNotIn("instance", pushed["attributes"])
        self.assertEqual(bytes(pushed.body), b"\x35\x08")

    def test_the_vigil_package_and_vigilctl_address_instances(self):
        async def body():
            async with vigil.Control(self.socket) as control:
                central = await control.central()
                client = await central.client(SENSOR).connect(timeout=15)
                services = await client.get_services()
                both = services.get_service(ESS).get_characteristics(TEMPERATURE)
                self.assertEqual([t.instance for t in both], [0, 1])
                self.assertEqual(await client.read_gatt_char(both[1]), b"\x2c\x01")
                self.assertEqual(await client.read_gatt_char((ESS, TEMPERATURE, 1)), b"\x2c\x01")
                self.assertEqual(await client.read_gatt_char((ESS, TEMPERATURE)), b"\x34\x08")
                with self.assertRaises(vigil.VigilError):
                    await client.read_gatt_char(TEMPERATURE)  # ambiguous: two of that UUID
                await client.write_gatt_descriptor(both[1], USER_DESCRIPTION, b"shed")
                self.assertEqual(await client.read_gatt_descriptor(both[1], USER_DESCRIPTION), b"shed")
                values = asyncio.Queue()
                await client.start_notify(both[1], lambda _c, data: values.put_nowait(bytes(data)), acquire=False)
                await client.start_notify(both[0], lambda _c, data: values.put_nowait(b"indoor:" + bytes(data)),
                                          acquire=False)
                self.wait_until(lambda: len(self.calls("StartNotify")) == 2, "two StartNotify")
                self.mock.control.Notify(self.sensors["hci0"]["outdoor"], self.ay(b"\x01\x00"))
                self.mock.control.Notify(self.sensors["hci0"]["indoor"], self.ay(b"\x02\x00"))
                got = [await asyncio.wait_for(values.get(), 15) for _ in range(2)]
                self.assertEqual(got, [b"\x01\x00", b"indoor:\x02\x00"])

        asyncio.run(body())
        self.mock.control.SetCharacteristicValue(self.sensors["hci0"]["outdoor"], self.ay(b"\x2c\x01"))
        self.control.request("ble.connect", peripheral=SENSOR)
        out = subprocess.run([VIGILCTL, "--socket", self.socket, "ble", "read", SENSOR, ESS, TEMPERATURE, "--instance", "1"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "2c01"), out.stderr)
        out = subprocess.run([VIGILCTL, "--socket", self.socket, "ble", "gatt", SENSOR], capture_output=True, text=True,
                             timeout=60)
        self.assertIn("instance 1", out.stdout, out.stderr)
        out = subprocess.run([VIGILCTL, "--socket", self.socket, "ble", "devices"], capture_output=True, text=True,
                             timeout=60)
        self.assertIn("hci1", out.stdout, out.stderr)


if __name__ == "__main__":
    unittest.main()

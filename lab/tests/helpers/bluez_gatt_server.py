#!/usr/bin/env python3
"""A small GATT server registered with BlueZ (GattManager1.RegisterApplication)
plus an LE advertisement (LEAdvertisingManager1), on hci0, in python3-dbus
with a GLib main loop.  Used by the Bumble-central test; it stands in for
Vigil's peripheral role until that exists.

Service  SERVICE_UUID
  READ_UUID    read           -> b"vigil-lab"
  WRITE_UUID   write          -> logged as event "write"
  NOTIFY_UUID  read, notify   -> counter 0,1,2,... (uint32 LE) every --interval s
                                 while someone is subscribed; each value is
                                 logged as event "notify" before it is sent

Options: --ready-file, --events (JSON lines), --name, --interval.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys
import time

import dbus
import dbus.exceptions
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

SERVICE_UUID = "7a5e0001-6c1d-4a1b-9b1e-000000000001"
READ_UUID = "7a5e0002-6c1d-4a1b-9b1e-000000000001"
WRITE_UUID = "7a5e0003-6c1d-4a1b-9b1e-000000000001"
NOTIFY_UUID = "7a5e0004-6c1d-4a1b-9b1e-000000000001"
READ_VALUE = b"vigil-lab"

BLUEZ = "org.bluez"
GATT_SERVICE = "org.bluez.GattService1"
GATT_CHRC = "org.bluez.GattCharacteristic1"
PROPS = "org.freedesktop.DBus.Properties"
OM = "org.freedesktop.DBus.ObjectManager"
APP_PATH = "/org/vigil/lab/app"
ADV_PATH = "/org/vigil/lab/adv0"

events_file = None


def emit(event: str, **fields) -> None:
    line = json.dumps({"event": event, "t": round(time.time(), 6), **fields})
    print(line, flush=True)
    if events_file:
        events_file.write(line + "\n")
        events_file.flush()


class Application(dbus.service.Object):
    def __init__(self, bus):
        self.services = []
        super().__init__(bus, APP_PATH)

    @dbus.service.method(OM, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        out = {}
        for s in self.services:
            out[s.path] = s.props()
            for c in s.chars:
                out[c.path] = c.props()
        return out


class Service(dbus.service.Object):
    def __init__(self, bus, index, uuid):
        self.path = f"{APP_PATH}/service{index}"
        self.uuid = uuid
        self.chars = []
        super().__init__(bus, self.path)

    def props(self):
        return {GATT_SERVICE: {"UUID": self.uuid, "Primary": dbus.Boolean(True),
                               "Characteristics": dbus.Array([c.path for c in self.chars], signature="o")}}


class Characteristic(dbus.service.Object):
    def __init__(self, bus, service, index, uuid, flags, value=b""):
        self.path = f"{service.path}/char{index}"
        self.service = service
        self.uuid = uuid
        self.flags = flags
        self.value = value
        self.notifying = False
        super().__init__(bus, self.path)
        service.chars.append(self)

    def props(self):
        return {GATT_CHRC: {"Service": dbus.ObjectPath(self.service.path), "UUID": self.uuid,
                            "Flags": dbus.Array(self.flags, signature="s")}}

    @dbus.service.method(PROPS, in_signature="ss", out_signature="v")
    def Get(self, iface, name):
        return self.props()[iface][name]

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return self.props()[iface]

    @dbus.service.signal(PROPS, signature="sa{sv}as")
    def PropertiesChanged(self, iface, changed, invalidated):
        pass

    @dbus.service.method(GATT_CHRC, in_signature="a{sv}", out_signature="ay")
    def ReadValue(self, options):
        emit("read", uuid=self.uuid, value=bytes(self.value).hex())
        return dbus.Array(self.value, signature="y")

    @dbus.service.method(GATT_CHRC, in_signature="aya{sv}")
    def WriteValue(self, value, options):
        self.value = bytes(value)
        emit("write", uuid=self.uuid, value=self.value.hex())

    @dbus.service.method(GATT_CHRC)
    def StartNotify(self):
        self.notifying = True
        emit("start-notify", uuid=self.uuid)

    @dbus.service.method(GATT_CHRC)
    def StopNotify(self):
        self.notifying = False
        emit("stop-notify", uuid=self.uuid)

    def notify(self, value: bytes):
        self.value = value
        self.PropertiesChanged(GATT_CHRC, {"Value": dbus.Array(value, signature="y")}, [])


class Advertisement(dbus.service.Object):
    def __init__(self, bus, name):
        self.name = name
        super().__init__(bus, ADV_PATH)

    def props(self):
        return {"org.bluez.LEAdvertisement1": {
            "Type": "peripheral",
            "ServiceUUIDs": dbus.Array([SERVICE_UUID], signature="s"),
            "LocalName": self.name,
            "Includes": dbus.Array([], signature="s"),
        }}

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return self.props()[iface]

    @dbus.service.method("org.bluez.LEAdvertisement1")
    def Release(self):
        emit("adv-released")


def main() -> None:
    global events_file
    p = argparse.ArgumentParser()
    p.add_argument("--adapter", default="hci0")
    p.add_argument("--name", default="Vigil GATT")
    p.add_argument("--interval", type=float, default=0.3)
    p.add_argument("--ready-file")
    p.add_argument("--events")
    p.add_argument("--control")  # accepted for lab_peer_start compatibility
    a = p.parse_args()
    if a.events:
        events_file = open(a.events, "a")

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    loop = GLib.MainLoop()
    app = Application(bus)
    svc = Service(bus, 0, SERVICE_UUID)
    Characteristic(bus, svc, 0, READ_UUID, ["read"], READ_VALUE)
    Characteristic(bus, svc, 1, WRITE_UUID, ["write"], b"")
    notifier = Characteristic(bus, svc, 2, NOTIFY_UUID, ["read", "notify"], struct.pack("<I", 0))
    app.services.append(svc)
    adv = Advertisement(bus, a.name)
    adapter = f"/org/bluez/{a.adapter}"
    pending = {"app": False, "adv": False}
    counter = [0]

    def check_ready():
        if all(pending.values()) and a.ready_file:
            with open(a.ready_file + ".tmp", "w") as f:
                f.write(f"{os.getpid()}\n")
            os.replace(a.ready_file + ".tmp", a.ready_file)
            emit("ready")

    def ok(what):
        def cb():
            pending[what] = True
            emit("registered", what=what)
            check_ready()
        return cb

    def err(what):
        def cb(e):
            emit("error", what=what, message=str(e))
            loop.quit()
        return cb

    # Asynchronous calls: bluetoothd calls back into GetManagedObjects before
    # it replies, so a blocking call here would deadlock.
    gm = dbus.Interface(bus.get_object(BLUEZ, adapter), "org.bluez.GattManager1")
    gm.RegisterApplication(APP_PATH, {}, reply_handler=ok("app"), error_handler=err("app"))
    am = dbus.Interface(bus.get_object(BLUEZ, adapter), "org.bluez.LEAdvertisingManager1")
    am.RegisterAdvertisement(ADV_PATH, {}, reply_handler=ok("adv"), error_handler=err("adv"))

    def tick():
        if notifier.notifying:
            v = struct.pack("<I", counter[0])
            # Logged before it goes to bluetoothd: the central may get it first otherwise.
            emit("notify", uuid=NOTIFY_UUID, value=v.hex(), seq=counter[0])
            notifier.notify(v)
            counter[0] += 1
        return True

    GLib.timeout_add(int(a.interval * 1000), tick)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    loop.run()
    emit("exit")


if __name__ == "__main__":
    main()

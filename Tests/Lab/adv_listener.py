#!/usr/bin/env python3
"""What BlueZ delivered, for 62-vigild-ble-monitor (not a test: the runner
only runs files named NN-name): a direct D-Bus client of bluetoothd that logs
every advertisement of company 0x0499 (RuuviTag) BlueZ reports on
org.bluez.Device1 (InterfacesAdded, PropertiesChanged of ManufacturerData),
{"event": "adv", "seq": n, "rssi": r}, so the test compares what vigild
delivered with what BlueZ delivered to anyone.

With --discover it is also a direct scanner (SetDiscoveryFilter with
DuplicateData, StartDiscovery), the baseline a CPU cost is compared with.
It logs at start whether bluetoothd offers AdvertisementMonitorManager1 and
its SupportedMonitorTypes ({"event": "monitor-manager", ...}).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import dbus
import dbus.mainloop.glib
from gi.repository import GLib

RUUVI = 0x0499


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ready-file")
    p.add_argument("--events")
    p.add_argument("--control")
    p.add_argument("--discover", action="store_true")
    a = p.parse_args()
    out = open(a.events, "a", buffering=1) if a.events else sys.stdout

    def emit(event, **fields):
        out.write(json.dumps({"event": event, "t": round(time.time(), 6), **fields}) + "\n")

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    manager = dbus.Interface(bus.get_object("org.bluez", "/"), "org.freedesktop.DBus.ObjectManager")
    objects = manager.GetManagedObjects()
    hci0 = objects.get(dbus.ObjectPath("/org/bluez/hci0"), {})
    monitors = hci0.get("org.bluez.AdvertisementMonitorManager1")
    emit("monitor-manager", present=monitors is not None,
         supported=[str(t) for t in (monitors or {}).get("SupportedMonitorTypes", [])],
         features=[str(t) for t in (monitors or {}).get("SupportedFeatures", [])])

    def seen(path, properties):
        data = properties.get("ManufacturerData", {}).get(dbus.UInt16(RUUVI))
        if data is None:
            return
        data = bytes(data)
        # RuuviTag format 5: the measurement sequence number is bytes 16-17.
        if len(data) >= 18 and data[0] == 5:
            rssi = properties.get("RSSI")
            emit("adv", seq=data[16] << 8 | data[17], path=str(path), rssi=None if rssi is None else int(rssi))

    def added(path, interfaces):
        if "org.bluez.Device1" in interfaces:
            seen(path, interfaces["org.bluez.Device1"])

    def changed(interface, properties, invalidated, path=None):
        if interface == "org.bluez.Device1" and "ManufacturerData" in properties:
            seen(path, properties)

    bus.add_signal_receiver(added, dbus_interface="org.freedesktop.DBus.ObjectManager", signal_name="InterfacesAdded",
                            bus_name="org.bluez")
    bus.add_signal_receiver(changed, dbus_interface="org.freedesktop.DBus.Properties", signal_name="PropertiesChanged",
                            bus_name="org.bluez", path_keyword="path")
    if a.discover:
        adapter = dbus.Interface(bus.get_object("org.bluez", "/org/bluez/hci0"), "org.bluez.Adapter1")
        adapter.SetDiscoveryFilter({"Transport": "le", "DuplicateData": True})
        adapter.StartDiscovery()
        emit("discovering")
    if a.ready_file:
        with open(a.ready_file + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(a.ready_file + ".tmp", a.ready_file)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()

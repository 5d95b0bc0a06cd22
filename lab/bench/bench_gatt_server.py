#!/usr/bin/env python3
"""The baseline GATT server of the Bluetooth LE peripheral benchmark
(lab/bench/91-bench-ble-peripheral.py; not a test itself): the lab's plain
python3-dbus server (lab/tests/helpers/bluez_gatt_server.py: the same
service, classes and advertisement, registered directly with BlueZ on hci0),
except that its notify characteristic notifies only on command:

  blast N    N PropertiesChanged(Value) signals back to back (uint32 LE seq
             0,1,2,... continuing across blasts), as fast as python3-dbus
             queues them; emits {"event": "blast-done", "first", "count",
             "t0", "t1"} (CLOCK_MONOTONIC ns before the first and after the
             last signal was handed to libdbus)

Reads of READ_UUID answer b"vigil-lab" from memory (a fixed value, one
D-Bus ReadValue call from bluetoothd per ATT read).
"""

from __future__ import annotations

import argparse
import os
import signal
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "lab", "tests", "helpers"))
import bluez_gatt_server as gs  # noqa: E402

import dbus  # noqa: E402
import dbus.mainloop.glib  # noqa: E402
from gi.repository import GLib  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--adapter", default="hci0")
    p.add_argument("--name", default="Vigil Bench")
    p.add_argument("--ready-file")
    p.add_argument("--events")
    p.add_argument("--control")
    a = p.parse_args()
    if a.events:
        gs.events_file = open(a.events, "a")
    emit = gs.emit

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    loop = GLib.MainLoop()
    app = gs.Application(bus)
    svc = gs.Service(bus, 0, gs.SERVICE_UUID)
    gs.Characteristic(bus, svc, 0, gs.READ_UUID, ["read"], gs.READ_VALUE)
    gs.Characteristic(bus, svc, 1, gs.WRITE_UUID, ["write"], b"")
    notifier = gs.Characteristic(bus, svc, 2, gs.NOTIFY_UUID, ["read", "notify"], struct.pack("<I", 0))
    app.services.append(svc)
    adv = gs.Advertisement(bus, a.name)
    adapter = f"/org/bluez/{a.adapter}"
    pending = {"app": False, "adv": False}
    seq = [0]

    def ok(what):
        def cb():
            pending[what] = True
            emit("registered", what=what)
            if all(pending.values()) and a.ready_file:
                with open(a.ready_file + ".tmp", "w") as f:
                    f.write(f"{os.getpid()}\n")
                os.replace(a.ready_file + ".tmp", a.ready_file)
                emit("ready")
        return cb

    def err(what):
        def cb(e):
            emit("error", what=what, message=str(e))
            loop.quit()
        return cb

    gm = dbus.Interface(bus.get_object(gs.BLUEZ, adapter), "org.bluez.GattManager1")
    gm.RegisterApplication(gs.APP_PATH, {}, reply_handler=ok("app"), error_handler=err("app"))
    am = dbus.Interface(bus.get_object(gs.BLUEZ, adapter), "org.bluez.LEAdvertisingManager1")
    am.RegisterAdvertisement(gs.ADV_PATH, {}, reply_handler=ok("adv"), error_handler=err("adv"))

    if a.control:
        if os.path.exists(a.control):
            os.unlink(a.control)
        os.mkfifo(a.control)
        fd = os.open(a.control, os.O_RDWR | os.O_NONBLOCK)
        buf = [b""]

        def on_control(_fd, _cond):
            try:
                buf[0] += os.read(fd, 4096)
            except BlockingIOError:
                return True
            while b"\n" in buf[0]:
                line, buf[0] = buf[0].split(b"\n", 1)
                parts = line.decode().split()
                if len(parts) == 2 and parts[0] == "blast":
                    n, first = int(parts[1]), seq[0]
                    t0 = time.monotonic_ns()
                    for i in range(n):
                        notifier.notify(struct.pack("<I", first + i))
                    t1 = time.monotonic_ns()
                    seq[0] += n
                    emit("blast-done", first=first, count=n, t0=t0, t1=t1, notifying=notifier.notifying)
            return True
        GLib.io_add_watch(fd, GLib.PRIORITY_DEFAULT, GLib.IO_IN, on_control)

    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    loop.run()
    emit("exit")


if __name__ == "__main__":
    main()

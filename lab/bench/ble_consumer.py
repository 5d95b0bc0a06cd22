#!/usr/bin/python3
"""A notification receiver for the Bluetooth LE central benchmark
(lab/bench/90-bench-ble-central.py), one process per path so that every path
is measured the same way: Debian's /usr/bin/python3, one process, blocked in
the kernel until a notification arrives, CLOCK_MONOTONIC read first thing.

  ble_consumer.py direct  --char DBUS_PATH [--acquire]
      a python3-dbus client of bluetoothd: StartNotify and PropertiesChanged
      (GLib main loop), or AcquireNotify and reads from the socket it returns
  ble_consumer.py control --socket PATH --peripheral ADDR [--acquire]
      a vigild control-role client (clients/python/vigil_client.py):
      ble.connect, ble.notify {enabled, acquire}, blePush ble.notification

It prints one JSON line {"ready": ...} once subscribed (or {"error": ...} and
exits 1), then answers commands on stdin, one JSON line each:
  count   {"count": N}
  stop    unsubscribes, prints {"received": [[t_ns, "hex"], ...]}, exits
"""

import argparse
import json
import os
import select
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("VIGIL_LAB_REPO") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

now = time.monotonic_ns   # CLOCK_MONOTONIC, as the peer's stamps


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Stdin:
    """Commands from the benchmark, read without blocking."""

    def __init__(self):
        self.fd = sys.stdin.fileno()
        self.buf = b""

    def lines(self):
        data = os.read(self.fd, 4096)
        if not data:
            return ["stop"]
        self.buf += data
        out = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.strip():
                out.append(line.decode().strip())
        return out

    def pending(self):
        return bool(select.select([self.fd], [], [], 0)[0])


# ----------------------------------------------------------- direct, D-Bus ----
def direct(options):
    import dbus
    import dbus.mainloop.glib
    from gi.repository import GLib

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    char = dbus.Interface(bus.get_object("org.bluez", options.char), "org.bluez.GattCharacteristic1")
    received = []
    stdin = Stdin()
    loop = GLib.MainLoop()

    def stop():
        if options.acquire:
            os.close(fd)
        else:
            try:
                char.StopNotify()
            except dbus.DBusException:
                pass
        say({"received": received})
        loop.quit()

    def on_stdin(_fd, _condition):
        for line in stdin.lines():
            if line == "count":
                say({"count": len(received)})
            elif line == "stop":
                stop()
                return False
        return True

    if options.acquire:
        fd_obj, mtu = char.AcquireNotify(dbus.Dictionary({}, signature="sv"))
        fd = fd_obj.take()
        os.set_blocking(fd, False)

        def on_readable(_fd, _condition):
            while True:
                try:
                    value = os.read(fd, 1024)
                except BlockingIOError:
                    return True
                t = now()
                if not value:
                    return False
                received.append((t, value.hex()))
        GLib.io_add_watch(fd, GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP | GLib.IO_ERR, on_readable)
        ready = {"ready": "AcquireNotify", "mtu": int(mtu)}
    else:
        def on_properties(interface, changed, invalidated):
            t = now()
            if interface == "org.bluez.GattCharacteristic1" and "Value" in changed:
                received.append((t, bytes(changed["Value"]).hex()))
        bus.add_signal_receiver(on_properties, "PropertiesChanged", "org.freedesktop.DBus.Properties",
                                "org.bluez", options.char, byte_arrays=True)
        char.StartNotify()
        ready = {"ready": "StartNotify"}
    GLib.io_add_watch(stdin.fd, GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, on_stdin)
    say(ready)
    loop.run()


# ---------------------------------------------------- through vigild ----
def control(options):
    from vigil_client import ControlClient

    ctl = ControlClient(options.socket, timeout=60)
    ctl.request("ble.registerCentral")
    ctl.request("ble.connect", peripheral=options.peripheral)
    deadline = time.monotonic() + 60
    while True:
        message = ctl.next_unsolicited(timeout=max(0.01, deadline - time.monotonic()))
        if message is not None and message.type == "blePush" and message["kind"] == "ble.connected":
            break
        if time.monotonic() > deadline:
            raise SystemExit(say({"error": "no ble.connected push within 60 s"}) or 1)
    ctl.request("ble.notify", peripheral=options.peripheral, service=options.service,
                characteristic=options.characteristic, enabled=True, acquire=options.acquire)
    say({"ready": "AcquireNotify" if options.acquire else "StartNotify"})
    received = []
    other = []
    stdin = Stdin()
    while True:
        message = ctl.next_unsolicited(timeout=0.25)
        t = now()
        if message is not None:
            if message.type == "blePush" and message["kind"] == "ble.notification":
                received.append((t, message.body.hex()))
            else:
                other.append(message.header)
        if stdin.pending():
            for line in stdin.lines():
                if line == "count":
                    say({"count": len(received)})
                elif line == "stop":
                    ctl.request("ble.notify", peripheral=options.peripheral, service=options.service,
                                characteristic=options.characteristic, enabled=False)
                    ctl.close()
                    say({"received": received, "other": other[:20]})
                    return


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=["direct", "control"])
    parser.add_argument("--char", help="direct: the characteristic's D-Bus object path")
    parser.add_argument("--socket", help="control: vigild's socket")
    parser.add_argument("--peripheral", help="control: the peripheral's address")
    parser.add_argument("--service", default="180d")
    parser.add_argument("--characteristic", default="2a37")
    parser.add_argument("--acquire", action="store_true", help="AcquireNotify instead of StartNotify")
    options = parser.parse_args()
    try:
        (direct if options.path == "direct" else control)(options)
    except Exception as error:  # noqa: BLE001 - reported to the benchmark
        say({"error": f"{type(error).__name__}: {error}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Runs a command (vigild) in a umockdev testbed with a fake USB serial
accessory whose node is backed by a pty this script drives.

    umockdev-wrapper /usr/bin/python3 accessory_testbed.py -- COMMAND...

The device is lab/host/virtual_usb_serial.py's (1209:0001, serial VGL123,
udev properties VIGIL_ACCESSORY=1 and VIGIL_PROTOCOLS="org.example.sensor
org.example.dfu"). Requests on stdin, one
reply line each on stdout:

    write HEX      -> ok           bytes from the device to the host
    feed HEX SECS  -> ok | error   the same, for more than the tty buffers hold:
                                   waits while the host holds the device back,
                                   fails if it is held back for SECS in a row
    read COUNT     -> data HEX     bytes the host sent to the device (2 s timeout)
    unplug         -> ok           hang up the node; remove uevents; sysfs goes
    plug           -> ok NODE      the same device back, on the next ttyACMn
    storm N SECS   -> ok NODE      N cycles of unplug, SECS pause, plug, SECS pause
                                   (a replug storm: the device stays plugged after it)
    jam            -> ok           the node stays but cannot be opened (EISDIR)
    unjam          -> ok           the node opens again
    pid            -> ok PID       COMMAND's process id
    add NAME JSON  -> ok NODE      plug in another device, NAME, made with JSON's
                                   keyword arguments of VirtualSerialAccessory
                                   (port, serial, protocols, manufacturer, ...)
    @NAME REQUEST  -> ...          write, read, unplug or plug that device
    quit           -> ok           terminate COMMAND and exit
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab", "host"))
import virtual_usb_serial as devices  # noqa: E402

try:
    import gi

    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev
except (ImportError, ValueError) as error:
    sys.exit(f"accessory_testbed: no UMockdev GI binding ({error}); install gir1.2-umockdev-1.0 python3-gi umockdev")


def main():
    command = sys.argv[sys.argv.index("--") + 1:]
    testbed = UMockdev.Testbed.new()
    device = devices.VirtualSerialAccessory(testbed)
    device.plug()
    sensor, others = device, {}
    child = os.posix_spawn(command[0], command, dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir()))
    print("ready", flush=True)
    for line in sys.stdin:
        verb, _, argument = line.strip().partition(" ")
        device = sensor
        if verb.startswith("@"):
            device = others[verb[1:]]
            verb, _, argument = argument.partition(" ")
        reply = "ok"
        if verb == "write":
            device.write(bytes.fromhex(argument))
        elif verb == "feed":
            data, _, patience = argument.partition(" ")
            reply = device.feed(bytes.fromhex(data), float(patience or 30))
        elif verb == "read":
            reply = "data " + device.read(int(argument)).hex()
        elif verb == "unplug":
            device.unplug()
        elif verb == "plug":
            reply = "ok " + device.plug()
        elif verb == "storm":
            count, _, pause = argument.partition(" ")
            for _ in range(int(count)):
                device.unplug()
                time.sleep(float(pause))
                node = device.plug()
                time.sleep(float(pause))
            reply = "ok " + node
        elif verb == "jam":
            # The node points at a directory: it exists, and open(O_RDWR) fails.
            link = os.path.join(testbed.get_root_dir(), device.node.lstrip("/"))
            jammed = (link, os.readlink(link))
            os.unlink(link)
            os.symlink("/", link)
        elif verb == "unjam":
            link, target = jammed
            os.unlink(link)
            os.symlink(target, link)
        elif verb == "add":
            name, _, options = argument.partition(" ")
            others[name] = devices.VirtualSerialAccessory(testbed, **json.loads(options))
            reply = "ok " + others[name].plug()
        elif verb == "pid":
            reply = f"ok {child}"
        elif verb == "quit":
            break
        else:
            reply = "error unknown request " + verb
        print(reply, flush=True)
    os.kill(child, signal.SIGTERM)
    os.waitpid(child, 0)
    print("ok", flush=True)


if __name__ == "__main__":
    main()

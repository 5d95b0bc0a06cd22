#!/usr/bin/python3
"""Runs a command (vigild) in a umockdev testbed with a fake USB serial
accessory whose node is backed by a pty this script drives.

    umockdev-wrapper /usr/bin/python3 accessory_testbed.py -- COMMAND...

The device is lab/host/virtual_usb_serial.py's (1209:0001, serial VGL123,
udev properties VIGIL_ACCESSORY=1 and VIGIL_PROTOCOLS="org.example.sensor
org.example.dfu"). Requests on stdin, one
reply line each on stdout:

    write HEX      -> ok           bytes from the device to the host
    read COUNT     -> data HEX     bytes the host sent to the device (2 s timeout)
    unplug         -> ok           hang up the node; remove uevents; sysfs goes
    plug           -> ok NODE      the same device back, on the next ttyACMn
    quit           -> ok           terminate COMMAND and exit
"""

import os
import select
import signal
import sys

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
    number = 0
    node = f"/dev/ttyACM{number}"
    testbed.add_from_string(devices.usb_device() + "\n" + devices.tty(f"ttyACM{number}", number))
    pty = testbed.get_dev_fd(node)
    os.set_inheritable(pty, False)
    child = os.posix_spawn(command[0], command, dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir()))
    print("ready", flush=True)
    for line in sys.stdin:
        verb, _, argument = line.strip().partition(" ")
        reply = "ok"
        if verb == "write":
            os.write(pty, bytes.fromhex(argument))
        elif verb == "read":
            wanted, data = int(argument), b""
            while len(data) < wanted and select.select([pty], [], [], 2.0)[0]:
                data += os.read(pty, wanted - len(data))
            reply = "data " + data.hex()
        elif verb == "unplug":
            os.close(pty)
            removed = (f"{devices.INTERFACE}/tty/ttyACM{number}", devices.INTERFACE, devices.USB)
            for path in removed:
                testbed.uevent(path, "remove")
            for path in removed:
                testbed.remove_device(path)
        elif verb == "plug":
            number += 1
            node = f"/dev/ttyACM{number}"
            testbed.add_from_string(devices.usb_device() + "\n" + devices.tty(f"ttyACM{number}", number))
            pty = testbed.get_dev_fd(node)
            os.set_inheritable(pty, False)
            reply = "ok " + node
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

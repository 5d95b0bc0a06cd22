#!/usr/bin/python3
"""Runs a command (vigild) in a umockdev testbed with a fake USB serial
accessory whose node is backed by a pty this script drives.

    umockdev-wrapper /usr/bin/python3 accessory_testbed.py [--device NAME=JSON]... -- COMMAND...

The device is lab/host/virtual_usb_serial.py's (1209:0001, serial VGL123,
udev properties VIGIL_ACCESSORY=1 and VIGIL_PROTOCOLS="org.example.sensor
org.example.dfu"); with --device, the devices described instead (JSON:
keyword arguments of VirtualSerialAccessory), plugged in that order; the
first is the one requests without @NAME go to. The pytest plugin ships this
file (and virtual_usb_serial.py beside it) in the vigil wheel. Requests on
stdin, one reply line each on stdout:

    write HEX      -> ok           bytes from the device to the host
    feed HEX SECS  -> ok | error   the same, for more than the tty buffers hold:
                                   waits while the host holds the device back,
                                   fails if it is held back for SECS in a row
    read COUNT [SECS] -> data HEX  bytes the host sent to the device, up to COUNT
                                   (waits up to SECS, default 2, between pieces)
    avail MAX SECS -> data HEX     what the host has sent, up to MAX, once there is
                                   any (waits up to SECS for the first byte)
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
    lines          -> ok JSON      a device with modem_lines: every line now
                                   ({"dtr": ..., "rts": ..., "cts": ..., "dsr": ...,
                                   "dcd": ..., "ri": ..., "break": ...})
    setlines JSON  -> ok           the device's CTS, DSR, DCD, RI ({"cts": true})
    pulselines JSON -> ok          each line named (["ri"]) flips and flips back at
                                   once: only its transition counter shows it
    linelog N SECS -> ok JSON      the host's DTR/RTS/break changes after the first N
                                   ([{"time", "dtr", "rts", "break"}]), waiting up
                                   to SECS for one
    @NAME REQUEST  -> ...          write, read, unplug, plug or a line request of that device
    quit           -> ok           terminate COMMAND and exit
"""

import json
import os
import signal
import sys
import time

# In a checkout lab/host; in the vigil wheel beside this file (sys.path[0]).
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab", "host"))
import virtual_usb_serial as devices  # noqa: E402

try:
    import gi

    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev
except (ImportError, ValueError) as error:
    sys.exit(f"accessory_testbed: no UMockdev GI binding ({error}); install gir1.2-umockdev-1.0 python3-gi umockdev")


def available(device, limit, timeout):
    import select

    if device.pty is None or not select.select([device.pty], [], [], timeout)[0]:
        return b""
    try:
        return os.read(device.pty, limit)
    except OSError:  # EIO: nobody has the node open (the host never opened it, or closed it)
        return b""


def main():
    split = sys.argv.index("--")
    command = sys.argv[split + 1:]
    described = []
    options = sys.argv[1:split]
    while options:
        option = options.pop(0)
        if option != "--device" or not options:
            sys.exit(f"accessory_testbed: unknown option {option!r}")
        name, _, description = options.pop(0).partition("=")
        described.append((name, json.loads(description)))
    testbed = UMockdev.Testbed.new()
    others = {}
    if described:
        for name, description in described:
            others[name] = devices.VirtualSerialAccessory(testbed, **description)
            others[name].plug()
        sensor = others[described[0][0]]
    else:
        sensor = devices.VirtualSerialAccessory(testbed)
        sensor.plug()
    # COMMAND's stdout is our stderr: our stdout (the replies) ends with us, so a
    # driver reading replies sees EOF if this script dies.
    child = os.posix_spawn(command[0], command, dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir()),
                           file_actions=[(os.POSIX_SPAWN_DUP2, 2, 1)])
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
            count, _, timeout = argument.partition(" ")
            reply = "data " + device.read(int(count), float(timeout or 2.0)).hex()
        elif verb == "avail":
            limit, _, timeout = argument.partition(" ")
            reply = "data " + available(device, int(limit), float(timeout)).hex()
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
        elif verb in ("lines", "setlines", "pulselines", "linelog"):
            reply = device.line_request(verb, argument)
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

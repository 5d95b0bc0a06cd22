#!/usr/bin/python3
"""A umockdev testbed with a fake USB CDC-ACM accessory, for VigilUdevTests.

Run as: umockdev-wrapper /usr/bin/python3 umockdev-testbed.py -- COMMAND...

The testbed holds a USB device 1209:0001 ("Vigil Labs" "Vigil Sensor",
serial VGL123, bcdDevice 0x0102) on bus 1 as device 5, its CDC-ACM
interface, and a tty child ttyACM0 whose /dev node is backed by a pty that
this script drives; plus a plain UART (ttyS0) and a device of another
subsystem (misc) that a tty/usb monitor must not see.

COMMAND (the Swift test binary, re-executed) runs in the testbed: it inherits
LD_PRELOAD from umockdev-wrapper and UMOCKDEV_DIR from here. It asks for
uevents and pty traffic through two pipes named in VIGIL_UMOCKDEV_CONTROL
("<request write fd> <reply read fd>"), one line per request:

    uevent ACTION SYSPATH   -> ok
    write HEX               -> ok            (bytes into the tty, as the device)
    read COUNT              -> data HEX      (bytes the tty sent, 2 s timeout)
    unplug                  -> ok            (hang up the pty; remove uevents for the tty,
                                              interface and device; then their sysfs goes)
    replug                  -> ok SYSPATH    (the same device back as ttyACM1: three adds)
    done                    -> ok            (the checks ran to the end)

Exit status: the command's, or 3 if it exited 0 without saying "done"
(a filter that matched no test must not pass), or 4 if umockdev is missing.
"""

import os
import select
import sys

try:
    import gi

    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev
except (ImportError, ValueError) as error:
    print(f"umockdev-testbed: no UMockdev GI binding ({error}); "
          "install gir1.2-umockdev-1.0 python3-gi umockdev", file=sys.stderr)
    sys.exit(4)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab", "host"))
from virtual_usb_serial import BY_ID, VirtualSerialAccessory  # noqa: E402,F401

OTHERS = """P: /devices/platform/serial8250/tty/ttyS0
N: ttyS0
E: SUBSYSTEM=tty
E: DEVNAME=/dev/ttyS0
E: MAJOR=4
E: MINOR=64

P: /devices/virtual/misc/vigil-noise
E: SUBSYSTEM=misc
"""


def main():
    if "--" not in sys.argv:
        sys.exit("usage: umockdev-testbed.py -- COMMAND...")
    command = sys.argv[sys.argv.index("--") + 1:]
    testbed = UMockdev.Testbed.new()
    testbed.add_from_string(OTHERS)
    device = VirtualSerialAccessory(testbed)
    device.plug()

    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    environment = dict(os.environ, UMOCKDEV_DIR=testbed.get_root_dir(),
                       VIGIL_UMOCKDEV_CONTROL=f"{request_write} {reply_read}")
    os.set_inheritable(request_write, True)
    os.set_inheritable(reply_read, True)
    child = os.posix_spawn(command[0], command, environment)
    os.close(request_write)
    os.close(reply_read)
    requests = os.fdopen(request_read, "r")
    replies = os.fdopen(reply_write, "w", buffering=1)
    said_done = False
    for line in requests:
        verb, _, argument = line.strip().partition(" ")
        reply = "ok"
        if verb == "uevent":
            action, _, syspath = argument.partition(" ")
            testbed.uevent(syspath, action)
        elif verb == "write":
            device.write(bytes.fromhex(argument))
        elif verb == "read":
            reply = "data " + device.read(int(argument)).hex()
        elif verb == "unplug":
            device.unplug()  # hangs up whoever has the node open
        elif verb == "replug":
            device.plug()  # the same device back as ttyACM1: three adds
            reply = f"ok {device.tty_syspath}"
        elif verb == "done":
            said_done = True
        else:
            reply = "error unknown request " + verb
        replies.write(reply + "\n")
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0 and not said_done:
        print("umockdev-testbed: the command exited 0 without running the checks "
              "(did its test filter match nothing?)", file=sys.stderr)
        code = 3
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()

"""A fake USB CDC-ACM serial accessory for umockdev testbeds (host tier).

Shared by Tests/VigilUdevTests/umockdev-testbed.py, Tests/python/accessory_testbed.py
and scripts/virtual-accessory: a USB device 1209:0001 ("Vigil Labs"
"Vigil Sensor", serial VGL123, bcdDevice 0x0102), its CDC-ACM interface, and a
tty child with the udev properties udevd's usb_id builtin and
udev/70-vigil-accessories.rules would set. Feed the text to
UMockdev.Testbed.add_from_string; the tty's node is then backed by a pty.

A pty has no modem lines; with `modem_lines=True` the node gets them the way
a USB CDC-ACM port has them, emulated by ModemLineEmulation (umockdev's ioctl
handler for the node): the host's DTR and RTS (TIOCMSET/TIOCMBIS/TIOCMBIC,
raised at every open, dropped at the last close with HUPCL), its breaks
(TIOCSBRK/TIOCCBRK), and the device's CTS, DSR, DCD and RI with their
transition counters (TIOCMGET, TIOCGICOUNT). RS-485 stays unsupported, as on
cdc_acm.
"""

import json
import struct
import termios
import threading
import time

#: TIOCM_* bits by line name (termios has them on Linux).
LINE_BITS = {"dtr": termios.TIOCM_DTR, "rts": termios.TIOCM_RTS, "cts": termios.TIOCM_CTS,
             "dsr": termios.TIOCM_DSR, "dcd": termios.TIOCM_CAR, "ri": termios.TIOCM_RNG}
DEVICE_LINES = ("cts", "dsr", "dcd", "ri")
TIOCGICOUNT = 0x545D
TIOCSBRK, TIOCCBRK = 0x5427, 0x5428
#: struct serial_icounter_struct: cts, dsr, rng, dcd, rx, tx, frame, overrun, parity, brk, buf_overrun, reserved[9].
ICOUNT = struct.Struct("20i")

USB = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2"
INTERFACE = USB + "/1-2:1.0"
BY_ID = "/dev/serial/by-id/usb-Vigil_Labs_Vigil_Sensor_VGL123-if00"
PROTOCOLS = "org.example.sensor org.example.dfu"


def usb_path(port="1-2"):
    return f"/sys/devices/pci0000:00/0000:00:14.0/usb1/{port}"


def _udev_safe(text):
    # As udev builds by-id names: anything but [A-Za-z0-9._-] becomes "_".
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in text)


def _udev_encoded(text):
    # ID_VENDOR_ENC/ID_MODEL_ENC: blanks (and other unsafe bytes) as \xNN.
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else f"\\x{ord(c):02x}" for c in text)


def by_id(serial="VGL123", manufacturer="Vigil Labs", product="Vigil Sensor"):
    return f"/dev/serial/by-id/usb-{_udev_safe(manufacturer)}_{_udev_safe(product)}_{_udev_safe(serial)}-if00"


def usb_device(port="1-2", serial="VGL123", manufacturer="Vigil Labs", product="Vigil Sensor",
               vendor_id="1209", product_id="0001"):
    usb = usb_path(port)
    devnum = 3 + int(port.rpartition("-")[2])
    return f"""P: {usb[4:]}
N: bus/usb/001/{devnum:03d}
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
E: DRIVER=usb
E: BUSNUM=001
E: DEVNUM={devnum:03d}
E: PRODUCT={int(vendor_id, 16):x}/{int(product_id, 16):x}/102
A: idVendor={vendor_id}
A: idProduct={product_id}
A: serial={serial}
A: manufacturer={manufacturer}
A: product={product}
A: bcdDevice=0102
A: busnum=1
A: devnum={devnum}

P: {usb[4:]}/{port}:1.0
E: SUBSYSTEM=usb
E: DEVTYPE=usb_interface
E: DRIVER=cdc_acm
A: bInterfaceClass=02
A: bInterfaceNumber=00
"""


def tty(name, minor, protocols=PROTOCOLS, port="1-2", serial="VGL123", vigil_name="Vigil Sensor",
        vendor_id="1209", product_id="0001", manufacturer="Vigil Labs", product="Vigil Sensor",
        line_settings="115200 8N1 rtscts"):
    # Properties as udevd's usb_id builtin and udev/70-vigil-accessories.rules set them.
    return f"""P: {usb_path(port)[4:]}/{port}:1.0/tty/{name}
N: {name}
E: SUBSYSTEM=tty
E: DEVNAME=/dev/{name}
E: MAJOR=166
E: MINOR={minor}
E: ID_BUS=usb
E: ID_VENDOR_ID={vendor_id}
E: ID_MODEL_ID={product_id}
E: ID_SERIAL_SHORT={serial}
E: ID_VENDOR_ENC={_udev_encoded(manufacturer)}
E: ID_MODEL_ENC={_udev_encoded(product)}
E: ID_REVISION=0102
E: ID_USB_INTERFACE_NUM=00
E: ID_USB_DRIVER=cdc_acm
E: DEVLINKS={by_id(serial, manufacturer, product)} /dev/serial/by-path/pci-0000:00:14.0-usb-0:{port[2:]}:1.0
E: ID_MM_DEVICE_IGNORE=1
E: VIGIL_ACCESSORY=1
E: VIGIL_PROTOCOLS={protocols}
E: VIGIL_SERIAL={line_settings}
E: VIGIL_NAME={vigil_name}
"""


class ModemLineEmulation:
    """Modem lines for one device's node: umockdev hands every ioctl the host
    makes on the node to `handle` (on the testbed's worker thread); the
    device's side (the testbed's requests) sets its lines and reads what the
    host did. `history` is every change of the host's outputs (DTR, RTS,
    break), timestamped, so a test sees a reset pulse that is over by the
    time it looks."""

    def __init__(self, pty_settings):
        #: Returns the tty's termios (None once the device is gone): HUPCL decides the last close.
        self._pty_settings = pty_settings
        self._changed = threading.Condition()
        self.lines = {name: False for name in LINE_BITS}
        self.lines["dsr"] = self.lines["dcd"] = True  # a CDC-ACM device that is up says so
        self.counters = {name: 0 for name in DEVICE_LINES}
        self.in_break = False
        self.opened = 0
        self.history = []

    def attach(self, testbed, node):
        from gi.repository import UMockdev

        handler = UMockdev.IoctlBase()
        handler.connect("handle-ioctl", lambda _handler, client: self.handle(client))
        handler.connect("client-connected", lambda _handler, _client: self.opened_by_host())
        handler.connect("client-vanished", lambda _handler, _client: self.closed_by_host())
        testbed.attach_ioctl(node, handler)
        self.handler = handler

    def _record(self):
        # Called with the condition held, after the host changed an output.
        self.history.append({"time": time.time(), "dtr": self.lines["dtr"], "rts": self.lines["rts"],
                             "break": self.in_break})
        self._changed.notify_all()

    def _set_outputs(self, bits):
        dtr, rts = bool(bits & LINE_BITS["dtr"]), bool(bits & LINE_BITS["rts"])
        if (dtr, rts) != (self.lines["dtr"], self.lines["rts"]):
            self.lines["dtr"], self.lines["rts"] = dtr, rts
            self._record()

    def _bits(self):
        return sum(bit for name, bit in LINE_BITS.items() if self.lines[name])

    def opened_by_host(self):
        # Linux raises DTR and RTS at every open of a tty port.
        with self._changed:
            self.opened += 1
            self._set_outputs(self._bits() | LINE_BITS["dtr"] | LINE_BITS["rts"])

    def closed_by_host(self):
        with self._changed:
            self.opened = max(0, self.opened - 1)
            settings = self._pty_settings()
            if self.opened == 0 and (settings is None or settings[2] & termios.HUPCL):
                self._set_outputs(self._bits() & ~(LINE_BITS["dtr"] | LINE_BITS["rts"]))

    def handle(self, client):
        """One ioctl of the host's; False leaves it to umockdev (the pty)."""
        request = client.get_request()
        with self._changed:
            if request == termios.TIOCMGET:
                client.get_arg().resolve(0, 4).update(0, struct.pack("i", self._bits()))
            elif request in (termios.TIOCMSET, termios.TIOCMBIS, termios.TIOCMBIC):
                (bits,) = struct.unpack("i", bytes(client.get_arg().resolve(0, 4).retrieve()))
                outputs = bits & (LINE_BITS["dtr"] | LINE_BITS["rts"])
                if request == termios.TIOCMSET:
                    self._set_outputs((self._bits() & ~(LINE_BITS["dtr"] | LINE_BITS["rts"])) | outputs)
                elif request == termios.TIOCMBIS:
                    self._set_outputs(self._bits() | outputs)
                else:
                    self._set_outputs(self._bits() & ~outputs)
            elif request == TIOCGICOUNT:
                counts = [self.counters["cts"], self.counters["dsr"], self.counters["ri"], self.counters["dcd"]]
                client.get_arg().resolve(0, ICOUNT.size).update(0, ICOUNT.pack(*counts, *[0] * 16))
            elif request in (TIOCSBRK, TIOCCBRK):
                if self.in_break != (request == TIOCSBRK):
                    self.in_break = request == TIOCSBRK
                    self._record()
            else:
                return False
        client.complete(0, 0)
        return True

    # -- the device's side

    def set_device_lines(self, lines):
        """Sets CTS, DSR, DCD and/or RI ({name: bool}); each change counts, as a UART counts edges."""
        unknown = set(lines) - set(DEVICE_LINES)
        if unknown:
            raise ValueError(f"not a device line: {', '.join(sorted(unknown))} (the device sets {', '.join(DEVICE_LINES)})")
        with self._changed:
            for name, up in lines.items():
                if self.lines[name] != bool(up):
                    self.lines[name] = bool(up)
                    self.counters[name] += 1

    def pulse_device_lines(self, names):
        """Each named line flips and flips back at once: only its counter shows it (a ring, a glitch)."""
        unknown = set(names) - set(DEVICE_LINES)
        if unknown:
            raise ValueError(f"not a device line: {', '.join(sorted(unknown))} (the device sets {', '.join(DEVICE_LINES)})")
        with self._changed:
            for name in names:
                self.counters[name] += 2

    def state(self):
        with self._changed:
            return dict(self.lines, **{"break": self.in_break})

    def changes(self, since, timeout):
        """The host's output changes after the first `since`, waiting up to `timeout` s for one."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.history) > since, timeout)
            return self.history[since:]


class VirtualSerialAccessory:
    """The device's side of the fake accessory in a umockdev testbed: plugs it
    in (on the next /dev/ttyACMn), writes and reads the pty behind its node, and
    unplugs it the way the kernel does."""

    def __init__(self, testbed, protocols=PROTOCOLS, port="1-2", serial="VGL123", manufacturer="Vigil Labs",
                 product="Vigil Sensor", name="Vigil Sensor", first_number=0, vendor_id="1209",
                 product_id="0001", line_settings="115200 8N1 rtscts", modem_lines=False):
        """Defaults are the one sensor every test knows; another device needs its
        own USB `port` and `first_number` (its nodes are ttyACM<first_number>...).
        `vendor_id`/`product_id` are four hex digits. `modem_lines`: emulate
        the port's modem lines (ModemLineEmulation) instead of a bare pty's none."""
        self.testbed = testbed
        self.protocols = protocols
        self.port = port
        self.serial = serial
        self.manufacturer = manufacturer
        self.product = product
        self.name = name
        self.vendor_id = vendor_id
        self.product_id = product_id
        self.line_settings = line_settings
        self.number = first_number - 1
        self.pty = None
        self.modem_lines = modem_lines
        #: The node's modem lines while plugged in (with `modem_lines`), else None.
        self.lines = None

    @property
    def node(self):
        return f"/dev/ttyACM{self.number}"

    @property
    def tty_syspath(self):
        return f"{self.interface}/tty/ttyACM{self.number}"

    @property
    def usb(self):
        return usb_path(self.port)

    @property
    def interface(self):
        return f"{self.usb}/{self.port}:1.0"

    def plug(self):
        """Adds the device (add_from_string emits the add uevents); returns its node."""
        import os

        self.number += 1
        if self.modem_lines:
            # Before the node exists: whoever opens it at its add uevent gets the lines.
            self.lines = ModemLineEmulation(self._pty_settings)
            self.lines.attach(self.testbed, self.node)
        self.testbed.add_from_string(
            usb_device(self.port, self.serial, self.manufacturer, self.product, self.vendor_id, self.product_id)
            + "\n" + tty(f"ttyACM{self.number}", self.number, self.protocols, self.port, self.serial, self.name,
                         self.vendor_id, self.product_id, self.manufacturer, self.product, self.line_settings))
        # Not inherited: closing it here must hang up the node for whoever opened it.
        self.pty = self.testbed.get_dev_fd(self.node)
        os.set_inheritable(self.pty, False)
        return self.node

    def _pty_settings(self):
        pty = self.pty
        if pty is None:
            return None
        try:
            return termios.tcgetattr(pty)  # on the pty's controller side: the node's (host's) settings
        except termios.error:
            return None

    def write(self, data):
        import os

        return os.write(self.pty, data)

    def line_request(self, verb, argument):
        """The testbed's line requests: `lines` -> JSON state, `setlines JSON`, `pulselines JSON`,
        `linelog SINCE SECS` -> JSON."""
        if self.lines is None:
            return "error this device has no modem lines (plugged in without modem_lines)"
        if verb == "lines":
            return "ok " + json.dumps(self.lines.state())
        if verb in ("setlines", "pulselines"):
            try:
                if verb == "setlines":
                    self.lines.set_device_lines(json.loads(argument))
                else:
                    self.lines.pulse_device_lines(json.loads(argument))
            except ValueError as error:
                return f"error {error}"
            return "ok"
        since, _, timeout = argument.partition(" ")
        return "ok " + json.dumps(self.lines.changes(int(since or 0), float(timeout or 0)))

    def feed(self, data, patience=30.0):
        """Writes all of `data`, waiting while the host's flow control holds the
        device back; gives up if nothing moves for `patience` s. Returns "ok" or
        an "error ..." line saying how far it got."""
        import os
        import select

        os.set_blocking(self.pty, False)
        sent = 0
        try:
            while sent < len(data):
                if not select.select([], [self.pty], [], patience)[1]:
                    return f"error held back for {patience:g} s after {sent} of {len(data)} bytes"
                try:
                    sent += os.write(self.pty, data[sent:sent + 1024])
                except BlockingIOError:
                    pass
        finally:
            os.set_blocking(self.pty, True)
        return "ok"

    def read(self, count, timeout=2.0):
        """Up to `count` bytes the host sent, waiting at most `timeout` s between pieces."""
        import os
        import select

        data = b""
        while len(data) < count and select.select([self.pty], [], [], timeout)[0]:
            data += os.read(self.pty, count - len(data))
        return data

    def unplug(self):
        """Hangs up the node and removes it, then the remove uevents in the
        kernel's order (tty, interface, device); sysfs is gone by the time a
        listener reads them."""
        import os

        os.close(self.pty)
        self.pty = None
        # The kernel deletes the node before it sends the remove uevent, and
        # umockdev's remove_device leaves it: a stale link to a pty number the
        # next plug may get again would open that device instead of failing.
        node = os.path.join(self.testbed.get_root_dir(), self.node.lstrip("/"))
        if os.path.lexists(node):
            os.unlink(node)
        removed = (self.tty_syspath, self.interface, self.usb)
        for path in removed:
            self.testbed.uevent(path, "remove")
        for path in removed:
            self.testbed.remove_device(path)
        if self.lines is not None:
            self.testbed.detach_ioctl(self.node)
            self.lines = None

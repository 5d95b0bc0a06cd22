"""A fake USB CDC-ACM serial accessory for umockdev testbeds (host tier).

Shared by Tests/VigilUdevTests/umockdev-testbed.py, Tests/python/accessory_testbed.py
and scripts/virtual-accessory: a USB device 1209:0001 ("Vigil Labs"
"Vigil Sensor", serial VGL123, bcdDevice 0x0102), its CDC-ACM interface, and a
tty child with the udev properties udevd's usb_id builtin and
udev/70-vigil-accessories.rules would set. Feed the text to
UMockdev.Testbed.add_from_string; the tty's node is then backed by a pty.
"""

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


class VirtualSerialAccessory:
    """The device's side of the fake accessory in a umockdev testbed: plugs it
    in (on the next /dev/ttyACMn), writes and reads the pty behind its node, and
    unplugs it the way the kernel does."""

    def __init__(self, testbed, protocols=PROTOCOLS, port="1-2", serial="VGL123", manufacturer="Vigil Labs",
                 product="Vigil Sensor", name="Vigil Sensor", first_number=0, vendor_id="1209",
                 product_id="0001", line_settings="115200 8N1 rtscts"):
        """Defaults are the one sensor every test knows; another device needs its
        own USB `port` and `first_number` (its nodes are ttyACM<first_number>...).
        `vendor_id`/`product_id` are four hex digits."""
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
        self.testbed.add_from_string(
            usb_device(self.port, self.serial, self.manufacturer, self.product, self.vendor_id, self.product_id)
            + "\n" + tty(f"ttyACM{self.number}", self.number, self.protocols, self.port, self.serial, self.name,
                         self.vendor_id, self.product_id, self.manufacturer, self.product, self.line_settings))
        # Not inherited: closing it here must hang up the node for whoever opened it.
        self.pty = self.testbed.get_dev_fd(self.node)
        os.set_inheritable(self.pty, False)
        return self.node

    def write(self, data):
        import os

        return os.write(self.pty, data)

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

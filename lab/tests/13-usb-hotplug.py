#!/usr/bin/env python3
"""Unplug gives a udev 'remove' and EOF or EIO to an open reader (no endless
zero reads); replug gives a udev 'add' with the same identity."""
# lab-timeout: 120
import errno, os, select, time
import vigillab as lab
from vigillab import LabError

lab.udev_up()
lab.usb_init(4)
mon = lab.UdevMonitor("tty")
host, dev = lab.usb_plug("hot", 0x1209, 0x7004, "Vigil Lab", "Hotplug", "VL-HOT-1")
mon.wait("add", ID_SERIAL_SHORT="VL-HOT-1")
fd = lab.open_raw(host)

lab.usb_unplug("hot")
ev = mon.wait("remove", DEVNAME=host)
lab.log(f"udev remove event for {ev['DEVNAME']}")
# The open reader must see the disconnect: POLLHUP then EOF (0) or EIO.
r, _, _ = select.select([fd], [], [], 10)
if not r:
    raise LabError("open reader saw nothing within 10s of the unplug (no hang-up, EOF or EIO)")
try:
    data = os.read(fd, 100)
    outcome = "EOF" if data == b"" else None
    if outcome is None:
        raise LabError(f"read after unplug returned data {data!r}, want EOF/EIO")
except OSError as exc:
    if exc.errno != errno.EIO:
        raise LabError(f"read after unplug failed with {exc}, want EIO or EOF")
    outcome = "EIO"
lab.log(f"reader got {outcome} after the unplug")
os.close(fd)
if os.path.exists(host):
    lab.wait_for(lambda: not os.path.exists(host), 10, f"{host} to disappear")

mon.events.clear()
host2, dev2 = lab.usb_replug("hot")
ev = mon.wait("add", ID_SERIAL_SHORT="VL-HOT-1")
lab.log(f"replug: udev add event {ev['DEVNAME']} (was {host})")
props = lab.udev_properties(host2)
if (props.get("ID_VENDOR_ID"), props.get("ID_MODEL_ID")) != ("1209", "7004"):
    raise LabError(f"replugged device has identity {props.get('ID_VENDOR_ID')}:{props.get('ID_MODEL_ID')}")
fd = lab.open_raw(host2)
g = lab.open_raw(dev2)
lab.write_all(g, b"after-replug\n")
if lab.read_until(fd, b"\n", 10, "data after replug") != b"after-replug\n":
    raise LabError("wrong data after replug")
os.close(fd); os.close(g)
mon.close()
print("OK")

#!/usr/bin/env python3
"""Bytes flow both ways between the host side (/dev/ttyACMn, cdc_acm) and the
gadget side (/dev/ttyGSn) of a lab USB serial accessory, intact."""
# lab-timeout: 120
import os
import vigillab as lab
from vigillab import LabError

lab.udev_up()
lab.usb_init(4)
host, dev = lab.usb_plug("flow", 0x1209, 0x7002, "Vigil Lab", "Flow", "VL-FLOW-1")
h = lab.open_raw(host)
d = lab.open_raw(dev)
payload = os.urandom(64 * 1024)
for src, dst, label in ((h, d, "host -> gadget"), (d, h, "gadget -> host")):
    import threading
    t = threading.Thread(target=lab.write_all, args=(src, payload))
    t.start()
    got = lab.read_exact(dst, len(payload), 60, label)
    t.join()
    if got != payload:
        first = next(i for i in range(len(got)) if got[i] != payload[i])
        raise LabError(f"{label}: data differs at byte {first}")
    lab.log(f"{label}: {len(payload)} bytes intact")
os.close(h); os.close(d)
print("OK")

#!/usr/bin/env python3
"""Two accessories at once (dummy_udc.0 and dummy_udc.1) are told apart by
identity (serial number), not by node name, and carry separate data."""
# lab-timeout: 120
import os
import vigillab as lab
from vigillab import LabError

lab.udev_up()
lab.usb_init(4)
a_host, a_dev = lab.usb_plug("twoa", 0x1209, 0x7005, "Vigil Lab", "Left", "VL-TWO-A")
b_host, b_dev = lab.usb_plug("twob", 0x1209, 0x7006, "Vigil Lab", "Right", "VL-TWO-B")
if a_host == b_host or a_dev == b_dev:
    raise LabError(f"both gadgets map to the same nodes: {a_host} {b_host} {a_dev} {b_dev}")
for host, serial, model in ((a_host, "VL-TWO-A", "7005"), (b_host, "VL-TWO-B", "7006")):
    p = lab.udev_properties(host)
    if p.get("ID_SERIAL_SHORT") != serial or p.get("ID_MODEL_ID") != model:
        raise LabError(f"{host}: udev says {p.get('ID_SERIAL_SHORT')}/{p.get('ID_MODEL_ID')}, want {serial}/{model}")
    if lab.usb_host_node(serial) != host:
        raise LabError(f"lookup by serial {serial} did not return {host}")
fds = {k: (lab.open_raw(h), lab.open_raw(d)) for k, h, d in (("A", a_host, a_dev), ("B", b_host, b_dev))}
for k, (h, d) in fds.items():
    lab.write_all(d, f"from {k}\n".encode())
for k, (h, d) in fds.items():
    line = lab.read_until(h, b"\n", 10, f"line from gadget {k}")
    if line != f"from {k}\n".encode():
        raise LabError(f"gadget {k}: host read {line!r}")
lab.log(f"A: {a_host}<->{a_dev}, B: {b_host}<->{b_dev}, data kept apart")
lab.usb_unplug("twoa")
if lab.usb_host_node("VL-TWO-B", 5) != b_host:
    raise LabError("unplugging A disturbed B")
lab.log("unplugging A leaves B in place")
for h, d in fds.values():
    os.close(h); os.close(d)
print("OK")

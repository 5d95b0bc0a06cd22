#!/usr/bin/env python3
"""A CDC-ACM gadget plugged into dummy_hcd shows up through real udev with the
identity it was given: ID_VENDOR_ID / ID_MODEL_ID / ID_SERIAL_SHORT /
ID_VENDOR / ID_MODEL, a udev 'add' event, and a /dev/serial/by-id link."""
# lab-timeout: 90
import os
import vigillab as lab
from vigillab import LabError

lab.udev_up()
lab.usb_init(4)
mon = lab.UdevMonitor("tty")
host, dev = lab.usb_plug("ident", 0x1209, 0x7001, "Vigil Lab", "Pulse Sensor", "VL-ID-0001")
lab.log(f"plugged: host side {host}, gadget side {dev}")
ev = mon.wait("add", ID_SERIAL_SHORT="VL-ID-0001")
lab.log(f"udev add event: {ev.get('DEVNAME')}")
if ev.get("DEVNAME") != host:
    raise LabError(f"udev add event names {ev.get('DEVNAME')}, lab_usb_plug returned {host}")
props = lab.udev_properties(host)
want = {"ID_VENDOR_ID": "1209", "ID_MODEL_ID": "7001", "ID_SERIAL_SHORT": "VL-ID-0001",
        "ID_VENDOR": "Vigil_Lab", "ID_MODEL": "Pulse_Sensor", "ID_USB_DRIVER": "cdc_acm",
        "SUBSYSTEM": "tty"}
bad = {k: (props.get(k), v) for k, v in want.items() if props.get(k) != v}
if bad:
    raise LabError("udev properties differ (got, want): " + repr(bad))
link = "/dev/serial/by-id/usb-Vigil_Lab_Pulse_Sensor_VL-ID-0001-if00"
lab.wait_for(lambda: os.path.exists(link), 10, link)
if os.path.realpath(link) != host:
    raise LabError(f"{link} -> {os.path.realpath(link)}, want {host}")
if not dev.startswith("/dev/ttyGS") or not os.path.exists(dev):
    raise LabError(f"gadget side {dev} missing")
mon.close()
print("OK", {k: props[k] for k in want})

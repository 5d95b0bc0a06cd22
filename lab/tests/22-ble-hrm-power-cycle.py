#!/usr/bin/env python3
"""The heart-rate monitor powers off (SIGUSR1) while BlueZ is subscribed:
BlueZ must report the disconnection and the notifications stop; after it
powers on again (control FIFO "power-on") a reconnect + StartNotify brings
notifications back.  (The reconnect/resubscribe path Vigil automates.)"""
# lab-timeout: 180
import os, signal, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
import vigillab as lab
from vigillab import LabError

NAME = "Vigil HRM"
lab.bt_up()
bz = lab.Bluez("hci0")
bz.forget_all()
peer = lab.Peer.start("hrm", "heart_rate_monitor.py", "--name", NAME, "--interval", "0.3",
                      "--energy", "0")
pid = int(open(os.path.join(lab.RUN, "hrm.pid")).read())
dev = bz.discover(name=NAME, timeout=30)
try:
    bz.connect(dev)
    hrm = bz.characteristic(dev, "2a37")
    bz.start_notify(hrm)
    bz.wait_notifications(hrm, 2, 20, "notifications before the power-off")
    lab.log("subscribed, notifications flowing; powering the peer off (SIGUSR1)")

    os.kill(pid, signal.SIGUSR1)
    peer.wait_event("powered", on=False, timeout=20)
    bz.wait(lambda: not bool(bz.prop(dev, "org.bluez.Device1", "Connected")), 30,
            "BlueZ to report the device disconnected after the peer powered off")
    sent_before = len(peer.events("notify"))
    lab.log(f"BlueZ reports the disconnection; peer had sent {sent_before} notifications")

    peer.command("power-on")
    peer.wait_event("powered", on=True, timeout=20)
    lab.log("peer powered on again; reconnecting and re-subscribing")
    got_before = len(bz.notifications[hrm])
    bz.connect(dev, timeout=60)
    hrm = bz.characteristic(dev, "2a37")
    bz.start_notify(hrm)
    bz.wait(lambda: len(peer.events("notify")) >= sent_before + 2, 30,
            "the peer to notify again after the reconnect")
    bz.wait(lambda: len(bz.notifications[hrm]) >= got_before + 2, 30,
            "notifications to arrive again after reconnect + StartNotify")
    last = lab.decode_heart_rate(bz.notifications[hrm][-1])
    lab.log(f"notifications resumed, last {last}")
    print("OK")
finally:
    bz.disconnect(dev)
    bz.remove_device(dev)
    peer.stop()

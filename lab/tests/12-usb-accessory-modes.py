#!/usr/bin/env python3
"""The scripted serial accessory (lab/peers/serial_accessory.py) on the
gadget side: line records arrive in order with the values it logged, echo
returns what was sent, bulk moves a known pattern (bytes/s reported)."""
# lab-timeout: 150
import json, os, time
import vigillab as lab
from vigillab import LabError

lab.udev_up()
lab.usb_init(4)
host, dev = lab.usb_plug("acc", 0x1209, 0x7003, "Vigil Lab", "Accessory", "VL-ACC-1")

# The host side is raw before the peer can send anything. A tty opened
# cooked (the default) echoes what arrives back to the sender, and n_tty may
# hold an echo it could not write at once until the next write() on that tty:
# the first record line then reached the echo peer ahead of the echo test's
# own bytes (seen: the echo returned "0,0.0065..." at offset 0).
h = lab.open_raw(host)

# records
peer = lab.Peer.start("acc-records", "serial_accessory.py", "--device", dev, "--mode", "records",
                      "--rate", "50", "--count", "25")
buf = b""
while buf.count(b"\n") < 25:
    buf += lab.read_until(h, b"\n", 20, "a sensor record")
lines = buf.decode().splitlines()
sent = [e["line"] for e in peer.wait_event("done", timeout=20) and peer.events("record")]
if lines != sent:
    raise LabError(f"records differ: got {lines[:3]}..., peer sent {sent[:3]}...")
seqs = [int(l.split(",")[0]) for l in lines]
if seqs != list(range(25)):
    raise LabError(f"record sequence numbers not 0..24: {seqs}")
lab.log(f"records: 25 in order, e.g. {lines[0]!r} .. {lines[-1]!r}")
peer.stop()

# echo: nothing may come back but what is sent now (no drain: a stale byte
# is a failure).
peer = lab.Peer.start("acc-echo", "serial_accessory.py", "--device", dev, "--mode", "echo")
msg = os.urandom(4096)
lab.write_all(h, msg)
back = lab.read_exact(h, len(msg), 30, "the echo")
if back != msg:
    first = next(i for i, (a, b) in enumerate(zip(back, msg)) if a != b)
    raise LabError(f"echo returned different bytes: first difference at {first} "
                   f"(sent {msg[first:first + 8].hex()}, got {back[first:first + 8].hex()})")
lab.log("echo: 4096 bytes returned intact")
peer.stop()

# bulk (gadget -> host)
n = 1 << 20
peer = lab.Peer.start("acc-bulk", "serial_accessory.py", "--device", dev, "--mode", "bulk",
                      "--bytes", str(n))
t0 = time.monotonic()
got = lab.read_exact(h, n, 90, "bulk data")
dt = time.monotonic() - t0
expect = bytes(i % 251 for i in range(n))
if got != expect:
    first = next(i for i in range(n) if got[i] != expect[i])
    raise LabError(f"bulk pattern wrong at byte {first}")
done = peer.wait_event("done", timeout=30)
rate = n / dt
lab.log(f"bulk: {n} bytes, host measured {rate/1e6:.2f} MB/s, peer {done['bytes_per_s']/1e6:.2f} MB/s")
with open(os.path.join(lab.RESULTS, "usb-bulk-throughput.json"), "w") as f:
    json.dump({"bytes": n, "host_bytes_per_s": round(rate), "peer_bytes_per_s": done["bytes_per_s"],
               "note": "TCG emulation: compare ratios within one boot, not absolute numbers"}, f)
peer.stop()
os.close(h)
print("OK")

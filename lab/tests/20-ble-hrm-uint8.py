#!/usr/bin/env python3
"""BlueZ central (hci0) reads and subscribes to the Bumble heart-rate monitor
(hci1): uint8 heart rate, sensor contact, energy expended, 2 RR intervals;
values decoded from the notifications must equal what the peer sent; the
control point resets energy expended and rejects other opcodes."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
import hrm

hrm.run_check(["--format", "uint8", "--rate", "72", "--contact", "yes",
               "--energy", "100", "--rr", "2"], location=1)
print("OK")

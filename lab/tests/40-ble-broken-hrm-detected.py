#!/usr/bin/env python3
"""Self-check of the lab: the heart-rate check run against a broken peer
(--no-notify: accepts the subscription, never notifies) must FAIL, and its
message must say which notifications were missing.  This test passes only
if that failure is detected."""
# lab-timeout: 150
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
import hrm
from vigillab import LabError

try:
    hrm.run_check(["--format", "uint8", "--rate", "70", "--no-notify"], notifications=3,
                  check_control_point=False, notify_timeout=8)
except LabError as exc:
    msg = str(exc)
    print(f"the check failed as it must: {msg}")
    if "Heart Rate Measurement (0x2A37) notifications" not in msg or "received 0 of" not in msg:
        raise LabError(f"failure message does not say what was missing: {msg}")
    print("OK")
    sys.exit(0)
raise LabError("the heart-rate check PASSED against a peer that never notifies")

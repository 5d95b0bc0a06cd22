#!/usr/bin/env python3
"""BlueZ central against the Bumble heart-rate monitor sending uint16 heart
rates (> 255 so a uint8 decoder would be wrong), energy expended and 3 RR
intervals per notification, no sensor-contact support; decoded values must
equal what the peer sent."""
# lab-timeout: 180
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
import hrm

hrm.run_check(["--format", "uint16", "--rate", "300", "--contact", "none",
               "--energy", "1000", "--rr", "3"], notifications=5, location=2,
              check_control_point=False)
print("OK")

#!/usr/bin/env python3
"""The pytest plugin's example suite on real stacks (issue 14; lab tier):
clients/python/examples/pytest_rig, the same tests CI runs on the host
against umockdev and the BlueZ mock, here with --vigil-hardware=lab: the
sensor logger fed by a USB CDC-ACM gadget through real udev, the heart-rate
logger woken by a Bumble monitor's notifications through bluetoothd, and two
described accessories (own USB identities, protocol strings and line
settings) as two gadgets. Failing tests' artifact folders are kept in the
results (pytest-example-artifacts/).

Uses the repository's .venv (scripts/setup makes it; scripts/test-python
installs the wheel into it) and the built vigild.
"""
# lab-timeout: 420
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = os.path.join(os.environ.get("VIGIL_VENV") or os.path.join(REPO, ".venv"), "bin", "python")
VIGILD = os.path.join(os.environ.get("VIGIL_LAB_BIN_DIR") or os.path.join(REPO, ".build", "debug"), "vigild")

for needed, hint in ((PYTHON, "run scripts/setup"), (VIGILD, "run swift build")):
    if not os.access(needed, os.X_OK):
        sys.exit(f"70-vigil-pytest-example: {needed} is missing ({hint})")
results = os.environ.get("VIGIL_LAB_RESULTS", "/tmp")
# From /tmp: the repository is read-only in the guest, and `import vigil` is then the installed wheel.
run = subprocess.run([PYTHON, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--vigil-hardware=lab",
                      "--vigild", VIGILD, "--junitxml", os.path.join(results, "pytest-example.xml"),
                      f"--vigil-artifacts={os.path.join(results, 'pytest-example-artifacts')}",
                      os.path.join(REPO, "clients", "python", "examples", "pytest_rig")],
                     cwd="/tmp", env=dict(os.environ, VIGIL_REPO=REPO))
sys.exit(run.returncode)

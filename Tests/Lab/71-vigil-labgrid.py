#!/usr/bin/env python3
"""labgrid against a real USB accessory (issue 30; lab tier): the package's
labgrid tests (clients/python/tests/test_labgrid.py) with --vigil-hardware=lab,
so the accessory behind the gateway's vigild is a USB CDC-ACM gadget seen
through the guest's real udev, not umockdev's. In the guest: a real
labgrid-coordinator and the Vigil exporter (`python -m vigil.labgrid exporter`)
on loopback publish the gadget by identity (serial VGL123, org.example.sensor);
a place matching it is created and acquired; then a labgrid Environment's
VigilSessionDriver exchanges bytes with the gadget, across a real unplug and
replug (unbind/bind of the gadget): the part whose truth is the kernel's.

The file's other test (a suite run with `--lg-env env.yaml --vigil-place`
whose `accessory_session` talks through the place) runs on the host tier
only (scripts/test-python, umockdev): it adds nothing the gadget proves, and
a second farm costs CI about two minutes under TCG (each `labgrid-client`
start takes 20-40 s in the guest).

Uses the repository's .venv (or $VIGIL_VENV) with labgrid installed
(scripts/setup), and the built vigild.
"""
# lab-timeout: 900
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = os.path.join(os.environ.get("VIGIL_VENV") or os.path.join(REPO, ".venv"), "bin", "python")
VIGILD = os.path.join(os.environ.get("VIGIL_LAB_BIN_DIR") or os.path.join(REPO, ".build", "debug"), "vigild")

for needed, hint in ((PYTHON, "run scripts/setup"), (VIGILD, "run swift build")):
    if not os.access(needed, os.X_OK):
        sys.exit(f"71-vigil-labgrid: {needed} is missing ({hint})")
if subprocess.run([PYTHON, "-c", "import labgrid"], capture_output=True).returncode != 0:
    sys.exit(f"71-vigil-labgrid: labgrid is not installed in {PYTHON} (scripts/setup installs it)")
# Loopback for the coordinator (the guest may boot with lo down).
subprocess.run(["ip", "link", "set", "lo", "up"], check=False)
results = os.environ.get("VIGIL_LAB_RESULTS", "/tmp")
# From /tmp: the repository is read-only in the guest, and `import vigil` is then the installed wheel.
# The ini file (clients/python/pyproject.toml) says where the rootdir is: no cache, no writes there.
run = subprocess.run([PYTHON, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--vigil-hardware=lab",
                      f"--vigild={VIGILD}", "--junitxml", os.path.join(results, "pytest-labgrid.xml"),
                      f"--vigil-artifacts={os.path.join(results, 'pytest-labgrid-artifacts')}",
                      "--basetemp", "/tmp/vigil-labgrid-pytest", "-k", "a_place_gives_a_console",
                      os.path.join(REPO, "clients", "python", "tests", "test_labgrid.py")],
                     cwd="/tmp", env=dict(os.environ, VIGIL_REPO=REPO))
sys.exit(run.returncode)

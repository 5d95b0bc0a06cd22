"""Limits at scale (host tier, the real vigild): vigild raises its own
open-file limit (one daemon holds fds for many apps) and gives its apps the
limit it started with (a program using select() breaks above 1024); and the
`apps` reply of a daemon with many apps, far larger than the 64 KiB a client
may send, reaches vigilctl and the Python client (docs/protocol.md, "Frames").
"""

import json
import os
import resource
import subprocess
import unittest

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, app_manifest, connect_control, daemon_with_app, wait_for

VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(os.path.dirname(VIGILD), "vigilctl")


def open_files(pid):
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class ResourceLimitTests(unittest.TestCase):
    def test_the_daemon_raises_its_limit_and_its_apps_keep_the_one_it_started_with(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        started = min(512, soft)
        resource.setrlimit(resource.RLIMIT_NOFILE, (started, hard))  # vigild inherits it
        try:
            daemon, control, record = daemon_with_app(self, "vigil-limits-", "org.vigil.test.limits",
                                                      [PYTHON, FAULT_APP, "--record", "{record}"])
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        self.assertEqual(open_files(daemon.process.pid), (hard, hard))
        control.app_action("launch", "org.vigil.test.limits")
        self.assertTrue(wait_for(lambda: app_info(control, "org.vigil.test.limits")["pid"], 15), daemon.log_tail())
        self.assertEqual(open_files(app_info(control, "org.vigil.test.limits")["pid"]), (started, hard))


    def test_a_daemon_with_many_apps_lists_them_all(self):
        daemon, _, _ = daemon_with_app(self, "vigil-many-", "org.vigil.test.many0000", ["/bin/true"], start=False)
        for n in range(1, 400):
            app_id = f"org.vigil.test.many{n:04d}"
            with open(os.path.join(daemon.apps_dir, app_id + ".toml"), "w") as manifest:
                manifest.write(app_manifest(app_id, ["/bin/true"]))
        daemon.start()
        self.addCleanup(daemon.stop)
        control = connect_control(daemon.socket)
        self.addCleanup(control.close)
        self.assertEqual(len(control.apps()), 400)
        result = subprocess.run([VIGILCTL, "--socket", daemon.socket, "--json", "apps"], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(json.loads(result.stdout)), 400)


if __name__ == "__main__":
    unittest.main()

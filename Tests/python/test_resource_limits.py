"""vigild raises its own open-file limit (one daemon holds fds for many
apps) and gives its apps the limit it started with (host tier, the real
vigild and a real app): a program using select() breaks above 1024.
"""

import os
import resource
import unittest

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, daemon_with_app, wait_for


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


if __name__ == "__main__":
    unittest.main()

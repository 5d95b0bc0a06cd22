"""Background refresh (the `fetch` mode) through the real vigild and a real
app process: a suspended app is woken for each refresh, never before its
interval, its report ends its window (it is suspended again), an app that
keeps finding nothing is stretched, and `vigilctl apps` (the control role's
`apps`) shows the next refresh. docs/lifecycle.md, "Background refresh".
"""

import os
import unittest

from fault_harness import PYTHON, VIGILD, app_info, app_manifest, daemon_with_app, read_jsonl, wait_for

APP = "org.vigil.test.refresher"
REFRESH_APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refresh_app.py")
INTERVAL = 0.6


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class RefreshTests(unittest.TestCase):
    def start(self, result):
        command = [PYTHON, REFRESH_APP, "--record", "{record}", "--interval", str(INTERVAL), "--earliest", "0.5",
                   "--result", result]
        self.daemon, control, self.record = daemon_with_app(
            self, "vigil-refresh-", APP, command, modes=["fetch"],
            timings={"refresh-minimum-interval": INTERVAL, "refresh-coalescing": 0.2, "wake-budget": 5.0})
        return control

    def records(self, kind):
        return [r for r in read_jsonl(self.record) if r["kind"] == kind]

    def test_a_suspended_app_is_woken_per_refresh_and_suspended_after_its_report(self):
        control = self.start("newData")
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: self.records("scheduled"), 15), "no schedule\n" + self.daemon.log_tail())
        scheduled = self.records("scheduled")[0]
        self.assertAlmostEqual(scheduled["interval"], INTERVAL, places=3)
        control.app_action("background", APP)
        self.assertTrue(wait_for(lambda: len(self.records("refresh")) >= 3, 30),
                        f"{len(self.records('refresh'))} refreshes\n" + self.daemon.log_tail(30))
        refreshes, completions = self.records("refresh"), self.records("completed")
        # Never early: each refresh comes at least one interval after the report before it.
        for before, after in zip(completions, refreshes[1:]):
            self.assertGreaterEqual(after["t"] - before["t"], INTERVAL, f"{before} -> {after}")
        self.assertTrue(all(r["attributes"]["stretch"] == 1 for r in refreshes), refreshes)
        # Each refresh after the first woke a suspended app, and its report suspended it again.
        woken = [d for d in control.log(app=APP) if d["action"] == "wake" and "app.refresh" in d["reason"]]
        self.assertGreaterEqual(len(woken), 2, control.log(app=APP))
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 10))
        info = app_info(control, APP)
        self.assertIsNotNone(info.get("nextRefresh"), info)
        self.assertAlmostEqual(info["refreshInterval"], INTERVAL, places=3)
        self.assertEqual(len({r["pid"] for r in refreshes}), 1, "one process, woken each time, not relaunched")

    def test_an_app_that_finds_nothing_is_stretched(self):
        control = self.start("noData")
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: self.records("scheduled"), 15), "no schedule\n" + self.daemon.log_tail())
        control.app_action("background", APP)
        self.assertTrue(wait_for(lambda: len(self.records("refresh")) >= 4, 40),
                        f"{len(self.records('refresh'))} refreshes\n" + self.daemon.log_tail(30))
        stretches = [r["attributes"]["stretch"] for r in self.records("refresh")[:4]]
        self.assertEqual(stretches, [1, 2, 4, 8])
        refreshes, completions = self.records("refresh"), self.records("completed")
        for k, (before, after) in enumerate(zip(completions, refreshes[1:4])):
            self.assertGreaterEqual(after["t"] - before["t"], INTERVAL * 2 ** (k + 1), f"{before} -> {after}")
        stretched = [d for d in control.log(app=APP) if d["action"] == "refresh" and "stretched" in d["reason"]]
        self.assertTrue(stretched, control.log(app=APP))

    def test_an_app_without_the_mode_is_refused(self):
        control = self.start("newData")
        with open(os.path.join(self.daemon.apps_dir, APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, REFRESH_APP, "--record", self.record, "--interval", "1"]))
        control.reload()
        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: self.records("refused"), 15), "no answer\n" + self.daemon.log_tail())
        refused = self.records("refused")[0]
        self.assertEqual(refused["code"], "invalidState")
        self.assertIn("'fetch' background mode", refused["message"])
        self.assertFalse(self.records("scheduled"))


if __name__ == "__main__":
    unittest.main()

"""`vigilctl timeline` against the real vigild and a real app: an app
launched, sent to the background, suspended and woken three times is drawn
as a lane with its suspended bands and three wake marks; the trace has its
thread and events; and the SVG renders (rsvg-convert) to a PNG kept in
$VIGIL_TEST_ARTIFACTS (default: a temporary folder) for a person to look at.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, daemon_with_app, read_jsonl, wait_for

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(REPO, ".build", "debug", "vigilctl")
APP = "org.vigil.test.timeline"
SVG = "{http://www.w3.org/2000/svg}"


@unittest.skipUnless(os.access(VIGILD, os.X_OK) and os.access(VIGILCTL, os.X_OK), "vigild/vigilctl are not built")
class TimelineTests(unittest.TestCase):
    def test_a_woken_app_is_drawn_with_its_bands_and_marks(self):
        daemon, control, record = daemon_with_app(self, "vigil-timeline-", APP, [PYTHON, FAULT_APP, "--record", "{record}"])
        root = os.path.dirname(record)

        control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "active", 15), daemon.log_tail())
        control.app_action("background", APP)
        for n in range(3):
            self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), daemon.log_tail())
            control.wake(APP, payload=f"wake {n}".encode())
            self.assertTrue(wait_for(lambda: len([r for r in read_jsonl(record) if r["kind"] == "event"]) > n, 15))
        self.assertTrue(wait_for(lambda: app_info(control, APP)["state"] == "suspended", 15), daemon.log_tail())

        svg_path, trace_path = os.path.join(root, "timeline.svg"), os.path.join(root, "timeline.json")
        for arguments in (["--output", svg_path], ["--format", "trace", "--output", trace_path]):
            result = subprocess.run([VIGILCTL, "--socket", daemon.socket, "timeline", *arguments],
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 0, result.stderr)

        tree = ElementTree.parse(svg_path)
        lanes = [g for g in tree.iter(SVG + "g") if g.get("class") == "lane"]
        self.assertEqual([g.get("data-app") for g in lanes], [APP])
        lane = lanes[0]
        suspended = [r for r in lane.iter(SVG + "rect") if r.get("class") == "band suspended"]
        marks = [g for g in lane.iter(SVG + "g") if g.get("class") == "mark" and g.get("data-action") == "wake"]
        self.assertGreaterEqual(len(suspended), 3, ElementTree.tostring(lane, encoding="unicode")[:2000])
        self.assertEqual([m.get("data-kind") for m in marks], ["test"] * 3)

        with open(trace_path) as file:
            events = json.load(file)["traceEvents"]
        threads = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
        self.assertEqual(threads, [APP])
        self.assertEqual(len([e for e in events if e.get("cat") == "wake" and e["name"] == "wake: test"]), 3)

        converter = shutil.which("rsvg-convert")
        if converter:
            artifacts = os.environ.get("VIGIL_TEST_ARTIFACTS") or tempfile.mkdtemp(prefix="vigil-artifacts-")
            os.makedirs(artifacts, exist_ok=True)
            png = os.path.join(artifacts, "timeline.png")
            subprocess.run([converter, "-o", png, svg_path], check=True, timeout=60)
            with open(png, "rb") as file:
                self.assertEqual(file.read(8), b"\x89PNG\r\n\x1a\n")
            shutil.copy(svg_path, os.path.join(artifacts, "timeline.svg"))
            print(f"\ntimeline picture: {png}")


if __name__ == "__main__":
    unittest.main()

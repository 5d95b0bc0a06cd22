"""The metrics endpoint (host tier, the real vigild): scraped over its Unix
socket and its loopback port by plain HTTP, parsed with the Prometheus
client library's own text parser, and the documented series are there with
values that follow what happened (three wakes of a real app). Bad requests
get HTTP errors and the daemon goes on. docs/observability.md.
"""

import http.client
import os
import shutil
import socket
import tempfile
import unittest

from prometheus_client.parser import text_string_to_metric_families

from fault_harness import FAULT_APP, PYTHON, VIGILD, app_info, daemon_with_app, read_jsonl, wait_for
from test_accessory_daemon import AccessoryDaemonHarness

APP = "org.vigil.test.metrics"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
class MetricsTests(unittest.TestCase):
    def setUp(self):
        scratch = tempfile.mkdtemp(prefix="vigil-metrics-socket-")
        self.addCleanup(shutil.rmtree, scratch, True)
        self.metrics_socket = os.path.join(scratch, "metrics.sock")
        self.port = free_port()
        self.daemon, self.control, self.record = daemon_with_app(
            self, "vigil-metrics-", APP, [PYTHON, FAULT_APP, "--record", "{record}"],
            extra=f'metrics-socket = "{self.metrics_socket}"\nmetrics-port = {self.port}')

    def scrape(self, connection, path="/metrics", method="GET"):
        connection.request(method, path)
        response = connection.getresponse()
        body = response.read().decode()
        connection.close()
        return response.status, response.getheader("Content-Type"), body

    def families(self, connection):
        status, content_type, body = self.scrape(connection)
        self.assertEqual(status, 200, body)
        self.assertTrue(content_type.startswith("text/plain; version=0.0.4"), content_type)
        return {family.name: family for family in text_string_to_metric_families(body)}

    def value(self, families, family, sample_name, **labels):
        for sample in families[family].samples:
            if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
        return None

    def test_the_series_follow_three_wakes_on_both_endpoints(self):
        self.control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: app_info(self.control, APP)["state"] == "active", 15), self.daemon.log_tail())
        self.control.app_action("background", APP)
        for n in range(3):
            self.assertTrue(wait_for(lambda: app_info(self.control, APP)["state"] == "suspended", 15))
            self.control.wake(APP, payload=b"x")
            self.assertTrue(wait_for(lambda: len([r for r in read_jsonl(self.record) if r["kind"] == "event"]) > n, 15))
        self.assertTrue(wait_for(lambda: app_info(self.control, APP)["state"] == "suspended", 15))

        for connection in (UnixHTTPConnection(self.metrics_socket), http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)):
            families = self.families(connection)
            self.assertEqual(self.value(families, "vigil_wakes", "vigil_wakes_total", app=APP), 3)
            self.assertGreaterEqual(self.value(families, "vigil_decisions", "vigil_decisions_total", action="suspend"), 4)
            self.assertEqual(self.value(families, "vigil_apps", "vigil_apps", state="suspended"), 1)
            self.assertEqual(self.value(families, "vigil_processing_window_seconds", "vigil_processing_window_seconds_count",
                                        app=APP), 3)
            self.assertEqual(self.value(families, "vigil_wake_to_ack_seconds", "vigil_wake_to_ack_seconds_count", app=APP), 3)
            self.assertEqual(self.value(families, "vigil_unacknowledged_events", "vigil_unacknowledged_events", app=APP), 0)

    def test_bad_requests_get_http_errors_and_the_daemon_goes_on(self):
        status, _, _ = self.scrape(UnixHTTPConnection(self.metrics_socket), path="/nope")
        self.assertEqual(status, 404)
        status, _, _ = self.scrape(UnixHTTPConnection(self.metrics_socket), method="POST")
        self.assertEqual(status, 405)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.settimeout(10)
            raw.connect(self.metrics_socket)
            raw.sendall(b"\x00garbage\r\n\r\n")
            self.assertTrue(raw.recv(100).startswith(b"HTTP/1.1 400"))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.settimeout(10)
            raw.connect(self.metrics_socket)
            raw.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000)
            self.assertTrue(raw.recv(100).startswith(b"HTTP/1.1 431"))
        # Requests answered with an error are counted by type and code.
        with self.assertRaises(Exception):
            self.control.app_action("launch", "org.example.nope")
        errors = self.families(UnixHTTPConnection(self.metrics_socket))["vigil_request_errors"]
        self.assertIn(("appAction", "unknownApp"), {(s.labels["type"], s.labels["code"]) for s in errors.samples
                                                    if s.name == "vigil_request_errors_total"})
        # A client that connects and says nothing does not hold the daemon up.
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(self.metrics_socket)
        self.addCleanup(silent.close)
        self.assertIn("vigil_apps", self.families(UnixHTTPConnection(self.metrics_socket)))
        self.assertIsNotNone(self.control.status())


class DashboardTests(unittest.TestCase):
    def test_the_dashboard_uses_only_documented_series(self):
        import json
        import re
        repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
        with open(os.path.join(repo, "dist", "grafana", "vigild-dashboard.json")) as file:
            dashboard = json.load(file)
        with open(os.path.join(repo, "docs", "observability.md")) as file:
            documented = set(re.findall(r"`(vigil_[a-z_]+)`", file.read()))
        used = set()
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                used |= {re.sub(r"_(bucket|count|sum)$", "", name) for name in re.findall(r"vigil_[a-z_]+", target["expr"])}
        self.assertTrue(used)
        self.assertEqual(used - documented, set())


if __name__ == "__main__":
    unittest.main()


class DeviceRecordTests(AccessoryDaemonHarness):
    """An accessory unplugged and plugged back: two device records in the log
    (`log` without an app) and in `devices.jsonl`, and the metrics' device
    counters follow."""

    def setUp(self):
        scratch = tempfile.mkdtemp(prefix="vigil-metrics-devices-")
        self.addCleanup(shutil.rmtree, scratch, True)
        self.metrics_socket = os.path.join(scratch, "metrics.sock")
        self.daemon_settings = f'metrics-socket = "{self.metrics_socket}"\n'
        super().setUp()

    def test_unplug_and_replug_are_recorded_and_counted(self):
        self.wait_until(lambda: self.control.accessories()["accessories"], "the accessory")
        self.device("unplug")
        self.wait_until(lambda: not self.control.accessories()["accessories"], "the unplug")
        self.device("plug")
        self.wait_until(lambda: self.control.accessories()["accessories"], "the replug")
        changes = [(d["kind"], d["change"]) for d in self.control.devices()]
        self.assertEqual(changes, [("accessory", "connected"), ("accessory", "disconnected"), ("accessory", "connected")])
        with open(os.path.join(self.dir, "state", "devices.jsonl")) as file:
            self.assertEqual(len(file.read().splitlines()), 3)
        connection = UnixHTTPConnection(self.metrics_socket)
        connection.request("GET", "/metrics")
        families = {f.name: f for f in text_string_to_metric_families(connection.getresponse().read().decode())}
        counted = {(s.labels["kind"], s.labels["change"]): s.value for s in families["vigil_device_changes"].samples
                   if s.name == "vigil_device_changes_total"}
        self.assertEqual(counted, {("accessory", "connected"): 2, ("accessory", "disconnected"): 1})

"""A gateway's data reaching the fleet's broker: the sensor logger example
(`vigil-sensor-logger --mqtt TOPIC`) under the real vigild, its sensor faked
by umockdev (accessory_testbed.py), a real Mosquitto on loopback and a
subscriber with a persistent session (mqtt_broker.py). The rig is the one
scripts/bench-fleet runs several of (fleet_rig.py).

What a pass proves: every record written to the serial sensor reaches the
broker's subscriber once the broker is reachable, in the order written,
including those the logger stored and published while the broker was down
(vigild's outbox kept them), and the logger is suspended between bursts
throughout.
"""

import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_rig  # noqa: E402
import mqtt_broker  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
BIN = os.path.dirname(VIGILD)
BINARIES = {name: os.path.join(BIN, name) for name in ("vigild", "vigilctl", "vigil-sensor-logger")}


def missing():
    for name, path in BINARIES.items():
        if not os.access(path, os.X_OK):
            return f"{name} is not built at {path}"
    if not shutil.which("umockdev-wrapper"):
        return "umockdev is not installed (apt install umockdev gir1.2-umockdev-1.0 python3-gi)"
    if not mqtt_broker.available():
        return "mosquitto and mosquitto-clients are not installed"
    return None


@unittest.skipIf(missing(), missing() or "")
class SensorLoggerExportTests(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="vigil-fleet-")
        os.chmod(self.root, 0o755)
        self.broker = mqtt_broker.Broker(self.root)
        self.broker.start()
        self.received = os.path.join(self.root, "received.txt")
        self.subscriber = mqtt_broker.Subscriber(self.broker, "fleet/#", self.received, client_id="vigil-fleet-sub")
        self.subscriber.start()
        # The subscription is in place (and kept by the broker from now on) once a probe arrives.
        self.wait_until(lambda: self.publish_probe() or "probe" in self.subscriber.payloads(), "the subscription")
        self.gateway = fleet_rig.Gateway(1, self.root, BINARIES, self.broker.port, namespace=False)

    def publish_probe(self):
        self.broker.publish("fleet/probe", "probe")
        time.sleep(0.1)

    def tearDown(self):
        self.gateway.stop()
        self.subscriber.stop()
        self.broker.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_until(self, condition, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                tail = self.gateway.log_tail() if getattr(self, "gateway", None) and self.gateway.testbed else ""
                self.fail(f"timed out waiting for {what}\n{tail}\nbroker log:\n{self.broker.log_tail()}")
            time.sleep(0.05)

    def seqs_received(self):
        """Record seqs in the order the subscriber got them (QoS 1 may repeat one)."""
        import json
        seqs = []
        for payload in self.subscriber.payloads():
            if payload != "probe":
                seqs += [record["seq"] for record in json.loads(payload)["records"]]
        return seqs

    def bursts(self, first, count, per_burst=5):
        """Writes `count` records from seq `first`, `per_burst` at a time, each
        once the logger was woken by the last and suspended again: one export
        per burst at least. (Waiting for "suspended" alone could see the state
        from before the last burst's wake, and two bursts then went as one.)"""
        self.gateway.wait_suspended()
        for at in range(first, first + count, per_burst):
            wakes = self.gateway.app()["wakes"]
            self.gateway.write_records(list(range(at, min(at + per_burst, first + count))))
            self.gateway.wait(lambda: self.gateway.app()["wakes"] > wakes, "the logger woken by the burst")
            self.gateway.wait_suspended()

    def test_records_reach_the_broker_in_order_across_a_broker_outage(self):
        self.gateway.start(direct=False)
        self.bursts(1, 20)
        self.wait_until(lambda: set(self.seqs_received()) >= set(range(1, 21)), "records 1-20 at the subscriber")

        # The broker goes away: the logger goes on storing and publishing, into vigild's outbox.
        self.subscriber.stop()
        self.broker.stop()
        self.wait_until(lambda: not self.gateway.broker_connected(), "vigild to see the broker gone")
        self.bursts(21, 20)
        self.wait_until(lambda: self.gateway.mqtt().get("outbox", 0) >= 4, "the exports of the outage in the outbox")
        self.gateway.wait_suspended()
        held = self.gateway.mqtt()
        self.assertFalse(held["connected"], held)
        self.assertEqual(set(self.seqs_received()) & set(range(21, 41)), set(), "nothing arrived while the broker was down")

        # Back: the outbox drains, in order, to the subscriber's kept session.
        self.broker.start()
        self.subscriber.start()
        self.wait_until(lambda: set(self.seqs_received()) >= set(range(1, 41)), "records 21-40 after the outage", 60)
        self.wait_until(lambda: self.gateway.mqtt().get("outbox") == 0, "an empty outbox")
        first_arrivals = list(dict.fromkeys(self.seqs_received()))
        self.assertEqual(first_arrivals, list(range(1, 41)), "every record, first seen in the order written")
        status = self.gateway.mqtt()
        self.assertEqual(status.get("refused"), 0, status)
        self.assertGreaterEqual(self.gateway.app()["wakes"], 7, "woken per burst, suspended between")

        # The logger's trace (VIGIL_LOGGER_TRACE), which scripts/bench-fleet's
        # step breakdown reads: a line per batch, its steps in their order.
        batches = self.gateway.batches()
        self.assertEqual(sum(batch["records"] for batch in batches.values()), 40, batches)
        for batch in batches.values():
            steps = [batch[name] for name in ("received", "begun", "committed", "published", "ended")]
            self.assertEqual(steps, sorted(steps), batch)


if __name__ == "__main__":
    unittest.main()

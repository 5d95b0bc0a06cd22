"""Crash points of MQTT's durable steps (issue 26, part 3; docs/reliability.md,
"Crash points"), with a real Mosquitto broker, a real app (mqtt_app.py) and
vigild SIGKILLing itself at the point; a vigild started again on the same
state without VIGIL_CRASH_POINT must lose nothing the app or the broker was
told is safe, keep the order, and duplicate only as QoS 1 allows.

- `mqtt.outbox.append` (an export's file renamed into the outbox, before the
  reply to `mqtt.publish`) and `mqtt.outbox.remove` (its unlink at the
  broker's PUBACK): the app publishes four exports; every one reaches a
  subscriber after the restart, first copies in order (a copy the app
  published again, its reply lost with the daemon, or that the outbox sent
  again, its PUBACK not yet recorded, is a duplicate QoS 1 allows).
- `mqtt.held.append` (a pushed message stored in the held spool, the app's
  queue being full) and `mqtt.held.remove` (its unlink once the queue took
  it), and `mqtt.received.commit` (Paho's stored copy of a received message
  deleted once vigild has it safe: journaled or held): six pushes to a
  force-quit app whose queue holds three; after the restart and a launch the
  app gets all six, first copies in the broker's order, duplicates only
  redelivered copies or the broker's or the store's second copy.
"""

import os
import unittest

import mqtt_broker
from fault_harness import VIGILD, app_info, read_jsonl, wait_for
import test_mqtt
from test_mqtt import APP, EXPORT, PUSH

STEP = 60.0
OUTBOX_POINTS = [(name, moment, hit) for name, hit in (("mqtt.outbox.append", 2), ("mqtt.outbox.remove", 1))
                 for moment in ("before", "after")]
HELD_POINTS = [(name, moment, hit) for name, hit in (("mqtt.held.append", 2), ("mqtt.held.remove", 1),
                                                     ("mqtt.received.commit", 2))
               for moment in ("before", "after")]


@unittest.skipUnless(os.access(VIGILD, os.X_OK), f"vigild is not built at {VIGILD}")
@unittest.skipUnless(mqtt_broker.available(), "mosquitto and mosquitto-clients are not installed (scripts/setup)")
class MQTTCrashPointTests(unittest.TestCase):
    # The broker, vigild and app set-up of test_mqtt.py: its methods only (the
    # class bound to a name of this module would run its tests here too).
    setUp = test_mqtt.MQTTTests.setUp
    start = test_mqtt.MQTTTests.start
    start_daemon = test_mqtt.MQTTTests.start_daemon
    daemon_output = test_mqtt.MQTTTests.daemon_output
    wait_connected = test_mqtt.MQTTTests.wait_connected
    events = test_mqtt.MQTTTests.events
    received_payloads = test_mqtt.MQTTTests.received_payloads
    publish_marker = test_mqtt.MQTTTests.publish_marker
    assert_only_qos1_duplicates = test_mqtt.MQTTTests.assert_only_qos1_duplicates

    def armed(self, point, **start):
        """`start` with vigild armed at `point` (only the first daemon)."""
        os.environ["VIGIL_CRASH_POINT"] = point
        try:
            self.start(**start)
        finally:
            del os.environ["VIGIL_CRASH_POINT"]

    def crashed(self, point):
        self.assertTrue(wait_for(lambda: self.daemon.process.poll() is not None, STEP),
                        f"vigild never reached {point}\n" + self.daemon.log_tail())
        self.assertIn(f"crash point {point.rsplit(':', 1)[0]}", self.daemon_output())

    def test_outbox_points(self):
        lines = []
        for name, moment, hit in OUTBOX_POINTS:
            with self.subTest(point=f"{name}:{moment}:{hit}"):
                try:
                    lines.append(self.run_outbox_point(f"{name}:{moment}:{hit}"))
                finally:
                    self.doCleanups()  # this point's broker, daemon and folder, failed or not
        print("\nMQTT outbox crash points (exports published, reached the subscriber, lost, duplicates)")
        for line in lines:
            print("  " + line)

    def run_outbox_point(self, point):
        count = 4
        self.armed(point, publish_count=count, broker_up=True)
        subscriber = mqtt_broker.Subscriber(self.broker, EXPORT, os.path.join(self.daemon.root, "sub.txt"))
        subscriber.start()
        self.addCleanup(subscriber.stop)
        self.assertTrue(wait_for(lambda: self.publish_marker(subscriber), 30), "subscriber not ready")
        self.wait_connected()
        self.control.app_action("launch", APP)
        self.crashed(point)
        self.control.close()
        self.start_daemon()
        # Adopted, the app is in the background and soon suspended: it publishes the rest in the foreground.
        self.control.app_action("foreground", APP)
        expected = [str(i) for i in range(count)]
        self.assertTrue(wait_for(lambda: set(subscriber.payloads()) >= set(expected), STEP),
                        f"{point}: got {subscriber.payloads()}\n" + self.daemon.log_tail()
                        + "\n--- app\n" + "\n".join(map(str, read_jsonl(self.record)[-12:])))
        exported = [p for p in subscriber.payloads() if p != "marker"]
        self.assertEqual(list(dict.fromkeys(exported)), expected, f"{point}: in order, nothing lost")
        outbox = os.path.join(self.daemon.root, "state", "mqtt", "outbox")
        self.assertTrue(wait_for(lambda: not os.listdir(outbox), 30), f"{point}: the outbox empties")
        return f"{point:28} published {count}, reached {len(set(exported))}, lost 0, duplicates {len(exported) - count}"

    def test_held_points(self):
        lines = []
        for name, moment, hit in HELD_POINTS:
            with self.subTest(point=f"{name}:{moment}:{hit}"):
                try:
                    lines.append(self.run_held_point(f"{name}:{moment}:{hit}"))
                finally:
                    self.doCleanups()  # this point's broker, daemon and folder, failed or not
        print("\nMQTT held-spool and store crash points (pushed, received by the app, lost, copies)")
        for line in lines:
            print("  " + line)

    def run_held_point(self, point):
        self.armed(point, extra="event-queue-limit = 3")
        self.wait_connected()
        self.control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: any(r["kind"] == "hello" for r in read_jsonl(self.record)), 30))
        self.control.app_action("quit", APP)  # force-quit: events queue, no relaunch
        self.assertTrue(wait_for(lambda: app_info(self.control, APP)["state"] == "notRunning", 30))
        sent = [f"h{i}" for i in range(6)]
        self.broker.publish_lines(PUSH + "/held", sent)
        if point.startswith("mqtt.held.remove"):
            # Removed once the queue has room: the app launched, handling its events.
            wait_for(lambda: self.daemon.process.poll() is not None
                     or len(os.listdir(os.path.join(self.daemon.root, "state", "mqtt", "held"))) == 3, STEP)
            if self.daemon.process.poll() is None:
                self.control.app_action("launch", APP)
        self.crashed(point)
        self.control.close()
        self.start_daemon()
        self.wait_connected()
        self.control.app_action("launch", APP)
        self.assertTrue(wait_for(lambda: self.received_payloads() >= set(sent), STEP),
                        f"{point}: missing {sorted(set(sent) - self.received_payloads())}\n" + self.daemon.log_tail())
        first_seen = list(dict.fromkeys(e["payload"] for e in self.events()))
        self.assertEqual(first_seen, sent, f"{point}: in the order the broker sent them")
        self.assert_only_qos1_duplicates(sent)
        store = os.path.join(self.daemon.root, "state", "mqtt", "held")
        self.assertTrue(wait_for(lambda: not os.listdir(store), 30), f"{point}: the held spool empties")
        copies = len(self.events())
        return f"{point:28} pushed {len(sent)}, received {len(set(first_seen))}, lost 0, copies {copies}"


if __name__ == "__main__":
    unittest.main()

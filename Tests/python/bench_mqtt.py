#!/usr/bin/python3
"""MQTT figures (docs/fleet.md): push latency and throughput into a running
app, and export throughput, with a real Mosquitto on loopback, for
`durability = "process"` and `"power"` in the same run (the second printed
as a ratio to the first). Prints figures; asserts nothing.

    cd Tests/python && VIGILD=../../.build/release/vigild /usr/bin/python3 bench_mqtt.py [N]
"""

import os
import statistics
import subprocess
import sys
import time
import unittest

import mqtt_broker
from fault_harness import PYTHON, connect_control, daemon_with_app, read_jsonl, wait_for

APP = "org.vigil.bench.mqtt"
MQTT_APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mqtt_app.py")


class Bench(unittest.TestCase):
    """A TestCase only for daemon_with_app's cleanups."""

    def runTest(self):
        pass


def measure(durability, count):
    case = Bench()
    try:
        command = [PYTHON, MQTT_APP, "--record", "{record}", "--publish-topic", "bench/export", "--publish-count", str(count)]
        daemon, _, record = daemon_with_app(case, "vigil-mqtt-bench-", APP, command, modes=["remote-notification"],
                                            start=False, extra=f'durability = "{durability}"\nevent-queue-limit = 100000')
        broker = mqtt_broker.Broker(os.path.join(daemon.root, "broker"))
        case.addCleanup(broker.stop)
        with open(daemon.config, "a") as config:
            config.write(f'[mqtt]\nbroker = "{broker.url}"\nclient-id = "bench-{durability}"\n')
        with open(os.path.join(daemon.apps_dir, APP + ".toml"), "a") as manifest:
            manifest.write('mqtt-topics = ["bench/push/#"]\n')
        broker.start()
        daemon.start()
        case.addCleanup(daemon.stop)
        control = connect_control(daemon.socket)
        case.addCleanup(control.close)
        wait_for(lambda: "MQTT: connected" in open(daemon.output).read(), 60)
        subscriber = mqtt_broker.Subscriber(broker, "bench/export", os.path.join(daemon.root, "sub.txt"), "bench-sub")
        subscriber.start()
        case.addCleanup(subscriber.stop)
        while not wait_for(lambda: "marker" in subscriber.payloads(), 1):
            broker.publish("bench/export", "marker")
        # Exports: the app publishes `count` messages at launch.
        control.app_action("launch", APP)
        wait_for(lambda: len([r for r in read_jsonl(record) if r["kind"] == "queued"]) >= count, 600, interval=0.01)
        queued = [r for r in read_jsonl(record) if r["kind"] == "queued"]
        wait_for(lambda: len(set(subscriber.payloads())) >= count + 1, 600, interval=0.01)
        export_done = time.monotonic()
        queue_rate = count / (queued[-1]["t"] - queued[0]["t"])
        export_rate = count / (export_done - queued[0]["t"])

        def events():
            return [r for r in read_jsonl(record) if r["kind"] == "event"]

        # Latency: one message at a time through one publisher connection.
        publisher = subprocess.Popen(
            [mqtt_broker.MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1", "-t", "bench/push/l",
             "-l"], stdin=subprocess.PIPE)
        latencies = []
        for i in range(200):
            sent = time.monotonic()
            publisher.stdin.write(f"l{i}\n".encode())
            publisher.stdin.flush()
            wait_for(lambda: len(events()) > i, 30, interval=0.0005)
            latencies.append(events()[i]["t"] - sent)
        publisher.stdin.close()
        publisher.wait()
        # Throughput: a burst of `count` pushes.
        before = len(events())
        start = time.monotonic()
        broker.publish_lines("bench/push/b", [f"b{i}" for i in range(count)])
        wait_for(lambda: len(events()) >= before + count, 300, interval=0.01)
        push_rate = count / (events()[-1]["t"] - start)
        return {"latency_median_ms": statistics.median(latencies) * 1e3,
                "latency_p95_ms": sorted(latencies)[int(len(latencies) * 0.95)] * 1e3,
                "push_per_s": push_rate, "export_queued_per_s": queue_rate, "export_delivered_per_s": export_rate}
    finally:
        case.doCleanups()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    results = {durability: measure(durability, count) for durability in ("process", "power")}
    base = results["process"]
    for durability, figures in results.items():
        print(f"durability = {durability}:", ", ".join(
            f"{name} {value:.2f}" + ("" if durability == "process" else f" (x{value / base[name]:.2f})")
            for name, value in figures.items()))


if __name__ == "__main__":
    main()

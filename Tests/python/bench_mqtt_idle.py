#!/usr/bin/python3
"""Idle wake-ups of vigild with `[mqtt]` configured and connected (docs/fleet.md,
"Threads and wake-ups"; docs/performance.md, "Idle wake-ups"): the context
switches of every vigild thread (/proc/PID/task/*/status, as
test_idle_wakeups.py counts them) over IDLE seconds, after 3 s of quiet, with
a real Mosquitto on loopback and one app subscribed. Prints figures; asserts
nothing. Give two builds to compare them in the same run.

    cd Tests/python && /usr/bin/python3 bench_mqtt_idle.py [--keepalive 60] [--idle 20] [--tls] VIGILD [VIGILD...]

`--tls`: TLS with a client certificate and a password (as test_mqtt.py).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import mqtt_broker
from test_idle_wakeups import thread_switches


def measure(vigild, keepalive, idle, tls):
    root = tempfile.mkdtemp(prefix="vigil-mqtt-idle-")
    os.makedirs(f"{root}/apps")
    password = "idle-Bench-pw"
    broker = mqtt_broker.Broker(f"{root}/broker", users={"gateway": password} if tls else None)
    broker.start()
    url, extra = broker.url, ""
    if tls:
        with open(f"{root}/mqtt-password", "w") as secret:
            secret.write(password + "\n")
        url = f"mqtts://127.0.0.1:{broker.tls_port}"
        extra = (f'username = "gateway"\npassword-file = "{root}/mqtt-password"\nca-file = "{broker.tls}/ca.crt"\n'
                 f'cert-file = "{broker.tls}/client.crt"\nkey-file = "{broker.tls}/client.key"\n')
    with open(f"{root}/vigild.toml", "w") as config:
        config.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                     f'bluetooth = false\n[mqtt]\nbroker = "{url}"\nclient-id = "vigil-idle-{os.getpid()}"\n'
                     f"keepalive = {keepalive}\n{extra}")
    with open(f"{root}/apps/org.vigil.idle.toml", "w") as manifest:
        manifest.write('id = "org.vigil.idle"\nexec = ["/bin/sleep", "1000"]\n'
                       'background-modes = ["remote-notification"]\nmqtt-topics = ["idle/#"]\n')
    with open(f"{root}/vigild.log", "w") as log:
        daemon = subprocess.Popen([vigild, "--socket", f"{root}/vigild.sock", "--config", f"{root}/vigild.toml",
                                   "--no-port-keeper"], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    output = lambda: open(f"{root}/vigild.log", errors="replace").read()  # noqa: E731
    try:
        deadline = time.monotonic() + 30
        while "MQTT: connected" not in output():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("vigild did not connect:\n" + output())
            time.sleep(0.1)
        time.sleep(3)
        before = thread_switches(daemon.pid)
        time.sleep(idle)
        after = thread_switches(daemon.pid)
        per_thread = {}
        for tid, (name, count) in after.items():
            per_thread[name] = per_thread.get(name, 0) + count - before.get(tid, (name, count))[1]
        return per_thread, output().count("MQTT: connected"), output().count("connection lost")
    finally:
        daemon.kill()
        daemon.wait()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keepalive", type=int, default=60)
    parser.add_argument("--idle", type=float, default=20)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("vigild", nargs="+")
    arguments = parser.parse_args()
    if not mqtt_broker.available():
        sys.exit("mosquitto and mosquitto-clients are not installed (scripts/setup)")
    for vigild in arguments.vigild:
        per_thread, connections, losses = measure(vigild, arguments.keepalive, arguments.idle, arguments.tls)
        total = sum(per_thread.values())
        threads = ", ".join(f"{name} {count}" for name, count in sorted(per_thread.items()))
        print(f"{vigild}: {'TLS, ' if arguments.tls else ''}keepalive {arguments.keepalive} s, {arguments.idle:.0f} s idle: {total} switches "
              f"({total / arguments.idle:.3f}/s): {threads}; connected {connections}x, lost {losses}x")


if __name__ == "__main__":
    main()

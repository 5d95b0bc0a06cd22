"""A gateway as a fleet runs it, for scripts/bench-fleet and test_fleet.py:
vigild with a broker in its `[mqtt]` config, inside a umockdev testbed whose
fake USB serial sensor the caller drives (accessory_testbed.py), and the
sensor logger example under it (`vigil-sensor-logger --mqtt fleet/NAME`),
suspended between bursts; and a `mosquitto_sub` that notes when each record
reached the broker's side.

A record is a line `seq,time,value` written to the sensor, `time` being the
wall clock when it was written. A gateway may live in a network namespace of
its own, joined to the broker by a veth pair (the benchmark), or share this
machine's (the test).
"""

import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "accessory_testbed.py")
PROTOCOL = "org.example.sensor"       # what accessory_testbed's device speaks
APP = "org.vigil.bench.fleetlogger"


def run(*command, check=True):
    return subprocess.run(command, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Gateway:
    """vigild and the logger for gateway `index`; `binaries` maps vigild,
    vigilctl and vigil-sensor-logger to their paths. With `namespace`, in a
    network namespace reaching the broker at 10.77.INDEX.1; else on this
    machine's network, reaching it at `broker_host`."""

    def __init__(self, index, root, binaries, port, namespace=True, broker_host="127.0.0.1"):
        self.index = index
        self.name = f"gw{index}"
        self.namespace = f"vigil-bench-{self.name}" if namespace else None
        self.host_address = f"10.77.{index}.1" if namespace else broker_host
        self.address = f"10.77.{index}.2"
        self.port = port
        self.dir = os.path.join(root, self.name)
        self.socket = os.path.join(self.dir, "vigild.sock")
        self.trace_path = os.path.join(self.dir, "trace.jsonl")   # the logger's step times per batch
        self.binaries = binaries
        self.testbed = None
        self.direct = None
        self.lock = threading.Lock()
        # seq -> when the testbed said it had written the record to the pty
        # (its round trip: the pty write lies between the record's time and this).
        self.fed = {}

    # -- the network namespace (benchmark only)

    def create_namespace(self):
        run("ip", "netns", "add", self.namespace)
        host, inner = f"vbf{self.index}h", f"vbf{self.index}g"
        run("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", self.namespace)
        run("ip", "addr", "add", f"{self.host_address}/30", "dev", host)
        run("ip", "link", "set", host, "up")
        run("ip", "-n", self.namespace, "addr", "add", f"{self.address}/30", "dev", inner)
        run("ip", "-n", self.namespace, "link", "set", inner, "up")
        run("ip", "-n", self.namespace, "link", "set", "lo", "up")

    def delete_namespace(self):
        if not self.namespace:
            return
        # Whatever still runs in it (an app, a port keeper) would keep the namespace and its veth alive.
        for pid in run("ip", "netns", "pids", self.namespace, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "delete", self.namespace, check=False)   # takes the veth pair with it

    def in_namespace(self, command):
        return ["ip", "netns", "exec", self.namespace, *command] if self.namespace else command

    # -- vigild and the logger

    def start(self, wait_for_broker=True, direct=True):
        """Starts vigild and the logger, and waits until the logger has its
        session and is suspended; with `direct`, also a `mosquitto_pub -l`
        publishing what `write_records` writes, as a baseline."""
        os.makedirs(os.path.join(self.dir, "apps"), exist_ok=True)
        with open(os.path.join(self.dir, "vigild.toml"), "w") as config:
            config.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                         "[timings]\nsuspend-grace = 0.2\n"
                         f'[mqtt]\nbroker = "tcp://{self.host_address}:{self.port}"\nclient-id = "vigil-bench-{self.name}"\n')
        with open(os.path.join(self.dir, "apps", f"{APP}.toml"), "w") as manifest:
            manifest.write(f'id = "{APP}"\n'
                           f'exec = {json.dumps([self.binaries["vigil-sensor-logger"], "--mqtt", f"fleet/{self.name}"])}\n'
                           'background-modes = ["external-accessory"]\n'
                           f'accessory-protocols = ["{PROTOCOL}"]\n'
                           f'environment = {{ VIGIL_LOGGER_PROTOCOL = "{PROTOCOL}", '
                           f'VIGIL_LOGGER_DB = "{self.dir}/records.sqlite", '
                           f'VIGIL_LOGGER_TRACE = "{self.trace_path}" }}\n')
        self.testbed_log = open(os.path.join(self.dir, "testbed.log"), "a")
        self.testbed = subprocess.Popen(
            self.in_namespace(["umockdev-wrapper", "/usr/bin/python3", TESTBED, "--", self.binaries["vigild"],
                               "--socket", self.socket, "--config", os.path.join(self.dir, "vigild.toml"),
                               "--on-stop", "terminate"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.testbed_log, text=True, start_new_session=True)
        if self.testbed.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{self.name}: the testbed did not start (see {self.dir}/testbed.log)")
        if wait_for_broker:
            self.wait(self.broker_connected, "vigild to connect to the broker")
        else:
            self.wait(lambda: self.status() is not None, "vigild to answer")
        self.vigilctl("launch", APP)
        self.wait(self.sessions, "the logger's session with the sensor")
        self.vigilctl("background", APP)
        self.wait_suspended()
        if direct:
            self.direct = subprocess.Popen(
                self.in_namespace(["mosquitto_pub", "-h", self.host_address, "-p", str(self.port), "-q", "1",
                                   "-t", f"direct/{self.name}", "-l", "-i", f"direct-{self.name}"]),
                stdin=subprocess.PIPE, text=True, start_new_session=True)

    def vigilctl(self, *arguments):
        result = run(self.binaries["vigilctl"], "--socket", self.socket, "--json", *arguments, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{self.name}: vigilctl {' '.join(arguments)}: {result.stderr.strip()}")
        return json.loads(result.stdout) if result.stdout.strip() else None

    def status(self):
        try:
            return self.vigilctl("status")
        except (RuntimeError, json.JSONDecodeError):
            return None

    def mqtt(self):
        """The `mqtt` member of vigild's status ({} while it cannot be had)."""
        return (self.status() or {}).get("mqtt") or {}

    def broker_connected(self):
        return bool(self.mqtt().get("connected"))

    def app(self):
        return next(a for a in self.vigilctl("apps") if a["id"] == APP)

    def sessions(self):
        return (self.vigilctl("accessories") or {}).get("sessions") or []

    def wait(self, condition, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: timed out waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_suspended(self, timeout=30):
        self.wait(lambda: self.app()["state"] == "suspended", "the logger to be suspended", timeout)

    def write_records(self, seqs, direct=True):
        """Records to the sensor in one write, and (with a direct publisher and
        `direct`) the same records to it, one message each, as it publishes a line."""
        now = time.time()
        text = "".join(f"{seq},{now:.6f},{seq % 100}\n" for seq in seqs)
        with self.lock:
            self.testbed.stdin.write(f"feed {text.encode().hex()} 30\n")
            self.testbed.stdin.flush()
            reply = self.testbed.stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError(f"{self.name}: the sensor refused a write: {reply}")
        fed = time.time()
        for seq in seqs:
            self.fed[seq] = fed
        if direct:
            self.publish_direct(seqs, now)

    def publish_direct(self, seqs, now=None):
        """The records to the direct publisher (one line, so one message, each),
        stamped `now` (default: the time of this write)."""
        if self.direct:
            now = time.time() if now is None else now
            self.direct.stdin.write("".join(json.dumps({"records": [{"seq": seq, "deviceTime": now}]}) + "\n"
                                            for seq in seqs))
            self.direct.stdin.flush()

    def batches(self):
        """The logger's trace (VIGIL_LOGGER_TRACE): one dict per batch, by its first seq."""
        batches = {}
        try:
            with open(self.trace_path) as trace:
                for line in trace:
                    try:
                        batch = json.loads(line)
                    except ValueError:
                        continue   # a torn last line
                    if batch.get("seq") is not None:
                        batches.setdefault(batch["seq"], batch)
        except FileNotFoundError:
            pass
        return batches

    def wake_times(self):
        """When vigild decided each wake of the logger (its decision log), oldest first."""
        times = []
        for name in ("decisions.jsonl.1", "decisions.jsonl"):
            try:
                with open(os.path.join(self.dir, "state", name)) as log:
                    for line in log:
                        try:
                            decision = json.loads(line)
                        except ValueError:
                            continue
                        if decision.get("app") == APP and decision.get("action") == "wake":
                            times.append(decision["time"])
            except FileNotFoundError:
                pass
        return sorted(times)

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "logs", f"{APP}.log"), errors="replace") as app_log:
                app_text = "".join(app_log.readlines()[-10:])
        except FileNotFoundError:
            app_text = "(no app log)"
        with open(os.path.join(self.dir, "testbed.log"), errors="replace") as log:
            return "".join(log.readlines()[-20:]) + "\napp log:\n" + app_text

    def stop(self):
        for process in (self.direct, self.testbed):
            if process is not None and process.poll() is None:
                try:
                    if process is self.testbed:
                        process.stdin.write("quit\n")
                        process.stdin.flush()
                        process.wait(15)
                    else:
                        process.stdin.close()
                        process.wait(5)
                except (OSError, subprocess.TimeoutExpired):
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            for pipe in (process.stdin, process.stdout) if process is not None else ():
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
        if self.testbed is not None:
            self.testbed_log.close()
        self.direct = self.testbed = None


class Subscriber:
    """mosquitto_sub on fleet/# and direct/# at 127.0.0.1:`port`: per topic,
    when each record arrived, and every record in arrival order."""

    def __init__(self, port):
        self.arrivals = {}   # topic -> {seq: (arrival wall time, deviceTime)}
        self.order = {}      # topic -> [seq, ...] as they arrived, repeats included
        self.messages = {}   # topic -> count
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", "fleet/#", "-t", "direct/#", "-v"],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            arrived = time.time()
            topic, _, payload = line.rstrip("\n").partition(" ")
            try:
                records = json.loads(payload)["records"]
            except (ValueError, KeyError):
                continue
            with self.lock:
                self.messages[topic] = self.messages.get(topic, 0) + 1
                seen = self.arrivals.setdefault(topic, {})
                for record in records:
                    seen.setdefault(record["seq"], (arrived, record["deviceTime"]))
                    self.order.setdefault(topic, []).append(record["seq"])

    def count(self, topic, seqs):
        with self.lock:
            seen = self.arrivals.get(topic, {})
            return sum(1 for seq in seqs if seq in seen)

    def arrived_in_order(self, topic):
        with self.lock:
            return list(self.order.get(topic, []))

    def latencies(self, topic, seqs):
        with self.lock:
            seen = self.arrivals.get(topic, {})
            return [seen[seq][0] - seen[seq][1] for seq in seqs if seq in seen]

    def times(self, topic):
        """seq -> (arrival wall time, write time) for `topic`."""
        with self.lock:
            return dict(self.arrivals.get(topic, {}))

    def last_arrival(self, topic, seqs):
        with self.lock:
            seen = self.arrivals.get(topic, {})
            return max(seen[seq][0] for seq in seqs if seq in seen)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(5)


class WireTap:
    """The MQTT PUBLISH packets a gateway sends to the broker, seen on the
    host's end of its veth pair with the kernel's receive timestamp (a packet
    socket, SO_TIMESTAMPNS): per topic, when each record's PUBLISH crossed the
    wire. It splits a record's latency into the gateway's part (write to wire)
    and the broker's (wire to subscriber), for vigild and the direct publisher
    alike. Benchmark only (root, a namespace's veth)."""

    SO_TIMESTAMPNS = 35
    ETH_P_ALL = 0x0003
    SEQ = re.compile(rb'"seq":\s*(\d+)')

    def __init__(self, interface, port):
        self.port = port
        self.arrivals = {}   # topic -> {seq: wire time}
        self.lock = threading.Lock()
        self.socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(self.ETH_P_ALL))
        self.socket.setsockopt(socket.SOL_SOCKET, self.SO_TIMESTAMPNS, 1)
        self.socket.bind((interface, 0))
        self.stopping = False
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        while not self.stopping:
            if not select.select([self.socket], [], [], 0.2)[0]:
                continue
            frame, ancillary, _, _ = self.socket.recvmsg(65536, socket.CMSG_SPACE(16))
            stamp = None
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == self.SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    stamp = seconds + nanoseconds / 1e9
            self.parse(frame, stamp if stamp is not None else time.time())

    def parse(self, frame, stamp):
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00" or frame[14 + 9] != 6:   # IPv4, TCP
            return
        ip_length = (frame[14] & 0x0F) * 4
        tcp = frame[14 + ip_length:]
        if len(tcp) < 20 or struct.unpack("!H", tcp[2:4])[0] != self.port:
            return
        payload = tcp[(tcp[12] >> 4) * 4:]
        # One segment may hold several MQTT packets; each PUBLISH names its
        # topic: the records after a topic are that topic's.
        at = 0
        while at < len(payload):
            kind = payload[at] >> 4
            length, shift, at_length = 0, 0, at + 1
            while at_length < len(payload):
                byte = payload[at_length]
                length |= (byte & 0x7F) << shift
                shift += 7
                at_length += 1
                if not byte & 0x80:
                    break
            body = payload[at_length:at_length + length]
            if kind == 3 and len(body) >= 2:
                topic_length = struct.unpack("!H", body[:2])[0]
                topic = body[2:2 + topic_length].decode(errors="replace")
                with self.lock:
                    seen = self.arrivals.setdefault(topic, {})
                    for match in self.SEQ.finditer(body):
                        seen.setdefault(int(match.group(1)), stamp)
            at = at_length + length

    def times(self, topic):
        with self.lock:
            return dict(self.arrivals.get(topic, {}))

    def stop(self):
        self.stopping = True
        self.thread.join(2)
        self.socket.close()

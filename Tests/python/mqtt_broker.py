"""A real Mosquitto broker on loopback for test_mqtt.py, and its command-line
clients (Debian's `mosquitto` and `mosquitto-clients`).

The broker listens on a free port of 127.0.0.1 with `persistence true` in
its own folder, so a restart (SIGTERM, then start again on the same port)
keeps persistent sessions and their queued QoS 1 messages.
"""

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"


def available():
    return all(os.access(path, os.X_OK) for path in (MOSQUITTO, MOSQUITTO_PUB, MOSQUITTO_SUB))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_tls_files(folder):
    """A CA, a server certificate for 127.0.0.1 and a client certificate
    (openssl), in `folder`: ca.crt, server.crt/.key, client.crt/.key."""
    def run(*arguments):
        subprocess.run(["openssl", *arguments], check=True, cwd=folder, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=vigil test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    with open(os.path.join(folder, "san.ext"), "w") as ext:
        ext.write("subjectAltName = IP:127.0.0.1\n")
    for name, extra in (("server", ["-extfile", "san.ext"]), ("client", [])):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=vigil test {name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-out", f"{name}.crt", *extra)


class Broker:
    def __init__(self, root, users=None):
        """`users` ({name: password}): a second listener with TLS, client
        certificates required and these users only (`tls_port`)."""
        self.root = root
        self.port = free_port()
        self.tls_port = None
        self.config = os.path.join(root, "mosquitto.conf")
        self.log = os.path.join(root, "mosquitto.log")
        os.makedirs(os.path.join(root, "db"), exist_ok=True)
        with open(self.config, "w") as config:
            config.write("persistence true\n"
                         f"persistence_location {os.path.join(root, 'db')}/\nmax_queued_messages 100000\n"
                         "max_inflight_messages 20\n"
                         # As root, mosquitto would switch to the user "mosquitto", which cannot
                         # write its persistence file into this test's folder.
                         f"user {getpass.getuser()}\n"
                         "per_listener_settings true\n"
                         f"listener {self.port} 127.0.0.1\nallow_anonymous true\n")
            if users:
                self.tls_port = free_port()
                self.tls = os.path.join(root, "tls")
                os.makedirs(self.tls, exist_ok=True)
                make_tls_files(self.tls)
                passwords = os.path.join(root, "passwords")
                open(passwords, "w").close()
                for name, password in users.items():
                    subprocess.run(["mosquitto_passwd", "-b", passwords, name, password], check=True)
                config.write(f"listener {self.tls_port} 127.0.0.1\nallow_anonymous false\n"
                             f"password_file {passwords}\ncafile {self.tls}/ca.crt\n"
                             f"certfile {self.tls}/server.crt\nkeyfile {self.tls}/server.key\n"
                             "require_certificate true\n")
        self.process = None

    @property
    def url(self):
        return f"tcp://127.0.0.1:{self.port}"

    def start(self):
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([MOSQUITTO, "-c", self.config], stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("mosquitto did not listen within 20 s:\n" + self.log_tail())

    def stop(self):
        """SIGTERM: mosquitto saves its persistence file and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self):
        self.stop()
        self.start()

    def publish(self, topic, payload, client_id="vigil-test-pub"):
        """Publishes with QoS 1; returns once the broker has acknowledged it."""
        subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.port), "-q", "1", "-i", client_id, "-t", topic,
                        "-m", payload], check=True, timeout=30, stdin=subprocess.DEVNULL)

    def publish_lines(self, topic, payloads, client_id="vigil-test-pub"):
        """Publishes each payload with QoS 1 through one connection (`-l`)."""
        subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(self.port), "-q", "1", "-i", client_id, "-t", topic,
                        "-l"], input="".join(p + "\n" for p in payloads).encode(), check=True, timeout=60)

    def log_tail(self, lines=20):
        try:
            with open(self.log, errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return "(no broker log)"


class Subscriber:
    """mosquitto_sub with a persistent session (clean session off, QoS 1): it
    is queued for by the broker while it or the broker is away, and writes
    one "topic payload" line per message to a file."""

    def __init__(self, broker, topic, path, client_id="vigil-test-sub"):
        self.broker, self.topic, self.path, self.client_id = broker, topic, path, client_id
        self.process = None

    def start(self):
        self.output = open(self.path, "ab")
        self.process = subprocess.Popen(
            [MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(self.broker.port), "-q", "1", "-c", "-i", self.client_id,
             "-t", self.topic, "-F", "%t %p"], stdin=subprocess.DEVNULL, stdout=self.output,
            stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None
            self.output.close()

    def payloads(self):
        try:
            with open(self.path, errors="replace") as lines:
                return [line.rstrip("\n").split(" ", 1)[1] for line in lines if " " in line]
        except OSError:
            return []

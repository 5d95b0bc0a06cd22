"""vigilctl's output, byte for byte, against golden files (issue 32: vigilctl
left Foundation for FoundationEssentials; its dates, durations and JSON must
print as before).

A golden case is one vigilctl run: its arguments, time zone, exit status and
the frames it exchanged with a daemon. `record` runs each case through a
recording proxy in front of a real vigild (with the Swift demo app) or the
accessory stand-in of fake_daemon.py, and writes golden/vigilctl/cases.json;
then it replays every case (below) and writes NAME.stdout and NAME.stderr.
`ReplayDaemon` answers a vigilctl with the recorded daemon frames, in order
(each request's reply after that request), so the output depends on nothing
but vigilctl: the times in the log are the recorded ones, the time zone is
the case's.

    VIGILD=.build/debug/vigild VIGIL_DEMO_APP=.build/debug/vigil-demo-app \\
        /usr/bin/python3 Tests/python/vigilctl_golden.py record

The golden files were recorded with the vigilctl of main before the change
(it linked Foundation); test_vigilctl_cli.GoldenOutputTests compares today's.
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import FrameDecoder, encode_frame  # noqa: E402

GOLDEN = os.path.join(HERE, "golden", "vigilctl")
CASES = os.path.join(GOLDEN, "cases.json")
# Frames from a daemon may be large (docs/protocol.md, "Frames").
FROM_DAEMON = dict(max_header=16 << 20, max_body=1 << 20)


def read_frames(sock, decoder):
    """The next frames on sock (an empty list at its end)."""
    while True:
        data = sock.recv(65536)
        if not data:
            return []
        decoder.feed(data)
        frames = []
        while (message := decoder.next_message()) is not None:
            frames.append(message)
        if frames:
            return frames


class ReplayDaemon:
    """Serves one recorded conversation to each connection: after each frame
    the client sends, the daemon frames that followed it in the recording;
    after the last ones, the end of the connection (as the daemon's end was
    recorded, or vigilctl's own)."""

    def __init__(self, path, frames):
        self.path = path
        self.frames = frames
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.listener.close()

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        # Group the recording: the daemon frames after each client frame.
        answers = []
        ends = [direction for direction, _, _ in self.frames if direction.endswith("-end")]
        daemon_ends = ends[:1] == ["daemon-end"]
        for direction, header, body in self.frames:
            if direction == "client":
                answers.append((header, []))
            elif direction == "daemon" and answers:
                answers[-1][1].append((header, base64.b64decode(body)))
        decoder = FrameDecoder(max_header=65536, max_body=1 << 20)
        pending = []
        try:
            for recorded, replies in answers:
                while not pending:
                    messages = read_frames(sock, decoder)
                    if not messages:
                        return
                    pending += messages
                message = pending.pop(0)
                ids = {recorded.get("id"): message.header.get("id")}
                for header, body in replies:
                    if header.get("id") is not None and header["id"] in ids:
                        header = dict(header, id=ids[header["id"]])
                    sock.sendall(encode_frame(header, body))
            # Everything recorded was sent: the daemon's end of the
            # connection if it came first, else vigilctl's.
            if daemon_ends:
                sock.shutdown(socket.SHUT_RDWR)
                return
            while read_frames(sock, decoder):
                pass
        except OSError:
            pass
        finally:
            sock.close()


def run_vigilctl(vigilctl, socket_path, case, timeout=60):
    env = dict(os.environ, TZ=case["tz"], LC_ALL="C.UTF-8")
    env.pop("VIGIL_SOCKET", None)
    return subprocess.run([vigilctl, "--socket", socket_path] + case["args"], capture_output=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def replay(vigilctl, case, folder):
    """vigilctl's result against the case's recorded daemon."""
    path = os.path.join(folder, f"replay-{case['name']}.sock")
    daemon = ReplayDaemon(path, case["frames"])
    try:
        return run_vigilctl(vigilctl, path, case)
    finally:
        daemon.close()
        os.unlink(path)


def load_cases():
    with open(CASES) as file:
        return json.load(file)


def golden(name, stream):
    with open(os.path.join(GOLDEN, f"{name}.{stream}"), "rb") as file:
        return file.read()


# -- recording ---------------------------------------------------------------

class RecordingProxy:
    """Passes frames between vigilctl and a daemon, keeping them in order."""

    def __init__(self, path, upstream):
        self.path = path
        self.upstream = upstream
        self.frames = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def take(self):
        with self.lock:
            frames, self.frames = self.frames, []
            return frames

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect(self.upstream)
            threading.Thread(target=self._pump, args=(client, daemon, "client", FrameDecoder()), daemon=True).start()
            threading.Thread(target=self._pump, args=(daemon, client, "daemon", FrameDecoder(**FROM_DAEMON)),
                             daemon=True).start()

    def _pump(self, source, sink, direction, decoder):
        try:
            while messages := read_frames(source, decoder):
                with self.lock:
                    for message in messages:
                        self.frames.append([direction, message.header, base64.b64encode(message.body).decode()])
                    for message in messages:
                        sink.sendall(encode_frame(message.header, message.body))
        except OSError:
            pass
        with self.lock:
            self.frames.append([direction + "-end", None, None])
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def record():
    vigild = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
    vigilctl = os.environ.get("VIGILCTL") or os.path.join(os.path.dirname(vigild), "vigilctl")
    demo = os.environ.get("VIGIL_DEMO_APP") or os.path.join(os.path.dirname(vigild), "vigil-demo-app")
    sys.path.insert(0, HERE)
    from fake_daemon import FakeDaemon

    folder = tempfile.mkdtemp(prefix="vigil-golden-")
    os.makedirs(f"{folder}/apps")
    real = f"{folder}/vigild.sock"
    with open(f"{folder}/vigild.toml", "w") as file:
        file.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                   'bluetooth = false\n')
    with open(f"{folder}/apps/org.vigil.demo.toml", "w") as file:
        file.write(f'id = "org.vigil.demo"\nexec = {json.dumps([demo])}\nbackground-modes = []\n\n'
                   '[environment]\nVIGIL_DEMO_TASK_SECONDS = "0.5"\n')
    log = open(f"{folder}/vigild.log", "w")
    process = subprocess.Popen([vigild, "--socket", real, "--config", f"{folder}/vigild.toml", "--no-port-keeper"],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    while not os.path.exists(real):
        assert process.poll() is None, "vigild exited"
        time.sleep(0.05)
    accessories = FakeDaemon(f"{folder}/fake.sock")
    proxies = {"vigild": RecordingProxy(f"{folder}/proxy.sock", real),
               "fake": RecordingProxy(f"{folder}/fake-proxy.sock", f"{folder}/fake.sock")}
    cases = []

    def case(name, *args, tz="Asia/Kolkata", daemon="vigild"):
        proxy = proxies[daemon]
        entry = {"name": name, "args": list(args), "tz": tz}
        result = run_vigilctl(vigilctl, proxy.path, entry)
        time.sleep(0.2)  # the proxy's last frames
        entry["exit"] = result.returncode
        entry["frames"] = proxy.take()
        cases.append(entry)
        print(f"{name}: exit {result.returncode}, {len(entry['frames'])} frames")
        return result

    def state():
        result = run_vigilctl(vigilctl, real, {"args": ["--json", "apps"], "tz": "UTC"})
        return next(app for app in json.loads(result.stdout) if app["id"] == "org.vigil.demo")["state"]

    def wait(wanted):
        while state() != wanted:
            time.sleep(0.1)

    try:
        case("reload", "reload")
        case("reload-json", "reload", "--json")
        case("launch", "launch", "org.vigil.demo")
        wait("active")
        case("background-json", "background", "org.vigil.demo", "--json")
        wait("suspended")
        case("wake", "wake", "org.vigil.demo", "--payload", "hello")
        wait("suspended")
        case("wake-json", "wake", "org.vigil.demo", "--attribute", "count=3", "--attribute", "name=x/y",
             "--payload", "é/ü", "--json")
        wait("suspended")
        case("apps", "apps")
        case("apps-json", "apps", "--json")
        case("status", "status")
        case("status-json", "status", "--json")
        case("log", "log")
        case("log-new-york", "log", tz="America/New_York")
        case("log-utc", "log", "--app", "org.vigil.demo", tz="UTC")
        case("log-limit-json", "log", "--limit", "4", "--json")
        case("unknown-app", "launch", "org.example.none")
        case("unknown-app-json", "wake", "org.example.none", "--json")
        case("ble-peripherals-json", "ble", "devices", "--json")
        case("ble-state", "ble", "state")
        case("accessories", "accessories", daemon="fake")
        case("accessories-json", "accessories", "--json", daemon="fake")
        case("accessories-watch-json", "accessories", "watch", "--json", daemon="fake")
        case("quit-json", "quit", "org.vigil.demo", "--json")
    finally:
        process.terminate()
        process.wait()
        accessories.close()
        log.close()

    # Paths of this recording's temporary folder read the same in every replay.
    text = json.dumps(cases, indent=1, ensure_ascii=False).replace(folder, "/tmp/vigil-golden")
    os.makedirs(GOLDEN, exist_ok=True)
    with open(CASES, "w") as file:
        file.write(text + "\n")
    for entry in load_cases():
        result = replay(vigilctl, entry, folder)
        assert result.returncode == entry["exit"], (entry["name"], result.returncode, result.stderr)
        for stream, data in (("stdout", result.stdout), ("stderr", result.stderr)):
            with open(os.path.join(GOLDEN, f"{entry['name']}.{stream}"), "wb") as file:
                file.write(data)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {len(cases)} cases to {GOLDEN}")


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    record()

"""vigild under systemd (docs/systemd.md), with real vigild processes and no systemd.

The test plays the service manager's part with the same kernel objects:

- `Type=notify`: a datagram socket bound by the test is vigild's
  `$NOTIFY_SOCKET` (a path, and an abstract `@name`). READY=1 comes only once
  the control socket accepts (the test connects on READY=1 without retrying),
  with a STATUS= line; STATUS= changes when an app's state does;
  RELOADING=1/READY=1 bracket a SIGHUP; STOPPING=1 comes on SIGTERM. Nothing
  leaks to apps: their environment has none of the variables.
- the watchdog: with `$WATCHDOG_USEC` WATCHDOG=1 datagrams arrive (counted,
  not timed); without it, or with `$WATCHDOG_PID` naming another process, none.
- socket activation: the test binds and listens like `vigild.socket`, and
  passes the socket as fd 3 with LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES. A client
  that connected before vigild started is served; vigild stopped, the socket
  file stays, a client connecting meanwhile waits and is served by the next
  vigild. A passed descriptor that does not listen is refused with the reason.
- logging for journald: with `$JOURNAL_STREAM` naming vigild's stderr (a
  socket here), lines start with `<N>` priorities and carry no timestamp;
  lines about an app carry `app=ID`.
- app output: with `app-output = "journal"`, each launch gets a stream into
  the journal socket with the app id as identifier (a fake journald, seen by
  vigild at /run/systemd/journal/stdout through a private mount namespace:
  skipped where `unshare` cannot make one); with files, a file past
  `app-log-size` is rotated at launch.

    cd Tests/python && VIGILD=../../.build/debug/vigild /usr/bin/python3 -m unittest test_systemd -v
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from vigil_client import ControlClient, VigilError  # noqa: E402

VIGILD = os.environ.get("VIGILD") or os.path.join(REPO, ".build", "debug", "vigild")
APP = "org.vigil.test.systemd"
# An app that says where its output goes, then waits.
APP_SCRIPT = 'echo "hello from the app"; echo "<3>an error from the app" >&2; echo "JOURNAL_STREAM=${JOURNAL_STREAM-unset}"; exec sleep 1000'
SYSTEMD_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def unshare_works():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /run"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


@unittest.skipUnless(os.path.exists(VIGILD), f"vigild is not built at {VIGILD}")
class SystemdTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vigil-systemd-")
        os.makedirs(f"{self.dir}/apps")
        self.socket = f"{self.dir}/vigild.sock"
        self.daemons = []
        self.sockets = []

    def tearDown(self):
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        for pid in self.app_pids():
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except ProcessLookupError:
                    pass
        for sock in self.sockets:
            sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # Helpers

    def write_config(self, extra="", manifest=True):
        with open(f"{self.dir}/vigild.toml", "w") as config:
            config.write('manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\nsuspension = "signal"\n'
                         "bluetooth = false\n" + extra)
        if manifest:
            with open(f"{self.dir}/apps/app.toml", "w") as file:
                file.write(f'id = "{APP}"\nexec = ["/bin/sh", "-c", \'{APP_SCRIPT}\']\n')

    def start(self, env_extra=None, wrapper=None, pass_fds=(), stderr=None, unset=()):
        env = {k: v for k, v in os.environ.items() if k not in SYSTEMD_VARIABLES + ("JOURNAL_STREAM",) + tuple(unset)}
        env.update(env_extra or {})
        command = [VIGILD, "--socket", self.socket, "--config", f"{self.dir}/vigild.toml", "--no-port-keeper"]
        log = open(f"{self.dir}/vigild-{len(self.daemons)}.log", "w")
        daemon = subprocess.Popen((wrapper or []) + command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=stderr if stderr is not None else log, pass_fds=pass_fds)
        log.close()
        self.daemons.append(daemon)
        return daemon

    def log(self, index=-1):
        path = f"{self.dir}/vigild-{index if index >= 0 else len(self.daemons) - 1}.log"
        with open(path) as log:
            return log.read()

    def notify_socket(self, abstract=False):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"vigil-test-notify-{os.getpid()}-{time.monotonic_ns()}"
            sock.bind("\0" + name)
            address = "@" + name
        else:
            address = f"{self.dir}/notify"
            sock.bind(address)
        self.sockets.append(sock)
        return sock, address

    def receive(self, sock, daemon, timeout=20):
        """The next notification datagram as {VARIABLE: value}."""
        sock.settimeout(timeout)
        try:
            data = sock.recv(4096).decode()
        except socket.timeout:
            self.fail(f"no notification within {timeout} s (vigild {'exited ' + str(daemon.poll()) if daemon.poll() is not None else 'running'})\n{self.log()}")
        return dict(line.split("=", 1) for line in data.splitlines() if line)

    def receive_until(self, sock, daemon, variable):
        """Notifications up to and including the first that sets `variable`."""
        seen = []
        while True:
            message = self.receive(sock, daemon)
            seen.append(message)
            if variable in message:
                return seen

    def drain(self, sock, seconds):
        """Every datagram that arrives within `seconds` (a count over a window, not a timing)."""
        sock.settimeout(0.1)
        messages, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                messages.append(sock.recv(4096).decode())
            except socket.timeout:
                pass
        return messages

    def wait_until(self, condition, what, timeout=20):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def app(self, control):
        return next(a for a in control.apps() if a["id"] == APP)

    def app_pids(self):
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/environ", "rb") as environ:
                        if f"VIGIL_SOCKET={self.socket}\0".encode() in environ.read():
                            pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def launch_app(self, control):
        """Launches the app (a shell script, not a Vigil client: it stays inactive) and returns its pid."""
        control.app_action("launch", APP)
        self.wait_until(lambda: self.app(control).get("pid"), "the app started")
        return self.app(control)["pid"]

    def stop(self, daemon, expect_status=0):
        daemon.send_signal(signal.SIGTERM)
        self.assertEqual(daemon.wait(timeout=30), expect_status, self.log())

    @staticmethod
    def environment_of(pid):
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)

    # Type=notify

    def test_ready_only_once_listening_then_status_reload_stop(self):
        self.write_config()
        sock, address = self.notify_socket()
        daemon = self.start({"NOTIFY_SOCKET": address})
        ready = self.receive(sock, daemon)
        self.assertEqual(ready.get("READY"), "1", ready)
        # On READY=1 the socket must accept at once: no retry here.
        with ControlClient(self.socket) as control:
            self.assertEqual(control.status()["apps"], 1)
            self.assertEqual(ready.get("STATUS"), "1 apps (0 running, 0 suspended), 0 sessions, Bluetooth: off")

            # A state change updates STATUS=.
            pid = self.launch_app(control)
            statuses = [m["STATUS"] for m in self.receive_until(sock, daemon, "STATUS")]
            while "1 running" not in statuses[-1]:
                statuses.append(self.receive(sock, daemon).get("STATUS", ""))
            self.assertEqual(statuses[-1], "1 apps (1 running, 0 suspended), 0 sessions, Bluetooth: off")

        # The app inherits none of systemd's variables.
        environment = self.environment_of(pid)
        for variable in SYSTEMD_VARIABLES:
            self.assertNotIn(variable.encode(), environment, f"{variable} leaked to the app")

        # SIGHUP: RELOADING=1, then READY=1 again.
        daemon.send_signal(signal.SIGHUP)
        reloading = self.receive(sock, daemon)
        self.assertEqual(reloading.get("RELOADING"), "1", reloading)
        self.assertRegex(reloading.get("MONOTONIC_USEC", ""), r"^\d+$")
        self.assertEqual(self.receive(sock, daemon).get("READY"), "1")

        # No watchdog asked for: no keep-alives.
        self.assertEqual([m for m in self.drain(sock, 1.0) if "WATCHDOG" in m], [])

        daemon.send_signal(signal.SIGTERM)
        stopping = self.receive(sock, daemon)
        self.assertEqual(stopping.get("STOPPING"), "1", stopping)
        self.assertEqual(daemon.wait(timeout=30), 0, self.log())

    def test_abstract_notify_socket(self):
        self.write_config(manifest=False)
        sock, address = self.notify_socket(abstract=True)
        daemon = self.start({"NOTIFY_SOCKET": address})
        self.assertEqual(self.receive(sock, daemon).get("READY"), "1")
        self.stop(daemon)

    def test_watchdog_keepalives_only_when_asked_for_this_process(self):
        self.write_config(manifest=False)
        sock, address = self.notify_socket()
        daemon = self.start({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000"})
        self.assertEqual(self.receive(sock, daemon).get("READY"), "1")
        for _ in range(3):
            self.assertEqual(self.receive(sock, daemon), {"WATCHDOG": "1"})
        self.assertIn("WATCHDOG=1 every 0.05 seconds", self.log())
        self.stop(daemon)

        # WATCHDOG_PID naming another process (inherited): not ours, no keep-alives.
        self.drain(sock, 0.2)
        daemon = self.start({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"})
        self.assertEqual(self.receive(sock, daemon).get("READY"), "1")
        self.assertEqual([m for m in self.drain(sock, 1.0) if "WATCHDOG" in m], [])
        self.stop(daemon)

    def test_bad_systemd_variables_are_refused_with_the_reason(self):
        self.write_config(manifest=False)
        for env, expected in [
            ({"WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC='soon' is not a positive number of microseconds"),
            ({"NOTIFY_SOCKET": "relative/path"}, "NOTIFY_SOCKET='relative/path' is neither an absolute path"),
            ({"LISTEN_FDS": "x", "LISTEN_PID": "1"}, "LISTEN_FDS='x' is not a number of descriptors"),
        ]:
            daemon = self.start(env)
            self.assertNotEqual(daemon.wait(timeout=30), 0)
            self.assertIn(expected, self.log())

    # Socket activation

    def activation_wrapper(self, fd):
        """bash moves the listener to fd 3 and sets LISTEN_PID to its own pid,
        which exec keeps for vigild, as systemd does after its fork (bash:
        dash takes only one-digit descriptors in redirections)."""
        move = "" if fd == 3 else f" 3<&{fd} {fd}<&-"
        script = f'export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=vigild.socket; exec "$0" "$@"{move}'
        return ["/bin/bash", "-c", script]

    def listening_socket(self):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.socket)
        listener.listen(16)
        self.sockets.append(listener)
        return listener

    def status_in_thread(self):
        """Connects now (the connection waits in the backlog) and asks for status."""
        result = {}
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(self.socket)  # succeeds with nobody accepting yet
        client.close()

        def run():
            try:
                with ControlClient(self.socket, timeout=60) as control:
                    result["status"] = control.status()
            except (OSError, VigilError) as error:
                result["error"] = error
        thread = threading.Thread(target=run)
        thread.start()
        return thread, result

    def test_socket_activation_clients_wait_across_a_restart(self):
        self.write_config()
        listener = self.listening_socket()
        sock, address = self.notify_socket()

        # A client connecting before any vigild runs waits, then is served.
        thread, result = self.status_in_thread()
        time.sleep(0.2)  # let it connect and send its hello before vigild exists
        daemon = self.start({"NOTIFY_SOCKET": address}, wrapper=self.activation_wrapper(listener.fileno()),
                            pass_fds=(listener.fileno(),))
        thread.join(60)
        self.assertIn("status", result, f"{result}\n{self.log()}")
        self.assertEqual(result["status"]["socket"], self.socket)
        self.assertEqual(self.receive(sock, daemon).get("READY"), "1")
        with ControlClient(self.socket) as control:
            pid = self.launch_app(control)
        environment = self.environment_of(pid)
        for variable in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            self.assertNotIn(variable.encode(), environment)
        self.assertFalse(os.path.exists(f"/proc/{pid}/fd/3"), "the app has no fd 3")

        # Stopped, vigild leaves the socket file (it is the socket unit's).
        self.stop(daemon)
        self.assertTrue(os.path.exists(self.socket), "the passed socket's file is left in place")

        # During the "restart", a client connects and waits; the next vigild serves it.
        thread, result = self.status_in_thread()
        time.sleep(0.2)
        daemon = self.start(wrapper=self.activation_wrapper(listener.fileno()), pass_fds=(listener.fileno(),))
        thread.join(60)
        self.assertIn("status", result, f"{result}\n{self.log()}")
        self.stop(daemon)

    def test_a_passed_descriptor_that_does_not_listen_is_refused(self):
        self.write_config(manifest=False)
        unbound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sockets.append(unbound)
        daemon = self.start(wrapper=self.activation_wrapper(unbound.fileno()), pass_fds=(unbound.fileno(),))
        self.assertNotEqual(daemon.wait(timeout=30), 0)
        self.assertIn("the passed descriptor 3 cannot be the listening socket: it does not listen", self.log())
        self.assertFalse(os.path.exists(self.socket), "vigild does not bind a socket of its own instead")

    # Logging

    def test_journal_log_format_when_stderr_is_the_journal(self):
        self.write_config('app-output = "files"\n')
        with open(f"{self.dir}/apps/broken.toml", "w") as broken:
            broken.write('id = "org.vigil.test.broken"\n')  # no exec: rejected, logged as an error
        journal, stderr = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sockets += [journal, stderr]
        info = os.fstat(stderr.fileno())
        daemon = self.start({"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"}, stderr=stderr)
        stderr.close()
        received = []
        reader = threading.Thread(target=lambda: received.extend(iter(lambda: journal.recv(65536), b"")))
        reader.start()
        with self.control(daemon) as control:
            self.launch_app(control)
        self.stop(daemon)
        reader.join(30)
        lines = b"".join(received).decode().splitlines()
        self.assertTrue(lines, "vigild logged nothing")
        for line in lines:
            self.assertRegex(line, r"^<[0-7]>", f"no priority prefix: {line!r}")
            self.assertNotRegex(line, r"\d{4}-\d\d-\d\dT\d\d:\d\d", f"a timestamp of its own: {line!r}")
        self.assertTrue(any(line.startswith("<3>manifest rejected") for line in lines), lines)
        self.assertTrue(any(line.startswith("<5>") and "listening" in line for line in lines), lines)
        about_app = [line for line in lines if f"launch {APP}" in line]
        self.assertTrue(about_app and all(f"app={APP}" in line for line in about_app), lines)

    def control(self, daemon):
        """A control connection, retried until vigild answers (where READY=1 is not what is tested)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                return ControlClient(self.socket)
            except (OSError, VigilError):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    self.fail(f"vigild did not answer\n{self.log()}")
                time.sleep(0.05)

    def test_log_format_unchanged_when_stderr_is_not_the_journal(self):
        self.write_config(manifest=False)
        daemon = self.start({"JOURNAL_STREAM": "1:1"})  # inherited, names another file
        self.control(daemon).close()
        self.stop(daemon)
        self.assertRegex(self.log(), r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* notice vigild: .*listening")

    # App output

    def test_app_output_file_rotated_at_launch_past_its_size(self):
        self.write_config('app-output = "files"\napp-log-size = 65536\n')
        os.makedirs(f"{self.dir}/logs")
        with open(f"{self.dir}/logs/{APP}.log", "w") as old:
            old.write("x" * 70000)
        daemon = self.start()
        with self.control(daemon) as control:
            self.launch_app(control)
            info = self.app(control)
        self.assertEqual((info["logPath"], info["journalIdentifier"]), (f"{self.dir}/logs/{APP}.log", None), info)
        def output():
            with open(f"{self.dir}/logs/{APP}.log") as file:
                return file.read()
        self.wait_until(lambda: "JOURNAL_STREAM=" in output(), "the app's output")
        self.assertEqual(os.path.getsize(f"{self.dir}/logs/{APP}.log.1"), 70000)
        text = output()
        self.assertTrue(text.startswith("--- "), text)
        self.assertIn("hello from the app\n", text)
        self.assertIn("JOURNAL_STREAM=unset\n", text)
        self.stop(daemon)

    @unittest.skipUnless(unshare_works(), "needs root and unshare for a private mount namespace")
    def test_app_output_to_the_journal_with_the_app_id(self):
        self.write_config('app-output = "journal"\n')
        os.makedirs(f"{self.dir}/journal")
        journald = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        journald.bind(f"{self.dir}/journal/stdout")
        journald.listen(4)
        journald.settimeout(30)
        self.sockets.append(journald)
        # vigild sees the fake journald at journald's path, in its own mount namespace.
        wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f'mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && '
                   f'mount --bind {self.dir}/journal /run/systemd/journal && exec "$0" "$@"']
        daemon = self.start(wrapper=wrapper)
        with self.control(daemon) as control:
            pid = self.launch_app(control)
            info = self.app(control)
        self.assertEqual((info["logPath"], info["journalIdentifier"]), (None, APP), "the apps reply names the journal")
        stream, _ = journald.accept()
        self.sockets.append(stream)
        stream.settimeout(30)
        data = b""
        while b"JOURNAL_STREAM=" not in data:
            chunk = stream.recv(65536)
            self.assertTrue(chunk, f"the stream ended early: {data!r}")
            data += chunk
        text = data.decode()
        # The header sd_journal_stream_fd(3) sends: identifier, unit, priority, level prefix, no forwarding.
        self.assertTrue(text.startswith(f"{APP}\n\n6\n1\n0\n0\n0\nvigild: starting /bin/sh"), text)
        self.assertIn("hello from the app\n<3>an error from the app\n", text)
        info = os.stat(f"/proc/{pid}/fd/1")
        self.assertIn(f"JOURNAL_STREAM={info.st_dev}:{info.st_ino}\n", text, "the app is told its output is the journal")
        self.assertFalse(os.path.exists(f"{self.dir}/logs/{APP}.log"), "no output file")
        self.stop(daemon)


if __name__ == "__main__":
    unittest.main()

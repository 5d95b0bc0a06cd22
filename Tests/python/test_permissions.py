"""Least privilege (docs/security.md), with the real vigild as the system daemon.

    VIGILD=.build/debug/vigild /usr/bin/python3 -m unittest test_permissions -v   (as root)

Creates real accounts for the run (useradd/groupadd, removed at the end):
an app's user with its own group and a supplementary group, an operator in
the control group, a watcher in the monitor group, an outsider in neither,
and an alias of uid 0. Then checks, from /proc and through the socket as
each of them (setpriv), that

- an app runs as the user, group and supplementary groups its manifest
  names (uid/gid/groups from /proc/PID/status), in its cgroup, frozen and
  woken by the daemon;
- a manifest without `user` is refused; root needs `user = "root"` written
  out (an alias of uid 0 is refused) in a manifest only root can change;
  manifests and folders others can write, or that another user owns, are
  refused with the reason, in `status` (`manifestProblems`);
- a user that does not exist fails the launch, naming the manifest;
- the control role is open to root and the control group, its read-only
  requests also to the monitor group, and nothing to anyone else;
- with an accessory (umockdev), the app reads its session log as its own
  user, and the log is readable by nobody else (0640, the app's group, in a
  folder that cannot be listed).

Skipped (not failed) when not root, or when vigild, useradd or setpriv is
missing; the session-log test also needs umockdev.
"""

import grp
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fault_harness import (  # noqa: E402
    EXAMPLE_APP, PYTHON, REPO, TESTBED, UNIFIED, VIGILD, FaultDaemon, app_info, cgroup_frozen, connect_control,
    daemon_config, freezer_available, kill_all, log_tail, process_state, processes_with, read_jsonl, wait_for,
)
from vigil_client import VigilError  # noqa: E402

VIGILCTL = os.environ.get("VIGILCTL") or os.path.join(os.path.dirname(VIGILD), "vigilctl")
CLIENTS = os.path.join(REPO, "clients", "python")

USER_APP = "org.vigil.test.perm.user"
ROOT_APP = "org.vigil.test.perm.root"
ALIAS_APP = "org.vigil.test.perm.alias"
NOUSER_APP = "org.vigil.test.perm.nouser"
UNKNOWN_APP = "org.vigil.test.perm.unknown"
OPEN_APP = "org.vigil.test.perm.open"
STRANGER_APP = "org.vigil.test.perm.stranger"
FOLDER_APP = "org.vigil.test.perm.folder"
SENSOR_APP = "org.vigil.test.perm.sensor"


def missing():
    if os.geteuid() != 0:
        return "needs root (creates accounts, runs the system daemon)"
    if not os.access(VIGILD, os.X_OK):
        return f"vigild is not built at {VIGILD}"
    for tool in ("useradd", "groupadd", "userdel", "groupdel", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


class Accounts:
    """Users and groups made for one run, with a random suffix; `remove` deletes them."""

    def __init__(self):
        tag = secrets.token_hex(3)
        self.users, self.groups = [], []
        self.app_group = self.group(f"vtapg{tag}")
        self.extra_group = self.group(f"vtsup{tag}")
        self.control_group = self.group(f"vtctl{tag}")
        self.monitor_group = self.group(f"vtmon{tag}")
        self.app_user = self.user(f"vtapp{tag}", self.app_group)
        self.operator = self.user(f"vtopr{tag}", None, [self.control_group])
        self.watcher = self.user(f"vtwat{tag}", None, [self.monitor_group])
        self.outsider = self.user(f"vtout{tag}", None)
        # A second name for uid 0: "root" by another name must not pass as the opt-in.
        self.root_alias = f"vtrt{tag}"
        self.run(["useradd", "-r", "-o", "-u", "0", "-g", "0", "-M", "-N", "-s", "/usr/sbin/nologin", self.root_alias])
        self.users.append(self.root_alias)
        self.missing_user = f"vtno{tag}"

    @staticmethod
    def run(command):
        subprocess.run(command, check=True, capture_output=True, text=True)

    def group(self, name):
        self.run(["groupadd", "-r", name])
        self.groups.append(name)
        return name

    def user(self, name, primary, extra=()):
        """A user with `primary` as its group, or (None) a private group of its own name."""
        group = ["-N", "-g", primary] if primary else ["-U"]
        command = ["useradd", "-r", "-M"] + group + ["-s", "/usr/sbin/nologin", name]
        if extra:
            command[1:1] = ["-G", ",".join(extra)]
        self.run(command)
        self.users.append(name)
        return name

    def remove(self):
        for name in reversed(self.users):
            subprocess.run(["userdel", "-f", name], capture_output=True)
        for name in reversed(self.groups):
            subprocess.run(["groupdel", name], capture_output=True)

    @staticmethod
    def uid(name):
        return pwd.getpwnam(name).pw_uid

    @staticmethod
    def gid(name):
        return grp.getgrnam(name).gr_gid


ACCOUNTS = None


def setUpModule():
    global ACCOUNTS
    if missing() is None:
        ACCOUNTS = Accounts()


def tearDownModule():
    if ACCOUNTS is not None:
        ACCOUNTS.remove()


def as_user(user, command, **options):
    """Runs `command` as `user` with the groups the group database gives it."""
    return subprocess.run(["setpriv", "--reuid", user, "--regid", str(pwd.getpwnam(user).pw_gid), "--init-groups"] + command,
                          capture_output=True, text=True, timeout=60, **options)


# Run as another user: connect with the control role, try each request, print what happened.
CONTROL_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from vigil_client import ControlClient, VigilError
socket, requests = sys.argv[2], json.loads(sys.argv[3])
try:
    control = ControlClient(socket, timeout=10)
except VigilError as error:
    print(json.dumps({"hello": error.code, "message": error.message}))
    sys.exit()
results = []
for request in requests:
    try:
        control.request(request["type"], **request.get("members", {}))
        results.append({"code": "ok"})
    except VigilError as error:
        results.append({"code": error.code, "message": error.message})
print(json.dumps({"hello": "ok", "results": results}))
"""


def probe_control(user, socket, requests):
    result = as_user(user, [PYTHON, "-c", CONTROL_PROBE, CLIENTS, socket, json.dumps(requests)])
    if result.returncode != 0:
        raise AssertionError(f"control probe as {user} failed: {result.stderr}")
    return json.loads(result.stdout)


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fields


def manifest(app_id, command, user=None, group=None, groups=None, modes=(), protocols=()):
    lines = [f"id = {json.dumps(app_id)}", f"exec = {json.dumps(command)}",
             f"background-modes = {json.dumps(list(modes))}", f"accessory-protocols = {json.dumps(list(protocols))}"]
    if user is not None:
        lines.append(f"user = {json.dumps(user)}")
    if group is not None:
        lines.append(f"group = {json.dumps(group)}")
    if groups is not None:
        lines.append(f"supplementary-groups = {json.dumps(groups)}")
    return "\n".join(lines) + "\n"


def write(path, text, mode=0o644):
    with open(path, "w") as file:
        file.write(text)
    os.chmod(path, mode)


@unittest.skipIf(missing(), missing() or "")
class SystemDaemonPermissionTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        accounts = ACCOUNTS
        cls.root = tempfile.mkdtemp(prefix="vigil-perm-")
        # Other users reach the socket, and the apps their records, through it.
        os.chmod(cls.root, 0o755)
        suspension = "cgroup" if freezer_available() else "signal"
        extra = (f"control-group = {json.dumps(accounts.control_group)}\n"
                 f"monitor-group = {json.dumps(accounts.monitor_group)}\n")
        cls.daemon = FaultDaemon(cls.root, suspension, extra=extra, env={"VIGILD_ARGS": "--system"})
        apps = cls.daemon.apps_dir
        cls.open_dir = os.path.join(cls.root, "apps-open")
        os.makedirs(cls.open_dir)
        os.chmod(cls.open_dir, 0o777)
        config = daemon_config(cls.root, suspension, cls.daemon.cgroup_root, None, False, extra)
        config = config.replace(f"manifest-dirs = [{json.dumps(apps)}]",
                                f"manifest-dirs = [{json.dumps(apps)}, {json.dumps(cls.open_dir)}]")
        write(cls.daemon.config, config)

        cls.records = os.path.join(cls.root, "records")
        os.makedirs(cls.records)
        os.chown(cls.records, accounts.uid(accounts.app_user), accounts.gid(accounts.app_group))
        os.chmod(cls.records, 0o700)
        cls.user_record = os.path.join(cls.records, "user.jsonl")
        cls.root_record = os.path.join(cls.root, "root.jsonl")
        app = lambda record: [PYTHON, EXAMPLE_APP, "--record", record]  # noqa: E731
        write(f"{apps}/user.toml", manifest(USER_APP, app(cls.user_record), user=accounts.app_user,
                                            group=accounts.app_group, groups=[accounts.extra_group]))
        write(f"{apps}/root.toml", manifest(ROOT_APP, app(cls.root_record), user="root"))
        write(f"{apps}/alias.toml", manifest(ALIAS_APP, ["/bin/sleep", "60"], user=accounts.root_alias))
        write(f"{apps}/nouser.toml", manifest(NOUSER_APP, ["/bin/sleep", "60"]))
        write(f"{apps}/unknown.toml", manifest(UNKNOWN_APP, ["/bin/sleep", "60"], user=accounts.missing_user))
        write(f"{apps}/open.toml", manifest(OPEN_APP, ["/bin/sleep", "60"], user=accounts.app_user), mode=0o666)
        write(f"{apps}/stranger.toml", manifest(STRANGER_APP, ["/bin/sleep", "60"], user=accounts.app_user))
        os.chown(f"{apps}/stranger.toml", accounts.uid(accounts.outsider), -1)
        write(f"{cls.open_dir}/folder.toml", manifest(FOLDER_APP, ["/bin/sleep", "60"], user=accounts.app_user))
        cls.daemon.start()
        cls.control = connect_control(cls.daemon.socket)

    @classmethod
    def tearDownClass(cls):
        cls.control.close()
        cls.daemon.stop()
        kill_all(processes_with(cls.root))
        cls.daemon.remove_cgroups()
        shutil.rmtree(cls.root, ignore_errors=True)

    def context(self):
        return "\n--- vigild ---\n" + self.daemon.log_tail(30)

    def problems(self):
        return {os.path.basename(p["file"]) or p["file"]: p for p in self.control.status()["manifestProblems"]}

    # -- apps' users

    def test_an_app_runs_as_its_manifests_user_and_groups(self):
        accounts = ACCOUNTS
        accepted = self.control.wake(USER_APP, payload=b"first")
        self.assertEqual(accepted["disposition"], "launched", self.context())
        self.assertTrue(wait_for(lambda: [r for r in read_jsonl(self.user_record) if r["kind"] == "event"], 20),
                        "the app did not get its event" + self.context())
        pid = app_info(self.control, USER_APP)["pid"]
        status = proc_status(pid)
        uid, gid = accounts.uid(accounts.app_user), accounts.gid(accounts.app_group)
        self.assertEqual(status["Uid"], [str(uid)] * 4)
        self.assertEqual(status["Gid"], [str(gid)] * 4)
        self.assertEqual(status["Groups"], [str(accounts.gid(accounts.extra_group))])
        self.assertEqual(status["CapEff"], ["0000000000000000"])
        with open(f"/proc/{pid}/environ", "rb") as environ:
            variables = dict(entry.split(b"=", 1) for entry in environ.read().split(b"\0") if b"=" in entry)
        self.assertEqual(variables[b"USER"].decode(), accounts.app_user)
        self.assertEqual(variables[b"LOGNAME"].decode(), accounts.app_user)
        self.assertEqual(os.readlink(f"/proc/{pid}/cwd"), "/")
        if self.daemon.suspension == "cgroup":
            with open(f"/proc/{pid}/cgroup") as cgroup:
                self.assertTrue(cgroup.read().strip().endswith("/" + USER_APP))

        # The daemon still suspends and wakes it.
        self.assertTrue(wait_for(lambda: app_info(self.control, USER_APP)["state"] == "suspended", 15), self.context())
        if self.daemon.suspension == "cgroup":
            self.assertTrue(wait_for(lambda: cgroup_frozen(pid), 5), "not frozen")
        else:
            self.assertTrue(wait_for(lambda: process_state(pid) == "T", 5), "not stopped")
        again = self.control.wake(USER_APP, payload=b"second")
        self.assertEqual(again["disposition"], "woke")
        self.assertTrue(wait_for(lambda: [r for r in read_jsonl(self.user_record)
                                          if r["kind"] == "event" and r["seq"] == again["seq"]], 15), self.context())
        # Its output log was opened by the daemon: root's, not the app's.
        log = os.stat(os.path.join(self.root, "logs", USER_APP + ".log"))
        self.assertEqual((log.st_uid, stat.S_IMODE(log.st_mode)), (0, 0o640))

    def test_a_manifest_without_user_is_refused(self):
        problem = self.problems()["nouser.toml"]
        self.assertEqual(problem["field"], "user")
        self.assertIn('add user = "NAME"', problem["message"])
        self.assertNotIn(NOUSER_APP, [app["id"] for app in self.control.apps()])
        with self.assertRaises(VigilError) as refused:
            self.control.wake(NOUSER_APP)
        self.assertEqual(refused.exception.code, "unknownApp")

    def test_root_only_when_written_out_in_a_manifest_only_root_can_change(self):
        accepted = self.control.wake(ROOT_APP)
        self.assertEqual(accepted["disposition"], "launched", self.context())
        self.assertTrue(wait_for(lambda: read_jsonl(self.root_record), 20), self.context())
        pid = read_jsonl(self.root_record)[0]["pid"]
        self.assertEqual(proc_status(pid)["Uid"], ["0"] * 4)

        # uid 0 under another name is not the opt-in.
        message = self.refused_launch(ALIAS_APP)
        self.assertIn("alias.toml: field 'user'", message)
        self.assertIn('user = "root"', message)

    def refused_launch(self, app):
        """The app cannot start: a wake is queued with a `refuse` decision, a
        launch fails with `launchFailed`; both say why. Returns the reason."""
        self.assertEqual(self.control.wake(app)["disposition"], "queued")
        refusals = [d for d in self.control.log(app=app) if d["action"] == "refuse"]
        self.assertTrue(refusals, self.control.log(app=app))
        with self.assertRaises(VigilError) as refused:
            self.control.app_action("launch", app)
        self.assertEqual(refused.exception.code, "launchFailed")
        self.assertIsNone(app_info(self.control, app)["pid"])
        self.assertIn(refused.exception.message.partition(": ")[2], refusals[-1]["reason"])
        return refused.exception.message

    def test_unsafe_manifests_and_folders_are_refused_with_the_reason(self):
        problems = self.problems()
        self.assertIn("writable by others (mode 0666)", problems["open.toml"]["message"])
        self.assertIn(f"owned by uid {ACCOUNTS.uid(ACCOUNTS.outsider)}", problems["stranger.toml"]["message"])
        folder = problems["apps-open"]
        self.assertIn("manifest folder refused", folder["message"])
        self.assertIn("writable by others (mode 0777)", folder["message"])
        apps = [app["id"] for app in self.control.apps()]
        for app in (OPEN_APP, STRANGER_APP, FOLDER_APP):
            self.assertNotIn(app, apps)
        # And in the reply to a reload, and in vigild's log.
        reload = self.control.reload()
        self.assertTrue(any("apps-open" in p["file"] for p in reload["problems"]), reload)
        self.assertIn("manifest rejected", self.daemon.log_tail(200))

    def test_a_user_that_does_not_exist_fails_the_launch_naming_the_manifest(self):
        message = self.refused_launch(UNKNOWN_APP)
        self.assertIn(f"unknown.toml: field 'user': no user '{ACCOUNTS.missing_user}'", message)

    # -- the control role

    READ_ONLY = [{"type": "status"}, {"type": "apps"}, {"type": "log"}, {"type": "accessories"}]
    CHANGES = [{"type": "wake", "members": {"app": USER_APP}},
               {"type": "appAction", "members": {"action": "terminate", "app": ROOT_APP}},
               {"type": "reload"},
               {"type": "openSession", "members": {"connectionID": 1, "protocol": "org.example.sensor"}}]

    def test_control_group_members_may_do_everything(self):
        result = probe_control(ACCOUNTS.operator, self.daemon.socket, self.READ_ONLY + self.CHANGES[:1])
        self.assertEqual(result["hello"], "ok", result)
        self.assertEqual([r["code"] for r in result["results"]], ["ok"] * 5, result)

    def test_monitor_group_members_may_only_read(self):
        result = probe_control(ACCOUNTS.watcher, self.daemon.socket, self.READ_ONLY + self.CHANGES)
        self.assertEqual(result["hello"], "ok", result)
        codes = [r["code"] for r in result["results"]]
        self.assertEqual(codes, ["ok"] * 4 + ["notPermitted"] * 4, result)
        refusal = result["results"][4]["message"]
        self.assertIn(f"monitor group '{ACCOUNTS.monitor_group}'", refusal)
        self.assertIn(f"control group '{ACCOUNTS.control_group}'", refusal)
        # Through vigilctl too.
        status = as_user(ACCOUNTS.watcher, [VIGILCTL, "--socket", self.daemon.socket, "status"])
        self.assertEqual(status.returncode, 0, status.stderr)
        wake = as_user(ACCOUNTS.watcher, [VIGILCTL, "--socket", self.daemon.socket, "wake", USER_APP])
        self.assertEqual(wake.returncode, 77, "EX_NOPERM: refused")
        self.assertIn("'wake' is not permitted", wake.stderr)

    def test_others_may_not_use_the_control_role(self):
        for user in (ACCOUNTS.outsider, ACCOUNTS.app_user):
            result = probe_control(user, self.daemon.socket, self.READ_ONLY)
            self.assertEqual(result["hello"], "unauthorized", result)
            self.assertIn(f"uid {ACCOUNTS.uid(user)} may not use the control role", result["message"])
            self.assertIn(f"control group '{ACCOUNTS.control_group}'", result["message"])
        # Through vigilctl: EX_NOPERM, the reason in words, and as JSON under --json.
        refused = as_user(ACCOUNTS.outsider, [VIGILCTL, "--socket", self.daemon.socket, "status"])
        self.assertEqual(refused.returncode, 77, refused.stderr)
        self.assertIn("may not use the control role", refused.stderr)
        self.assertNotIn("unauthorized", refused.stderr)
        refused = as_user(ACCOUNTS.outsider, [VIGILCTL, "--socket", self.daemon.socket, "--json", "apps"])
        self.assertEqual(refused.returncode, 77, refused.stderr)
        self.assertEqual(json.loads(refused.stderr)["error"]["code"], "unauthorized")


def umockdev_missing():
    return missing() or (None if shutil.which("umockdev-wrapper") else "umockdev is not installed")


@unittest.skipIf(umockdev_missing(), umockdev_missing() or "")
class SessionLogAccessTests(unittest.TestCase):
    """The system daemon in a umockdev testbed with one accessory; the app,
    run as its own user, holds a session and reads its data from the log."""

    def setUp(self):
        accounts = ACCOUNTS
        self.root = tempfile.mkdtemp(prefix="vigil-perm-log-")
        self.addCleanup(shutil.rmtree, self.root, True)
        os.chmod(self.root, 0o755)
        os.makedirs(f"{self.root}/apps")
        records = f"{self.root}/records"
        os.makedirs(records)
        os.chown(records, accounts.uid(accounts.app_user), accounts.gid(accounts.app_group))
        self.record = f"{records}/sensor.jsonl"
        self.socket = f"{self.root}/vigild.sock"
        # umockdev hides /sys: signals, not the freezer.
        write(f"{self.root}/vigild.toml", 'manifest-dirs = ["apps"]\nstate-dir = "state"\nlog-dir = "logs"\n'
              'suspension = "signal"\nbluetooth = false\n[timings]\nsuspend-grace = 0.5\nwake-budget = 3.0\n')
        write(f"{self.root}/apps/sensor.toml", manifest(
            SENSOR_APP, [PYTHON, EXAMPLE_APP, "--record", self.record, "--accessory-protocol", "org.example.sensor"],
            user=accounts.app_user, modes=["external-accessory"], protocols=["org.example.sensor"]))
        self.log_path = f"{self.root}/vigild.log"
        log = open(self.log_path, "w")
        self.addCleanup(log.close)
        self.testbed = subprocess.Popen(
            ["umockdev-wrapper", PYTHON, TESTBED, "--", VIGILD, "--system", "--socket", self.socket,
             "--config", f"{self.root}/vigild.toml"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
        self.addCleanup(self.stop_testbed)
        self.assertEqual(self.testbed.stdout.readline().strip(), "ready", "the testbed did not start")
        self.control = connect_control(self.socket, timeout=20)
        self.addCleanup(self.control.close)

    def stop_testbed(self):
        try:
            self.device("quit")
            self.testbed.wait(timeout=20)
        except Exception:  # noqa: BLE001 - tear down regardless
            self.testbed.kill()
            self.testbed.wait()
        self.testbed.stdin.close()
        self.testbed.stdout.close()
        kill_all(processes_with(self.record))

    def device(self, request):
        self.testbed.stdin.write(request + "\n")
        self.testbed.stdin.flush()
        return self.testbed.stdout.readline().strip()

    def test_the_app_reads_its_session_log_and_nobody_else_can(self):
        accounts = ACCOUNTS
        self.control.app_action("launch", SENSOR_APP)
        self.assertTrue(wait_for(lambda: [r for r in read_jsonl(self.record) if r["kind"] == "sessionOpened"], 20),
                        "no session\n" + log_tail(self.log_path))
        session = next(r for r in read_jsonl(self.record) if r["kind"] == "sessionOpened")["session"]
        self.control.app_action("background", SENSOR_APP)
        burst = b"1,0.5,3.7\n2,1.0,7.4\n"
        self.assertTrue(self.device("write " + burst.hex()).startswith("ok"))
        received = lambda: b"".join(bytes.fromhex(r["payloadHex"]) for r in read_jsonl(self.record)  # noqa: E731
                                    if r.get("eventKind") == "session.data")
        # The bytes come out of the log: the app, as its user, could read it.
        self.assertTrue(wait_for(lambda: received() == burst, 20),
                        f"got {received()!r}\n" + log_tail(self.log_path) + "\n" + log_tail(self.record))

        folder = f"{self.root}/state/session-logs"
        path = f"{folder}/{session}.log"
        self.assertEqual(stat.S_IMODE(os.stat(folder).st_mode), 0o711)
        info = os.stat(path)
        self.assertEqual((info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)),
                         (0, accounts.gid(accounts.app_group), 0o640))
        pid = app_info(self.control, SENSOR_APP)["pid"]
        self.assertEqual(proc_status(pid)["Uid"][0], str(accounts.uid(accounts.app_user)))

        reads = f"import sys\ntry:\n    open({path!r}, 'rb').read(8); print('read')\nexcept PermissionError: print('denied')\n"
        writes = f"import sys\ntry:\n    open({path!r}, 'r+b'); print('opened')\nexcept PermissionError: print('denied')\n"
        lists = f"import os\ntry:\n    os.listdir({folder!r}); print('listed')\nexcept PermissionError: print('denied')\n"
        self.assertEqual(as_user(accounts.app_user, [PYTHON, "-c", reads]).stdout.strip(), "read")
        self.assertEqual(as_user(accounts.app_user, [PYTHON, "-c", writes]).stdout.strip(), "denied")
        self.assertEqual(as_user(accounts.app_user, [PYTHON, "-c", lists]).stdout.strip(), "denied")
        # Another user, outside the app's group, reads nothing of it.
        result = as_user(accounts.outsider, [PYTHON, "-c", reads])
        self.assertEqual(result.stdout.strip(), "denied", result.stderr)


if __name__ == "__main__":
    unittest.main()

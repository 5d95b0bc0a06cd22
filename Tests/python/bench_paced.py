#!/usr/bin/python3
"""Paced wakes (issue 34): vigild's CPU per wake when wakes come at a
heart-rate monitor's pace (1 and 4 Hz) rather than back to back, with N
Bluetooth LE peripherals connected and subscribed (the BlueZ mock) or N
serial sessions open (umockdev testbed), and vigild's CPU per notification
value with every strap notifying at 4 Hz. Prints figures; asserts nothing.

    cd Tests/python && sudo /usr/bin/python3 bench_paced.py [--straps 1,10,30] [--sessions 1,10,40]
        [--tight N] [--seconds S] [--rounds R] VIGILD [VIGILD ...]

One app (paced_app.py), suspended with the cgroup freezer between wakes
(a second cgroup2 mount for the testbed, as test_fault_daemon_kill does).
Per set-up and vigild (several vigild binaries alternate within a set-up,
so their figures come from the same minutes of the machine):

- tight: N `wake` test events, each sent once the app is frozen again
  (vigil-bench's cgroup phase, with this app); vigild CPU / N;
- 1 Hz, 4 Hz: `wake` events on a fixed schedule for S seconds; vigild CPU
  over whole periods (what a wake leaves behind, such as a delayed save,
  falls inside its period) / wakes;
- values (straps only): every strap notifies once per 250 ms for S seconds
  (the mock's Notify); vigild CPU / values delivered to the app.

vigild's CPU is every thread's user + system time from
/proc/PID/task/*/schedstat (nanoseconds), read from outside.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import fault_harness
import test_protocol
from fault_harness import (
    PYTHON, UNIFIED, FaultDaemon, SecondCgroupMount, TestbedDaemon, app_manifest, cgroup_frozen, connect_control,
    daemon_config, kill_all, processes_with, read_jsonl, remove_cgroup_tree, wait_for,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "Tests", "bluez-mock"))
APP = "org.vigil.bench.paced"
PACED_APP = os.path.join(HERE, "paced_app.py")
PROTOCOL = "org.example.sensor"
HRS, MEASUREMENT = "180d", "2a37"


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
                total += int(file.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Rig:
    """vigild with the paced app ready and frozen; `pid()` is vigild's."""

    def __init__(self, vigild, kind, count):
        self.cleanups = []
        self.root = tempfile.mkdtemp(prefix="vigil-paced-")
        self.cleanups.append(lambda: shutil.rmtree(self.root, True))
        self.record = os.path.join(self.root, "app.jsonl")
        self.cleanups.append(lambda: kill_all(processes_with(self.record)))
        self.kind = kind
        self.mock = None
        try:
            if kind == "straps":
                self._start_straps(vigild, count)
            else:
                self._start_sessions(vigild, count)
            self.control = connect_control(self.socket)
            self.cleanups.append(self.control.close)
            self.control.app_action("launch", APP)
            if not wait_for(lambda: any(r["kind"] == "ready" for r in read_jsonl(self.record)), 60):
                raise RuntimeError("the app did not get ready:\n" + self.log_tail())
            if kind == "sessions":
                opened = next(r for r in read_jsonl(self.record) if r["kind"] == "ready")["sessions"]
                if opened != count:
                    raise RuntimeError(f"the app opened {opened} sessions, not {count}")
            else:
                if not wait_for(lambda: all(self._notifying(path) for path in self.characteristics), 60):
                    raise RuntimeError("not every strap's measurement is subscribed at the mock:\n" + self.log_tail())
            self.control.app_action("background", APP)
            self.app_pid = next(a for a in self.control.apps() if a["id"] == APP)["pid"]
            if not wait_for(self.frozen, 20):
                raise RuntimeError("the app was not frozen")
        except BaseException:
            self.close()
            raise

    def _start_straps(self, vigild, count):
        from bluez_mock import MockBlueZ
        self.mock = MockBlueZ()
        self.mock.start()
        self.cleanups.append(self.mock.stop)
        addresses = [f"AA:BB:CC:00:{i // 256:02X}:{i % 256:02X}" for i in range(count)]
        self.characteristics = [f"{self.mock.control.AddHeartRateMonitor('hci0', address, f'HRM {i}')}/service000a/char000b"
                                for i, address in enumerate(addresses)]
        test_protocol.VIGILD = vigild
        daemon = FaultDaemon(self.root, "cgroup", bluetooth=True, env={"DBUS_SYSTEM_BUS_ADDRESS": self.mock.address},
                             extra="event-queue-limit = 100000")
        with open(os.path.join(daemon.apps_dir, APP + ".toml"), "w") as manifest:
            command = [PYTHON, PACED_APP, "--record", self.record] + [arg for a in addresses for arg in ("--ble", a)]
            manifest.write(app_manifest(APP, command, modes=["bluetooth-central"]))
        self.cleanups.append(daemon.remove_cgroups)
        daemon.start()
        self.cleanups.append(daemon.stop)
        self.socket = daemon.socket
        self.log_path = daemon.output
        self.pid = lambda: daemon.process.pid

    def _start_sessions(self, vigild, count):
        mount = SecondCgroupMount().__enter__()
        self.cleanups.append(lambda: mount.__exit__(None, None, None))
        cgroup_root = f"{mount.path}/vigil-paced-{os.getpid()}"
        self.cleanups.append(lambda: remove_cgroup_tree(cgroup_root))
        os.makedirs(os.path.join(self.root, "apps"))
        with open(os.path.join(self.root, "apps", APP + ".toml"), "w") as manifest:
            manifest.write(app_manifest(APP, [PYTHON, PACED_APP, "--record", self.record, "--sessions", PROTOCOL],
                                        modes=["external-accessory"], protocols=[PROTOCOL]))
        fault_harness.VIGILD = vigild
        daemon = TestbedDaemon(self.root, daemon_config(self.root, "cgroup", cgroup_root, extra="event-queue-limit = 100000"))
        self.cleanups.append(daemon.close)
        daemon.wait_ready()
        self.socket = daemon.socket
        self.log_path = daemon.log_path
        self.pid = daemon.pid
        # Plugged in one by one once vigild follows udev, each seen before the next
        # (several plugged while it starts can fall between its enumeration and its monitor).
        with connect_control(self.socket) as control:
            known = lambda: len(control.accessories()["accessories"])  # noqa: E731
            if not wait_for(lambda: known() >= 1, 30):
                raise RuntimeError("vigild does not see the testbed's sensor")
            for i in range(1, count):
                reply = daemon.device(f'add bench{i} {{"port": "1-{i + 2}", "serial": "BENCH{i:03d}", "first_number": {i * 4}}}')
                if not reply.startswith("ok"):
                    raise RuntimeError(f"cannot add accessory {i}: {reply}")
                if not wait_for(lambda: known() >= i + 1, 30):
                    raise RuntimeError(f"vigild sees {known()} accessories, not {i + 1}:\n{self.log_tail()}")

    def _notifying(self, path):
        import dbus
        try:
            properties = self.mock.bus.get_object("org.bluez", path).GetAll(
                "org.bluez.GattCharacteristic1", dbus_interface="org.freedesktop.DBus.Properties")
        except dbus.exceptions.DBusException:
            return False
        return bool(properties.get("Notifying") or properties.get("NotifyAcquired"))

    def frozen(self):
        return cgroup_frozen(self.app_pid, mount=UNIFIED) or self._frozen_second_mount()

    def _frozen_second_mount(self):
        # The testbed's groups are below the second mount; /proc/PID/cgroup names the same path.
        return self.kind == "sessions" and cgroup_frozen(self.app_pid)

    def log_tail(self):
        return fault_harness.log_tail(self.log_path)

    def events(self):
        return [r for r in read_jsonl(self.record) if "seq" in r]

    def close(self):
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as error:  # noqa: BLE001 - tear down regardless
                print(f"  (cleanup: {error})", file=sys.stderr)
        self.cleanups = []

    # Phases

    def tight(self, count):
        """`count` wakes, each once the app is frozen again: CPU per wake (µs)."""
        pid = self.pid()
        if not wait_for(self.frozen, 20):
            raise RuntimeError("the app is not frozen before the tight loop")
        before = cpu_ns(pid)
        for _ in range(count):
            seq = self.control.wake(APP, "bench")["seq"]
            if not wait_for(lambda: any(r["seq"] == seq for r in self.events()[-3:]), 20, interval=0.0005):
                raise RuntimeError(f"wake {seq} did not reach the app:\n{self.log_tail()}")
            if not wait_for(self.frozen, 20, interval=0.0005):
                raise RuntimeError("the app was not frozen again")
        return (cpu_ns(pid) - before) / 1000 / count

    def paced(self, hertz, seconds):
        """`wake` events every 1/hertz s for `seconds`: CPU per wake (µs), over whole periods."""
        pid = self.pid()
        period = 1.0 / hertz
        count = max(1, int(seconds * hertz))
        wait_for(self.frozen, 20)
        time.sleep(1.0)  # what the set-up left behind (a delayed save) is not counted
        start = time.monotonic()
        before = cpu_ns(pid)
        late = 0
        for k in range(count):
            time.sleep(max(0.0, start + k * period - time.monotonic()))
            if not self.frozen():
                late += 1
            self.control.wake(APP, "bench")
        time.sleep(max(0.0, start + count * period - time.monotonic()))
        cpu = cpu_ns(pid) - before
        if late:
            print(f"    ({late} of {count} wakes found the app not yet frozen again)")
        return cpu / 1000 / count

    def values(self, seconds, hertz=4.0):
        """Every strap notifies every 1/hertz s for `seconds`: CPU per value delivered (µs)."""
        import dbus
        pid = self.pid()
        wait_for(self.frozen, 20)
        time.sleep(1.0)
        received = lambda: sum(r.get("values", 0) for r in self.events())  # noqa: E731
        already = received()
        period = 1.0 / hertz
        count = max(1, int(seconds * hertz))
        start = time.monotonic()
        before = cpu_ns(pid)
        sent = 0
        for k in range(count):
            time.sleep(max(0.0, start + k * period - time.monotonic()))
            value = dbus.Array([dbus.Byte(b) for b in (0x00, 60 + k % 100)], signature="y")
            for path in self.characteristics:
                sent += int(self.mock.control.Notify(path, value))
        time.sleep(max(0.0, start + count * period - time.monotonic()))
        wait_for(lambda: received() - already >= sent, 10)
        wait_for(self.frozen, 10)
        cpu = cpu_ns(pid) - before
        got = received() - already
        return cpu / 1000 / max(1, got), got, sent


def main():
    parser = argparse.ArgumentParser(description="paced wakes: vigild CPU per wake and per notification value")
    parser.add_argument("--straps", default="1,10,30", help="connected peripherals per set-up ('' for none)")
    parser.add_argument("--sessions", default="1,10,40", help="open serial sessions per set-up ('' for none)")
    parser.add_argument("--tight", type=int, default=100, help="wakes of the tight loop")
    parser.add_argument("--seconds", type=float, default=15, help="seconds of each paced phase")
    parser.add_argument("--rounds", type=int, default=1, help="times each set-up runs per vigild")
    parser.add_argument("vigild", nargs="+")
    options = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_paced: run as root (cgroup freezer)")
    setups = [("straps", int(n)) for n in options.straps.split(",") if n] + \
             [("sessions", int(n)) for n in options.sessions.split(",") if n]
    names = {path: f"[{i}] {path}" for i, path in enumerate(options.vigild)}
    print(f"paced wakes: tight {options.tight} wakes, paced phases {options.seconds:g} s, load {os.getloadavg()}")
    for path in options.vigild:
        print(f"  {names[path]}")
    results = {}
    for kind, count in setups:
        for round_ in range(options.rounds):
            for index, vigild in enumerate(options.vigild):
                rig = Rig(vigild, kind, count)
                try:
                    row = {"tight": rig.tight(options.tight),
                           "1 Hz": rig.paced(1, options.seconds),
                           "4 Hz": rig.paced(4, options.seconds)}
                    if kind == "straps":
                        row["value"], got, sent = rig.values(options.seconds)
                        row["values"] = f"{got}/{sent}"
                finally:
                    rig.close()
                results.setdefault((kind, count, index), []).append(row)
                print(f"  {kind} {count:>3} [{index}] round {round_ + 1}: " +
                      ", ".join(f"{k} {v:.0f} µs" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                      flush=True)
    print("\nvigild CPU (µs): per wake tight, 1 Hz, 4 Hz (4 Hz / tight); per notification value (each strap at 4 Hz); "
          "medians of rounds")
    for kind, count in setups:
        for index in range(len(options.vigild)):
            rows = results[(kind, count, index)]
            med = lambda key: sorted(r[key] for r in rows)[len(rows) // 2]  # noqa: E731
            line = (f"  {kind:>8} {count:>3} [{index}]: tight {med('tight'):7.0f}, 1 Hz {med('1 Hz'):7.0f}, "
                    f"4 Hz {med('4 Hz'):7.0f} ({med('4 Hz') / med('tight'):.2f}x)")
            if kind == "straps":
                line += f", per value {med('value'):6.0f}"
            print(line)
    for kind, _ in dict.fromkeys((k, None) for k, _ in setups):
        counts = [c for k, c in setups if k == kind]
        if len(counts) > 1:
            for index in range(len(options.vigild)):
                first = sorted(r["4 Hz"] for r in results[(kind, counts[0], index)])
                last = sorted(r["4 Hz"] for r in results[(kind, counts[-1], index)])
                print(f"  {kind} [{index}]: 4 Hz with {counts[-1]} / with {counts[0]}: "
                      f"{last[len(last) // 2] / first[len(first) // 2]:.2f}x")


if __name__ == "__main__":
    main()

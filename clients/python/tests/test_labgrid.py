"""labgrid with Vigil: a real coordinator and exporter on loopback, the virtual
accessory behind a real vigild, and a client that acquires the place and
exchanges bytes through the driver, across an unplug and replug."""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from vigil.testing import VigilDaemon, VirtualAccessory

labgrid = pytest.importorskip("labgrid")
PLACE = "vigil-sensor"
FARM_START_BOUND = 240.0  # seconds; see started() in farm
pytest_plugins = ["pytester"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bin_path(name: str) -> str:
    found = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


@pytest.fixture
def farm(vigild: VigilDaemon, virtual_accessory: VirtualAccessory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A coordinator, an exporter publishing the accessory by identity, and a place that matches it."""
    coordinator = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("LG_COORDINATOR", coordinator)
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("coordinator", "exporter")}
    processes = [subprocess.Popen([bin_path("labgrid-coordinator"), "-l", coordinator], cwd=tmp_path,
                                  stdout=logs["coordinator"], stderr=subprocess.STDOUT)]
    config = tmp_path / "exporter.yaml"
    config.write_text(f"sensor:\n  VigilAccessory:\n    serial_number: VGL123\n    protocol: org.example.sensor\n"
                      f"    socket: {vigild.socket}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    client = [bin_path("labgrid-client"), "-x", coordinator, "-p", PLACE]

    def lg(*arguments: str) -> str:
        # As slow to start as the polls below (a lab run saw 20-40 s each): the same bound.
        run = subprocess.run([*client, *arguments], capture_output=True, text=True, timeout=FARM_START_BOUND, env=env)
        assert run.returncode == 0, f"labgrid-client {' '.join(arguments)}: {run.stdout}{run.stderr}"
        return run.stdout

    def started(condition: Callable[[], bool], what: str) -> None:
        """Waits while every farm process lives: each poll starts a labgrid-client, and a Python with gRPC
        takes tens of seconds to start in a TCG guest under load (two 20 s waits failed in CI that way), so
        the bound is generous; a farm process that dies fails at once, with its log."""
        began = time.monotonic()
        while not condition():
            for name, process in zip(("coordinator", "exporter"), processes):
                if process.poll() is not None:
                    raise AssertionError(f"the {name} exited ({process.returncode}) before {what}:\n"
                                         f"{(tmp_path / f'{name}.log').read_text()}")
            if time.monotonic() - began > FARM_START_BOUND:
                raise AssertionError(f"no {what} after {FARM_START_BOUND:.0f} s; coordinator log:\n"
                                     f"{(tmp_path / 'coordinator.log').read_text()}\nexporter log:\n"
                                     f"{(tmp_path / 'exporter.log').read_text()}")
            time.sleep(0.5)
        print(f"farm: {what} after {time.monotonic() - began:.1f} s")

    try:
        started(lambda: subprocess.run([*client, "places"], capture_output=True, env=env).returncode == 0,
                "the coordinator answering")
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "vigil.labgrid", "exporter", "-c", coordinator, "--name", "gateway",
             "--hostname", "localhost", str(config)], env=env, stdout=logs["exporter"], stderr=subprocess.STDOUT))
        started(lambda: "NetworkVigilAccessory" in subprocess.run(  # only available ones are listed
            [*client[:3], "resources"], capture_output=True, text=True, env=env).stdout,
            "the accessory published as available")
        lg("create")
        lg("add-match", "gateway/sensor/NetworkVigilAccessory")
        lg("acquire")
        yield lg
        lg("release")
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:  # a slow guest: do not leave it behind for the next test
                process.kill()
                process.wait()
        for log in logs.values():
            log.close()


def test_a_place_gives_a_console_that_survives_a_replug(farm, virtual_accessory: VirtualAccessory,
                                                        tmp_path: Path) -> None:
    from labgrid import Environment

    config = tmp_path / "env.yaml"
    config.write_text(f"targets:\n  main:\n    resources:\n      RemotePlace:\n        name: {PLACE}\n"
                      "    drivers:\n      VigilSessionDriver: {}\nimports:\n  - vigil.labgrid\n")
    target = Environment(str(config)).get_target("main")
    console = target.get_driver("VigilSessionDriver")
    console.write(b"hello\n")
    assert virtual_accessory.read(6) == b"hello\n"
    virtual_accessory.write(b"booted> ")
    console.expect("booted> ", timeout=10)

    virtual_accessory.unplug()
    virtual_accessory.plug()
    deadline = time.monotonic() + 20
    while True:  # writes fail while the session waits for the accessory; then it is reopened
        try:
            console.write(b"again\n")
            break
        except Exception:  # noqa: BLE001 - invalidState while waiting
            assert time.monotonic() < deadline, "the session was not reopened after the replug"
            time.sleep(0.1)
    assert virtual_accessory.read(6) == b"again\n"
    virtual_accessory.write(b"still here")
    console.expect("still here", timeout=10)
    target.deactivate(console)


def test_the_plugin_takes_a_labgrid_place_for_accessory_session(farm, virtual_accessory: VirtualAccessory,
                                                                pytester: pytest.Pytester,
                                                                request: pytest.FixtureRequest) -> None:
    """A suite of the plugin's own, run with --lg-env and --vigil-place: its accessory_session is the place's
    session (through the gateway's vigild), while this test plays the device: it answers each line."""
    (pytester.path / "env.yaml").write_text(
        f"targets:\n  main:\n    resources:\n      RemotePlace:\n        name: {PLACE}\n"
        "    drivers:\n      VigilSessionDriver: {}\nimports:\n  - vigil.labgrid\n")
    pytester.makepyfile(test_on_the_rig="""
        def test_the_device_answers(accessory_session):
            accessory_session.write(b"status\\\\n")
            assert accessory_session.expect(rb"ack:status\\\\n", timeout=20)
            accessory_session.write(b"version\\\\n")
            assert accessory_session.expect(rb"ack:version\\\\n", timeout=20)
    """)
    stop = threading.Event()

    def device() -> None:  # echoes every line the host sends, as "ack:LINE"
        while not stop.is_set():
            line = virtual_accessory.read(timeout=0.2)
            if line:
                virtual_accessory.write(b"ack:" + line)

    answering = threading.Thread(target=device)
    answering.start()
    try:
        pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--lg-env", "env.yaml", "--vigil-place")
    finally:
        stop.set()
        answering.join()
    result.assert_outcomes(passed=1)

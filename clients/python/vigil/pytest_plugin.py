"""pytest plugin for Vigil (entry point `pytest11`: active once `vigil` is installed).

Fixtures:
  vigild            a private vigild (own socket, state, logs, cgroup root), started
                    for the test and stopped after it: `vigil.testing.VigilDaemon`
                    (install_app, launch, suspend, wake, wait_for_state, decision_log)
  vigil_control     a `vigil.sync.ControlClient` connected to it
  virtual_accessory the fake USB serial accessory vigild sees (vigild then runs in a
                    umockdev testbed): write/read/unplug/plug
  accessory_session a control-role session with the virtual accessory (protocol
                    org.example.sensor): write(bytes), read(timeout) -> bytes
  bluez_mock        the BlueZ mock on a private D-Bus (vigild talks to it); its
                    `add_heart_rate_monitor(address)` adds a peripheral

Marker: `@pytest.mark.vigil(timings={...}, settings={...})` sets the daemon's
config (lifecycle.md, "Configuration"). A failing test's report gets a
"vigild" section: the daemon's decision log and the end of its output.
`async def` tests that use one of these fixtures (or the marker) run on a
fresh event loop, unless pytest-asyncio is there to do it.

Options: --vigild PATH (default $VIGILD, a checkout's .build/debug/vigild, then PATH);
--vigil-hardware=lab runs the session inside the Vigil lab guest (docs/lab.md), where
`virtual_accessory` is a USB gadget seen through real udev and `bluez_mock` is
bluetoothd with a Bumble heart-rate monitor: the same tests, on real stacks.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from . import _lab
from ._frames import Message
from .sync import ControlClient
from .testing import BluetoothMock, VigilDaemon, VirtualAccessory, find_repo, find_vigild

_DAEMON_KEY = pytest.StashKey[VigilDaemon]()
_FIXTURES = frozenset({"vigild", "vigil_control", "virtual_accessory", "accessory_session", "bluez_mock"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vigil")
    group.addoption("--vigild", default=None, help="the vigild binary for the vigild fixture")
    group.addoption("--vigil-hardware", choices=("virtual", "lab"), default="virtual",
                    help="virtual: umockdev accessory and BlueZ mock on this machine; lab: the same tests in "
                         "the Vigil lab guest, with a USB gadget, bluetoothd and a Bumble peer (docs/lab.md)")
    group.addoption("--vigil-lab-results", default=None, help="with --vigil-hardware=lab: the lab's results folder")


def _in_lab(config: pytest.Config) -> bool:
    return bool(config.getoption("--vigil-hardware") == "lab")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """--vigil-hardware=lab on the host: the same session, run inside the lab guest."""
    if not _in_lab(config) or _lab.in_guest():
        return None
    repo = find_repo()
    if repo is None:
        raise pytest.UsageError("--vigil-hardware=lab needs a Vigil checkout ($VIGIL_REPO) for scripts/vigil-lab")
    arguments = list(config.invocation_params.args)
    if config.getoption("--vigild") is None:
        arguments += ["--vigild", _vigild_binary(config)]
    results = config.getoption("--vigil-lab-results") or tempfile.mkdtemp(prefix="vigil-lab-pytest-")
    command = [str(repo / "scripts" / "vigil-lab"), "run", "--results", str(results), "--",
               sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments]
    return subprocess.run(command, cwd=config.invocation_params.dir, env=dict(os.environ, VIGIL_REPO=str(repo))
                          ).returncode


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vigil(timings=None, settings=None): the private vigild's configuration")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or pyfuncitem.config.pluginmanager.hasplugin("asyncio"):
        return None
    if not (_FIXTURES & set(pyfuncitem.fixturenames) or pyfuncitem.get_closest_marker("vigil")):
        return None  # someone else's async test (anyio, trio): not ours to run
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    daemon = item.stash.get(_DAEMON_KEY, None)
    if daemon is not None and report.failed:
        report.sections.append(("vigild", daemon.report()))


def _vigild_binary(config: pytest.Config) -> str:
    binary = config.getoption("--vigild") or find_vigild()
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("no vigild binary: pass --vigild, set $VIGILD or build it")
    return os.path.abspath(binary)


@pytest.fixture
def bluez_mock(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The BlueZ mock on a private system-like D-Bus (needs dbus-daemon and
    python3-dbusmock); in the lab, bluetoothd and Bumble peers (`_lab.LabBluetooth`)."""
    if _in_lab(request.config):
        repo = find_repo()
        assert repo is not None
        radio = _lab.LabBluetooth(repo)
        try:
            yield radio
        finally:
            radio.stop()
        return
    if not shutil.which("dbus-daemon") or find_repo() is None:
        pytest.skip("the BlueZ mock needs dbus-daemon and a Vigil checkout ($VIGIL_REPO)")
    try:
        import dbus  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: F401
    except ImportError:
        pytest.skip("python3-dbus is not importable (make the venv with --system-site-packages)")
    mock = BluetoothMock().start()
    try:
        yield mock
    finally:
        mock.stop()


@pytest.fixture
def vigild(request: pytest.FixtureRequest) -> Iterator[VigilDaemon]:
    """A private vigild for this test (see `vigil.testing.VigilDaemon`)."""
    binary = _vigild_binary(request.config)
    marker = request.node.get_closest_marker("vigil")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    accessory = "virtual_accessory" in request.fixturenames or "accessory_session" in request.fixturenames
    accessory = accessory and not _in_lab(request.config)  # in the lab: a USB gadget, seen through real udev
    if accessory and not shutil.which("umockdev-wrapper"):
        pytest.skip("the virtual accessory needs umockdev (apt install umockdev gir1.2-umockdev-1.0 python3-gi)")
    env = None
    if "bluez_mock" in request.fixturenames:
        env = request.getfixturevalue("bluez_mock").env
    root = tempfile.mkdtemp(prefix="vigil-pytest-")
    daemon = VigilDaemon(root, vigild=binary, timings=options.get("timings"), settings=options.get("settings"),
                         env=env, accessory=accessory)
    daemon.start()
    request.node.stash[_DAEMON_KEY] = daemon
    try:
        yield daemon
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def vigil_control(vigild: VigilDaemon) -> Iterator[ControlClient]:
    with ControlClient(vigild.socket) as control:
        yield control


@pytest.fixture
def virtual_accessory(request: pytest.FixtureRequest, vigild: VigilDaemon) -> Iterator[Any]:
    """The accessory: umockdev's fake USB serial device, or in the lab a USB gadget (`_lab.LabAccessory`)."""
    gadget = None
    if _in_lab(request.config):
        repo = find_repo()
        assert repo is not None
        gadget = _lab.LabAccessory(repo)
        vigild.accessory = gadget  # type: ignore[assignment]
    assert vigild.accessory is not None
    vigild.wait_until(lambda: vigild.control(lambda c: c.accessories()["accessories"]), "the accessory", 30)
    try:
        yield vigild.accessory
    finally:
        if gadget is not None:
            gadget.close()


class AccessorySession:
    """A control-role session with the virtual accessory, driven synchronously."""

    def __init__(self, control: ControlClient, session: int) -> None:
        self.control = control
        self.id = session

    def write(self, data: bytes) -> int:
        return self.control.write(self.id, data)

    def read(self, timeout: float = 10.0) -> bytes:
        """The next bytes the device sent; b"" if the session ended or nothing came within `timeout`."""
        message: Message | None = self.control.next_session_output(timeout)
        if message is None or message.type != "sessionData":
            return b""
        return message.body


@pytest.fixture
def accessory_session(vigild: VigilDaemon, virtual_accessory: Any) -> Iterator[AccessorySession]:
    with ControlClient(vigild.socket) as control:
        accessory = control.accessories()["accessories"][0]
        opened = control.open_session(accessory["connectionID"], VirtualAccessory.PROTOCOLS[0])
        yield AccessorySession(control, int(opened["session"]))

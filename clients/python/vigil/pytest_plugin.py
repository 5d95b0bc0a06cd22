"""pytest plugin for Vigil (entry point `pytest11`: active once `vigil` is installed).

Fixtures:
  vigild              a private vigild (own socket, state, logs, cgroup root), started
                      for the test and stopped after it: `vigil.testing.VigilDaemon`
                      (install_app, launch, suspend, wake, wait_for_state, decisions)
  vigild_module,      the same, one per test module / per session (slow rigs: apps
  vigild_session      and state carry over between the tests that share it)
  vigil_control       a `vigil.sync.ControlClient` connected to `vigild`
  virtual_accessory   the first virtual USB serial accessory vigild sees (vigild then
                      runs in a umockdev testbed): `vigil.testing.VirtualAccessory`
  virtual_accessories all of them by name (`@pytest.mark.vigil(accessories=[...])`)
  accessory_session   a control-role session with the first one, on its first
                      protocol: `vigil.testing.ControlSession`
  bluez_mock          the BlueZ mock on a private D-Bus (vigild talks to it):
                      `vigil.testing.BluetoothMock`

Marker: `@pytest.mark.vigil(timings={...}, settings={...}, accessories=[SerialAccessory(...)])`.
A failing test's report gets a "vigild" section (the timestamped decision log, the end
of the daemon's output, the artifact folder kept for it), also in JUnit XML (the failure
text and the properties vigil_artifacts and vigil_decision_log). `async def` tests that
use these fixtures (or the marker) and that pytest-asyncio does not run (it is absent,
or in strict mode without an asyncio mark) run on a fresh event loop.

Options (a path with "=" or as the next argument): --vigild PATH (else $VIGILD, the ini key `vigild`, a checkout's
.build/debug/vigild, then PATH); --vigil-artifacts DIR (ini `vigil_artifacts`): where
failing tests' folders go; --vigil-hardware=lab runs the session inside the Vigil lab
guest (docs/lab.md), where `virtual_accessory` is a USB gadget seen through real udev
and `bluez_mock` is bluetoothd with a Bumble heart-rate monitor.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import types
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from _pytest._code.code import ExceptionRepr

from . import _lab
from .rig import Rig, RigDaemon, RigError, load_rig
from .sync import ControlClient
from .testing import (
    BluetoothMock, ControlSession, SerialAccessory, VigilDaemon, VirtualAccessory, find_repo, find_vigild,
    missing_for_accessories, missing_for_bluetooth,
)

#: Kept for suites written before the rename (not `vigil.AccessorySession`, the asyncio one).
AccessorySession = ControlSession

_FAILED = pytest.StashKey[bool]()
_ARTIFACTS = pytest.StashKey[Path]()
_FIXTURES = frozenset({"vigild", "vigild_module", "vigild_session", "vigil_control", "virtual_accessory",
                       "virtual_accessories", "accessory_session", "bluez_mock"})
_ACCESSORY_FIXTURES = frozenset({"virtual_accessory", "virtual_accessories", "accessory_session"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vigil")
    group.addoption("--vigild", default=None,
                    help="the vigild binary (else $VIGILD, the ini key vigild, a checkout's build, PATH)")
    group.addoption("--vigil-artifacts", default=None,
                    help="a folder for failing tests' artifact folders (default: each stays where its daemon ran)")
    group.addoption("--vigil-hardware", choices=("virtual", "lab"), default="virtual",
                    help="virtual: umockdev accessory and BlueZ mock on this machine; lab: the same tests in "
                         "the Vigil lab guest, with a USB gadget, bluetoothd and a Bumble peer (docs/lab.md)")
    group.addoption("--vigil-place", action="store_true", default=False,
                    help="accessory_session through the labgrid place of --lg-env: target main's VigilSessionDriver "
                         "(a real accessory behind a gateway's vigild; needs labgrid)")
    group.addoption("--vigil-lab-results", default=None, help="with --vigil-hardware=lab: the lab's results folder")
    group.addoption("--vigil-rig", default=None,
                    help="a rig file (TOML): daemons as fixtures of their own scope, with apps and virtual devices")
    parser.addini("vigil_rig", "a rig file (TOML; relative to the ini file's folder)")
    parser.addini("vigild", "the vigild binary for the vigild fixtures (relative to the ini file's folder)")
    parser.addini("vigil_artifacts", "a folder for failing tests' artifact folders (relative to the ini file's folder)")


#: The plugin's options that take a value: pytest looks for its rootdir and ini file before
#: plugins add their options, so a value given as the next argument is taken for a test path then.
_VALUE_OPTIONS = ("--vigild", "--vigil-artifacts", "--vigil-lab-results", "--vigil-rig")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """`--vigild PATH` (and the other path options without "="): pytest chose its rootdir
    and ini file with PATH among the test paths, before this plugin's options were
    known. Now they are: choose again without it, as `--vigild=PATH` would have."""
    if not any(argument in _VALUE_OPTIONS for argument in args[:-1]):
        return
    namespace = early_config.known_args_namespace
    try:
        from _pytest.config.findpaths import determine_setup
        found = determine_setup(inifile=namespace.inifilename, override_ini=namespace.override_ini,
                                args=namespace.file_or_dir, rootdir_cmd_arg=namespace.rootdir or None,
                                invocation_dir=early_config.invocation_params.dir)
        rootpath, inipath, inicfg = found[:3]
        if (rootpath, inipath) == (early_config.rootpath, early_config.inipath):
            return
        earlier_cut = str(early_config.inipath.parent if early_config.inipath else early_config.rootpath)
        earlier_addopts = list(early_config.getini("addopts"))
        early_config._rootpath, early_config._inipath, early_config._inicfg = rootpath, inipath, inicfg
        if len(found) > 3:
            early_config._ignored_config_files = found[3]
        early_config._inicache.clear()
    except (ImportError, TypeError, ValueError, AttributeError) as error:  # another pytest's internals
        raise pytest.UsageError(f"write the vigil plugin's path options with '=' (--vigild=PATH) in this pytest "
                                f"({pytest.__version__}): {error}") from error
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    if namespace.confcutdir == earlier_cut:  # pytest's default, from the ini file it had chosen
        namespace.confcutdir = str(inipath.parent if inipath else rootpath)
    if earlier_addopts and args[:len(earlier_addopts)] == earlier_addopts:
        del args[:len(earlier_addopts)]  # the wrong ini file's
    args[:0] = early_config.getini("addopts")


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
        arguments += [f"--vigild={_vigild_binary(config)}"]
    results = config.getoption("--vigil-lab-results") or tempfile.mkdtemp(prefix="vigil-lab-pytest-")
    command = [str(repo / "scripts" / "vigil-lab"), "run", "--results", str(results), "--",
               sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments]
    return subprocess.run(command, cwd=config.invocation_params.dir, env=dict(os.environ, VIGIL_REPO=str(repo))
                          ).returncode


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vigil(timings=None, settings=None, accessories=None): the private "
                                       "vigild's configuration and virtual accessories")
    path = _config_path(config, "--vigil-rig", "vigil_rig")
    if path is not None:
        try:
            rig = load_rig(path)
        except RigError as error:
            raise pytest.UsageError(f"vigil rig file: {error}") from error
        config.pluginmanager.register(_rig_fixtures(rig), "vigil-rig")


def _rig_fixtures(rig: Rig) -> types.ModuleType:
    """A plugin holding one fixture per daemon of the rig file, named and scoped as it says."""
    module = types.ModuleType("vigil_rig_fixtures")

    def fixture_for(daemon: RigDaemon) -> Any:
        def start(request: pytest.FixtureRequest) -> Iterator[VigilDaemon]:
            yield from _start_daemon(request, request.node, daemon)
        start.__doc__ = f"The rig file's daemon {daemon.name} ({rig.path}), {daemon.scope}-scoped."
        return pytest.fixture(scope=daemon.scope, name=daemon.name)(start)  # type: ignore[call-overload]

    for daemon in rig.daemons:
        setattr(module, f"vigil_rig_{daemon.name}", fixture_for(daemon))
    return module


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs an async test of ours that nobody else runs: pytest-asyncio runs the ones it
    marked (auto mode: all; strict mode: those with @pytest.mark.asyncio), and by then
    their function is no longer a coroutine function."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or pyfuncitem.get_closest_marker("asyncio"):
        return None
    if not (_FIXTURES & set(pyfuncitem.fixturenames) or pyfuncitem.get_closest_marker("vigil")):
        return None  # someone else's async test (anyio, trio): not ours to run
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True


def _daemons(item: pytest.Item) -> list[VigilDaemon]:
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    found = [value for value in funcargs.values() if isinstance(value, VigilDaemon)]
    return list({id(daemon): daemon for daemon in found}.values())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed or report.when == "teardown":
        return
    item.stash[_FAILED] = True
    for daemon in _daemons(item):
        text = daemon.report()
        artifacts = daemon.artifacts
        text += f"\nartifacts (kept): {artifacts}"
        # In the exception's representation: the terminal shows it, and JUnit XML's failure text carries it.
        if isinstance(report.longrepr, ExceptionRepr):
            report.longrepr.addsection("vigild", text)
        else:
            report.sections.append(("vigild", text))
        item.user_properties.append(("vigil_artifacts", str(artifacts)))
        try:
            item.user_properties.append(("vigil_decision_log", daemon.decision_report()))
        except Exception as error:  # noqa: BLE001 - the daemon is gone: the report above says why
            item.user_properties.append(("vigil_decision_log", f"unavailable: {error}"))


def _config_path(config: pytest.Config, option: str, ini: str) -> Path | None:
    value = config.getoption(option)
    if value:
        return Path(value).resolve()
    configured = config.getini(ini)
    if configured:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / str(configured)).resolve()
    return None


def _vigild_binary(config: pytest.Config) -> str:
    binary: str | None = config.getoption("--vigild") or os.environ.get("VIGILD")
    if not binary:
        configured = _config_path(config, "--vigild", "vigild")
        binary = str(configured) if configured else find_vigild()
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip(f"no vigild binary{f' at {binary}' if binary else ''}: pass --vigild, set $VIGILD or the ini "
                    "key vigild, or install vigil (apt install ./vigil_*.deb puts vigild on PATH)")
    return os.path.abspath(binary)


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[-120:] or "test"


def _start_daemon(request: pytest.FixtureRequest, node: pytest.Item | pytest.Collector,
                  spec: RigDaemon | None = None) -> Iterator[VigilDaemon]:
    """A daemon for `node` (a test, a module or the session), stopped after it;
    its folder kept when a test using it failed, removed otherwise. `spec`: a rig file's daemon."""
    binary = spec.vigild if spec is not None and spec.vigild else _vigild_binary(request.config)
    if spec is not None and not os.access(binary, os.X_OK):
        pytest.skip(f"the rig file's vigild for {spec.name} is not there: {binary}")
    marker = node.get_closest_marker("vigil") if isinstance(node, pytest.Item) and spec is None else None
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    if spec is not None:
        options = {"timings": spec.timings, "settings": spec.settings, "accessories": list(spec.accessories)}
    wants = set(request.fixturenames) if isinstance(node, pytest.Item) and spec is None else set()
    described = [a for a in options.get("accessories") or [] if isinstance(a, SerialAccessory)]
    if len(described) != len(options.get("accessories") or []):
        raise pytest.UsageError("@pytest.mark.vigil(accessories=[...]) takes vigil.testing.SerialAccessory objects")
    accessory = bool(_ACCESSORY_FIXTURES & wants) or bool(described)
    # In the lab: USB gadgets with the described identities, seen through real udev (not the testbed).
    gadgets_wanted = (described or [SerialAccessory()]) if accessory and _in_lab(request.config) else []
    accessory = accessory and not _in_lab(request.config)
    if accessory:
        missing = missing_for_accessories()
        if missing:
            pytest.skip(missing)
    own_mock = spec is not None and spec.bluez_mock and not _in_lab(request.config)
    bluetooth = "bluez_mock" in wants or own_mock or _in_lab(request.config) or \
        "bluetooth" in (options.get("settings") or {})
    env = None
    mock: BluetoothMock | None = None
    if "bluez_mock" in wants:
        env = cast(BluetoothMock, request.getfixturevalue("bluez_mock")).env
    elif own_mock:
        missing = missing_for_bluetooth()
        if missing:
            pytest.skip(missing)
    root = Path(tempfile.mkdtemp(prefix="vigil-pytest-"))
    if len(str(root / "vigild.sock")) > 107:  # a socket's path has a length limit: a deep $TMPDIR is too deep
        os.rmdir(root)
        root = Path(tempfile.mkdtemp(prefix="vigil-pytest-", dir="/tmp"))
    destination = _config_path(request.config, "--vigil-artifacts", "vigil_artifacts")
    kept_at = root if destination is None else destination / _safe_name(node.nodeid or "session")
    if isinstance(node, pytest.Item):
        node.stash[_ARTIFACTS] = kept_at
    daemon: VigilDaemon | None = None
    gadgets: list[_lab.LabAccessory] = []
    failed = True
    try:
        try:
            if own_mock:
                mock = BluetoothMock().start()
                env = mock.env
            daemon = VigilDaemon(root, vigild=binary, timings=options.get("timings"), settings=options.get("settings"),
                                 env=env, accessory=(described or True) if accessory else False, bluetooth=bluetooth,
                                 report_in_errors=False)
            daemon.artifacts = kept_at
            daemon.bluetooth_mock = mock
            try:
                daemon.start()
            except Exception as error:
                error.add_note(f"vigild's folder (kept): {kept_at}")
                raise
            if gadgets_wanted:
                repo = find_repo()
                assert repo is not None
                for description in gadgets_wanted:
                    gadgets.append(_lab.LabAccessory(repo, description, len(gadgets_wanted),
                                                     daemon.root / "devices" / f"{description.name}.log"))
                daemon.accessories = {gadget.description.name: gadget for gadget in gadgets}
                daemon.accessory = gadgets[0]
            for app in spec.apps if spec is not None else ():
                command = [part.replace("{root}", str(daemon.root)) for part in app.command]
                daemon.install_app(app.id, command, background_modes=app.background_modes,
                                   accessory_protocols=app.accessory_protocols, exits_on_suspend=app.exits_on_suspend,
                                   extra=app.extra)
            for app in spec.apps if spec is not None else ():
                if app.launch:
                    daemon.launch(app.id)
            if daemon.accessories and spec is not None:
                _wait_for_accessories(daemon)
        except Exception:
            # Why the setup failed, with the folder: a console that is cut off (a CI job's time
            # limit) loses pytest's summary, not this.
            (root / "setup-error.txt").write_text(traceback.format_exc())
            raise
        failed = False
        yield daemon
        failed = node.stash.get(_FAILED, False) if isinstance(node, pytest.Item) else bool(
            request.session.testsfailed)
    finally:
        for gadget in gadgets:
            gadget.close()
        if daemon is not None and failed:
            daemon.save_artifacts()
        if daemon is not None:
            daemon.stop()
        if mock is not None:
            mock.stop(keep_logs_in=root / "bluez-mock" if failed else None)
        if not failed:
            shutil.rmtree(root, ignore_errors=True)
        elif kept_at != root:
            kept_at.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(kept_at, ignore_errors=True)
            shutil.move(str(root), str(kept_at))


@pytest.fixture
def vigild(request: pytest.FixtureRequest) -> Iterator[VigilDaemon]:
    """A private vigild for this test (see `vigil.testing.VigilDaemon`)."""
    yield from _start_daemon(request, request.node)


@pytest.fixture(scope="module")
def vigild_module(request: pytest.FixtureRequest) -> Iterator[VigilDaemon]:
    """One private vigild for the tests of a module (no virtual hardware: marker and
    accessory fixtures are per test); kept when any test of the session failed."""
    yield from _start_daemon(request, request.node)


@pytest.fixture(scope="session")
def vigild_session(request: pytest.FixtureRequest) -> Iterator[VigilDaemon]:
    """One private vigild for the whole session (no virtual hardware); kept when any test failed."""
    yield from _start_daemon(request, request.node)


@pytest.fixture
def bluez_mock(request: pytest.FixtureRequest) -> Iterator[BluetoothMock]:
    """The BlueZ mock on a private system-like D-Bus (needs dbus-daemon, python3-dbus and
    python3-dbusmock); in the lab, bluetoothd and Bumble peers (`_lab.LabBluetooth`)."""
    if _in_lab(request.config):
        repo = find_repo()
        assert repo is not None
        radio = _lab.LabBluetooth(repo)
        try:
            yield cast(BluetoothMock, radio)
        finally:
            radio.stop()
        return
    missing = missing_for_bluetooth()
    if missing:
        pytest.skip(missing)
    mock = BluetoothMock().start()
    node = request.node
    try:
        yield mock
    finally:
        kept = node.stash.get(_ARTIFACTS, None) if node.stash.get(_FAILED, False) else None
        mock.stop(keep_logs_in=None if kept is None else kept / "bluez-mock")


def _wait_for_accessories(daemon: VigilDaemon) -> None:
    expected = {a.description.serial for a in daemon.accessories.values()}
    daemon.wait_until(lambda: expected <= {a.get("serialNumber") for a in daemon.control(
        lambda c: c.accessories()["accessories"])}, f"the accessories {sorted(expected)} in vigild", 30)


@pytest.fixture
def vigil_control(vigild: VigilDaemon) -> Iterator[ControlClient]:
    with ControlClient(vigild.socket) as control:
        yield control


@pytest.fixture
def virtual_accessories(vigild: VigilDaemon) -> dict[str, VirtualAccessory]:
    """The virtual accessories by name, once vigild lists every one of them; in the lab
    USB gadgets (`_lab.LabAccessory`) with the same identities."""
    assert vigild.accessory is not None
    _wait_for_accessories(vigild)
    return vigild.accessories


@pytest.fixture
def virtual_accessory(virtual_accessories: dict[str, VirtualAccessory]) -> VirtualAccessory:
    """The first virtual accessory (the default one: 1209:0001, VGL123, org.example.sensor org.example.dfu)."""
    return next(iter(virtual_accessories.values()))


@pytest.fixture
def accessory_session(request: pytest.FixtureRequest) -> Iterator[ControlSession]:
    """A control-role session with the first virtual accessory, on its first protocol; with
    --vigil-place, the session of the labgrid place's VigilSessionDriver (target main of --lg-env)."""
    if request.config.getoption("--vigil-place"):
        from .labgrid import PlaceSession
        target = request.getfixturevalue("target")  # labgrid's pytest plugin: --lg-env
        driver = target.get_driver("VigilSessionDriver")
        try:
            yield PlaceSession(driver)
        finally:
            target.deactivate(driver)
        return
    vigild = cast(VigilDaemon, request.getfixturevalue("vigild"))
    virtual_accessory = cast(VirtualAccessory, request.getfixturevalue("virtual_accessory"))
    with ControlClient(vigild.socket) as control:
        serial = virtual_accessory.description.serial
        accessory = next(a for a in control.accessories()["accessories"] if a.get("serialNumber") == serial)
        opened = control.open_session(accessory["connectionID"], virtual_accessory.description.protocols[0])
        yield ControlSession(control, int(opened["session"]))

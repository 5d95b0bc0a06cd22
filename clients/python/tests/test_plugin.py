"""The pytest plugin itself, on suites run in a pytest of their own (pytester):
failure reports and artifacts (terminal and JUnit XML), skips when system
packages are missing, and async tests with pytest-asyncio in strict mode, in
auto mode and absent."""

import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def run(pytester: pytest.Pytester, request: pytest.FixtureRequest, *arguments: str,
        env: dict[str, str] | None = None) -> pytest.RunResult:
    """The suite in pytester's folder, in a new pytest process with this one's sys.path and --vigild."""
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    pytester._monkeypatch.setenv("TMPDIR", str(temporary_folder(pytester)))
    for key, value in (env or {}).items():
        pytester._monkeypatch.setenv(key, value)
    options = ["-p", "no:cacheprovider", "-rs"]
    if not request.config.pluginmanager.has_plugin("vigil"):  # not installed: running from the source
        options += ["-p", "vigil.pytest_plugin"]
    if request.config.getoption("--vigild"):
        options += [f"--vigild={request.config.getoption('--vigild')}"]
    return pytester.runpytest_subprocess(*options, *arguments)


@pytest.fixture(autouse=True)
def short_tmp(pytester: pytest.Pytester) -> Iterator[Path]:
    """The inner suite's TMPDIR: short, for the daemon's socket path (107 bytes at most)."""
    folder = Path(tempfile.mkdtemp(prefix="vp-", dir="/tmp"))
    pytester._monkeypatch.setattr(pytester, "_vigil_tmp", folder, raising=False)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def temporary_folder(pytester: pytest.Pytester) -> Path:
    folder: Path = getattr(pytester, "_vigil_tmp")
    return folder


def left_behind(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in temporary_folder(pytester).iterdir() if p.name.startswith("vigil-pytest-"))


def test_a_failing_test_keeps_its_artifacts_and_reports_them_once(pytester: pytest.Pytester,
                                                                  request: pytest.FixtureRequest) -> None:
    pytester.makepyfile("""
        import sys

        def test_fails(vigild):
            vigild.install_app("org.example.talker", [sys.executable, "-c",
                               "import time; print('hello from the app', flush=True); time.sleep(60)"])
            vigild.launch("org.example.talker")
            log = vigild.root / "logs" / "org.example.talker.log"
            vigild.wait_until(lambda: log.exists() and "hello from the app" in log.read_text(), "the app's output")
            assert False, "on purpose"

        def test_times_out(vigild):
            vigild.install_app("org.example.sleeper", ["/bin/sleep", "60"])
            vigild.launch("org.example.sleeper")
            vigild.wait_until(lambda: False, "what never comes", timeout=0.2)

        def test_passes(vigild):
            assert vigild.control(lambda control: control.app_list()) == []
    """)
    artifacts = pytester.path / "artifacts"
    junit = pytester.path / "junit.xml"
    result = run(pytester, request, f"--vigil-artifacts={artifacts}", f"--junitxml={junit}")
    result.assert_outcomes(passed=1, failed=2)
    output = result.stdout.str()
    result.stdout.fnmatch_lines(["*on purpose*", "*- vigild -*", "decision log (UTC):",
                                 "  ??:??:??.??? org.example.talker: launch (*", "vigild output:",
                                 f"artifacts (kept): {artifacts}/*test_fails*"])
    result.stdout.fnmatch_lines(["*timed out after 0.2 s waiting for what never comes*",
                                 "  ??:??:??.??? org.example.sleeper: launch (*"])
    assert output.count("decision log (UTC):") == 2  # once per failing test: not again in wait_until's message
    assert "bluetooth: cannot use the system bus" not in output  # no Bluetooth asked for: vigild's is off

    kept = {p.name: p for p in artifacts.iterdir()}
    assert len(kept) == 2, kept
    talker = next(p for name, p in kept.items() if name.endswith("test_fails"))
    assert "hello from the app" in (talker / "logs" / "org.example.talker.log").read_text()
    decisions = (talker / "decision-log.txt").read_text()
    assert "org.example.talker: launch" in decisions
    assert "listening" in (talker / "vigild.out").read_text()
    assert left_behind(pytester) == []  # moved to --vigil-artifacts, and the passing test's folder removed

    cases = {case.get("name"): case for case in ElementTree.parse(junit).iter("testcase")}
    failed = cases["test_fails"]
    properties = {p.get("name"): p.get("value") for p in failed.iter("property")}
    assert properties["vigil_artifacts"] == str(talker)
    assert "org.example.talker: launch" in (properties["vigil_decision_log"] or "")
    failure = failed.find("failure")
    assert failure is not None and "org.example.talker: launch" in (failure.text or "")
    assert failure.text is not None and f"artifacts (kept): {talker}" in failure.text
    assert not list(cases["test_passes"].iter("property"))


def test_without_the_artifacts_option_a_failing_test_keeps_its_daemon_folder(pytester: pytest.Pytester,
                                                                            request: pytest.FixtureRequest) -> None:
    pytester.makepyfile("""
        def test_fails(vigild):
            assert False
    """)
    result = run(pytester, request)
    result.assert_outcomes(failed=1)
    kept = left_behind(pytester)
    assert len(kept) == 1
    result.stdout.fnmatch_lines([f"artifacts (kept): {temporary_folder(pytester) / kept[0]}"])


def test_missing_system_packages_skip_naming_the_package(pytester: pytest.Pytester,
                                                         request: pytest.FixtureRequest) -> None:
    pytester.makepyfile("""
        def test_accessory(virtual_accessory):
            raise AssertionError("not reached")

        def test_bluetooth(bluez_mock, vigild):
            raise AssertionError("not reached")
    """)
    empty = pytester.path / "empty-path"
    empty.mkdir()
    # Neither umockdev-wrapper nor dbus-daemon on PATH.
    result = run(pytester, request, env={"PATH": str(empty)})
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*apt install umockdev gir1.2-umockdev-1.0 python3-gi*",
                                 "*apt install dbus-daemon*"])
    assert left_behind(pytester) == []


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ASYNC_SUITE = """
import pytest
import vigil

async def test_an_unmarked_async_test(vigild):
    async with vigil.Control(vigild.socket) as control:
        assert await control.app_list() == []

@pytest.mark.vigil(timings={"suspend-grace": 1})
async def test_an_async_test_with_the_marker_only():
    pass
"""
MARKED = """
import pytest
import vigil

@pytest.mark.asyncio
async def test_a_marked_async_test(vigild):
    async with vigil.Control(vigild.socket) as control:
        assert (await control.status())["suspension"]
"""


@pytest.mark.parametrize("mode", ["strict", "auto", "absent"])
def test_async_tests_and_the_docs_async_example_in_each_pytest_asyncio_mode(
        pytester: pytest.Pytester, request: pytest.FixtureRequest, mode: str) -> None:
    import test_docs  # the docs' examples, as written
    pytester.makepyfile(test_async=ASYNC_SUITE, test_docs_example=test_docs.example_with("async def test_bluetooth"))
    expected = 4  # two of its own, two of the docs' example
    if mode == "absent":
        arguments = ["-p", "no:asyncio"]
    else:
        pytester.makepyfile(test_marked=MARKED)
        expected += 1
        arguments = ["-p", "asyncio", "-o", f"asyncio_mode={mode}", "-o", "asyncio_default_fixture_loop_scope=function"]
    (pytester.path / "sensor_logger.py").write_text((EXAMPLES / "sensor_logger.py").read_text())
    result = run(pytester, request, *arguments)
    result.assert_outcomes(passed=expected)
    header = result.stdout.str()
    assert ("asyncio: mode=" in header) == (mode != "absent")
    if mode != "absent":
        assert f"mode={mode}" in header.lower() or f"mode=Mode.{mode.upper()}" in header


def test_the_rig_files_come_from_the_installed_package() -> None:
    import vigil.testing
    shipped = Path(vigil.testing.__file__).resolve().parent / "_rig"
    if not shipped.is_dir():
        pytest.skip("vigil runs from its source, not from the wheel (scripts/test-python installs the wheel)")
    for name in ("accessory_testbed.py", "virtual_usb_serial.py", "bluez_mock.py", "vigil_bluez.py"):
        assert vigil.testing.rig_file(name) == shipped / name


def test_a_module_scoped_daemon_is_shared_by_the_module_and_a_session_one_by_all(
        pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    suite = """
        import pathlib

        def test_first(vigild_module, vigild_session):
            vigild_module.install_app("org.example.sleeper", ["/bin/sleep", "60"])
            vigild_module.launch("org.example.sleeper")
            with open("pids.txt", "a") as pids:
                pids.write(f"{__name__} {vigild_module.process.pid} {vigild_session.process.pid}\\n")

        def test_second(vigild_module, vigild_session):
            assert vigild_module.app_info("org.example.sleeper").pid  # the first test's app, still there
            with open("pids.txt", "a") as pids:
                pids.write(f"{__name__} {vigild_module.process.pid} {vigild_session.process.pid}\\n")

        def test_a_test_daemon_is_another(vigild, vigild_module):
            assert vigild.socket != vigild_module.socket and vigild.control(lambda c: c.app_list()) == []
    """
    pytester.makepyfile(test_one=suite, test_two=suite)
    result = run(pytester, request)
    result.assert_outcomes(passed=6)
    lines = [line.split() for line in (pytester.path / "pids.txt").read_text().splitlines()]
    modules = {name: {(module, session) for other, module, session in lines if other == name} for name, *_ in lines}
    assert set(modules) == {"test_one", "test_two"}
    assert all(len(pids) == 1 for pids in modules.values())  # one module daemon for both tests of a module
    (one_module, one_session), = modules["test_one"]
    (two_module, two_session), = modules["test_two"]
    assert one_module != two_module and one_session == two_session
    assert left_behind(pytester) == []


RIG = """
[daemons.gateway]
scope = "session"
timings = { suspend-grace = 0.5 }

[[daemons.gateway.accessories]]
name = "gauge"
vendor-id = "abcd"
product-id = "0042"
serial = "G-1"
protocols = ["com.acme.gauge"]

[[daemons.gateway.apps]]
id = "org.example.sleeper"
exec = ["/bin/sleep", "60"]
launch = true

[[daemons.gateway.apps]]
id = "org.example.idle"
exec = ["{python}", "{rig}/idle.py"]

[daemons.bench]
scope = "function"
bluez-mock = true
"""


def test_a_rig_file_names_daemons_with_their_scope_apps_and_devices(pytester: pytest.Pytester,
                                                                     request: pytest.FixtureRequest) -> None:
    (pytester.path / "rig").mkdir()
    (pytester.path / "rig" / "vigil-rig.toml").write_text(RIG)
    pytester.makeini("[pytest]\nvigil_rig = rig/vigil-rig.toml\n")
    pytester.makepyfile(test_rig="""
        import sys
        PIDS = []

        def test_the_gateway(gateway):
            sleeper = gateway.app_info("org.example.sleeper")
            assert sleeper.pid and sleeper.state != "notRunning"  # launched by the rig
            assert gateway.app_info("org.example.idle").raw["manifestPath"]
            listed = gateway.control(lambda c: c.accessories()["accessories"])
            assert [(a["serialNumber"], a["vendorID"], a["protocolStrings"]) for a in listed] == [
                ("G-1", "abcd", ["com.acme.gauge"])]
            gauge = gateway.accessories["gauge"]
            gauge.write(b"x")
            PIDS.append(gateway.process.pid)

        def test_the_gateway_is_the_same_daemon(gateway):
            PIDS.append(gateway.process.pid)
            assert PIDS[0] == PIDS[1]

        def test_the_bench_has_its_own_bluez_mock(bench, gateway):
            assert bench.bluetooth_mock is not None and bench.socket != gateway.socket
            bench.bluetooth_mock.add_heart_rate_monitor("C0:DE:00:00:00:02")
            assert "bluetooth: disabled" not in bench.log_tail()
    """)
    result = run(pytester, request)
    result.assert_outcomes(passed=3)
    assert left_behind(pytester) == []


def test_a_bad_rig_file_is_a_usage_error_naming_the_key(pytester: pytest.Pytester,
                                                       request: pytest.FixtureRequest) -> None:
    rig = pytester.path / "rig.toml"
    rig.write_text('[daemons.gateway]\nscope = "forever"\n')
    pytester.makepyfile("def test_nothing(): pass")
    result = run(pytester, request, f"--vigil-rig={rig}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*vigil rig file: {rig}: daemons.gateway.scope: one of function, module, session*"])


def test_path_options_work_with_and_without_equals(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    """`--vigild PATH` as two arguments: pytest first takes PATH for a test path when it
    looks for the ini file (the plugin's options are not known yet); the plugin has it look
    again, so the suite's pytest.ini (its keys and addopts) counts as with `--vigild=PATH`,
    not the one beside the binary (which pytest, taking it for a test path, found first)."""
    built = request.config.getoption("--vigild") or os.environ.get("VIGILD")
    if not built:
        pytest.skip("needs a vigild binary (--vigild or $VIGILD)")
    tools = pytester.mkdir("tools")
    (tools / "pytest.ini").write_text('[pytest]\naddopts = -k "not the_suites_ini_counts"\n')
    binary = tools / "vigild"
    binary.symlink_to(os.path.abspath(built))
    suite = pytester.mkdir("suite")
    (suite / "pytest.ini").write_text('[pytest]\nvigil_artifacts = kept\naddopts = -k "not excluded"\n')
    (suite / "test_ini.py").write_text(
        "from pathlib import Path\n\n"
        "def test_the_suites_ini_counts(request, vigild):\n"
        "    assert request.config.inipath == Path(__file__).parent / 'pytest.ini'\n"
        "    assert request.config.getini('vigil_artifacts') == 'kept'\n"
        "    assert request.config.getoption('--vigild') == %r\n\n"
        "def test_excluded():\n"
        "    assert False, 'excluded by the addopts of the ini file'\n" % str(binary))
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    pytester._monkeypatch.setenv("TMPDIR", str(temporary_folder(pytester)))
    plugin = [] if request.config.pluginmanager.has_plugin("vigil") else ["-p", "vigil.pytest_plugin"]
    for spelling in (["--vigild", str(binary)], [f"--vigild={binary}"]):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *plugin, *spelling, str(suite))
        result.assert_outcomes(passed=1, deselected=1)

"""The pytest plugin itself: a failing test's report carries the daemon's decision log."""

import os
import sys

import pytest

pytest_plugins = ["pytester"]


def test_a_failing_test_reports_the_decision_log(pytester: pytest.Pytester, request: pytest.FixtureRequest,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("""
        def test_fails(vigild):
            vigild.install_app("org.example.sleeper", ["/bin/sleep", "60"])
            vigild.launch("org.example.sleeper")
            assert False, "on purpose"

        def test_passes(vigild):
            assert vigild.control(lambda control: control.apps()) == []
    """)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    arguments = ["-p", "no:cacheprovider"]
    if not request.config.pluginmanager.has_plugin("vigil"):  # not installed: running from the source
        arguments += ["-p", "vigil.pytest_plugin"]
    if request.config.getoption("--vigild"):
        arguments += ["--vigild", request.config.getoption("--vigild")]
    result = pytester.runpytest_subprocess(*arguments)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*on purpose*", "*- vigild -*", "decision log:", "*org.example.sleeper: launch*",
                                 "vigild output:"])

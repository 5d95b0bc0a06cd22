"""docs/testing-with-vigil.md's examples, run exactly as written: every
```python block there is either a test file (it defines test functions: it
runs here, in a pytest of its own, with examples/sensor_logger.py beside it)
or a fragment listed below with where it is exercised; every ```toml and
```ini block names its file on its first line (`# vigil-rig.toml`) and is
written there for that run."""

import os
import re
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOCS = Path(__file__).resolve().parents[3] / "docs" / "testing-with-vigil.md"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Blocks that are not test files, by their first line: where what they show is tested.
FRAGMENTS = {
    'console = target.get_driver("VigilSessionDriver")': "tests/test_labgrid.py drives the same driver",
}


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)


def docs_test_files() -> list[str]:
    return [block for block in python_blocks() if re.search(r"^(async )?def test_", block, flags=re.M)]


def example_with(text: str) -> str:
    """The docs' test file that holds `text`."""
    return next(block for block in docs_test_files() if text in block)


def config_files() -> dict[str, str]:
    """The ```toml and ```ini blocks by the file name on their first line."""
    blocks = re.findall(r"^```(?:toml|ini)\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)
    named = {}
    for block in blocks:
        first = block.splitlines()[0]
        assert re.fullmatch(r"# [\w.-]+", first), f"a config block in the docs without its file name: {first!r}"
        named[first[2:]] = block
    return named


def test_every_block_is_a_test_file_a_config_file_or_a_known_fragment() -> None:
    blocks = python_blocks()
    assert blocks, f"no python blocks in {DOCS}"
    unknown = [b.splitlines()[0] for b in blocks if b not in docs_test_files() and b.splitlines()[0] not in FRAGMENTS]
    assert unknown == [], "a python block in the docs that no test runs"
    assert set(config_files()) == {"pytest.ini", "vigil-rig.toml"}


def test_the_docs_examples_pass_as_written(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    files = docs_test_files()
    for number, block in enumerate(files):
        (pytester.path / f"test_docs_{number}.py").write_text(block)
    for name, text in config_files().items():
        (pytester.path / name).write_text(text)
    (pytester.path / "sensor_logger.py").write_text((EXAMPLES / "sensor_logger.py").read_text())
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    arguments = ["-p", "no:cacheprovider", "-rs"]
    if request.config.getoption("--vigild"):
        arguments += [f"--vigild={request.config.getoption('--vigild')}"]
    result = pytester.runpytest_subprocess(*arguments)
    tests = sum(len(re.findall(r"^(?:async )?def test_", block, flags=re.M)) for block in files)
    result.assert_outcomes(passed=tests)

"""The pytest plugin as a user writes against it: a conftest can give the session another runtime (here the shipped
FakeRuntime, so nothing is spawned), options are namespaced (--boot-*, the old spellings still work), and under
pytest-xdist it says why it will not split a run instead of booting the same GPUs twice."""

from __future__ import annotations

import pytest

from tests.builders import write_matrix

pytest_plugins = ["pytester"]

TEST_FILE = """
from harness.pytest_plugin import explain


def test_cell(boot_result):
    assert boot_result.matched is not False, explain(boot_result)
"""


@pytest.fixture
def matrix(tmp_path):
    return write_matrix(tmp_path / "m.yaml", {
        "name": "plugin", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
        "axes": {"c": {"a": {}, "b": {}}}, "expect": [{"outcome": "booted"}]})


def test_a_conftest_boots_the_matrix_on_a_fake_runtime_and_a_mismatch_fails_its_test(pytester, matrix, tmp_path):
    pytester.makeconftest("""
import pytest
from harness.runtime.fake import FakeRuntime, Script


@pytest.fixture(scope="session")
def boot_runtime():
    return FakeRuntime({"c_b": Script.refused_kv()})
""")
    pytester.makepyfile(test_matrix=TEST_FILE)
    result = pytester.runpytest_subprocess("--boot-matrix", str(matrix), "--boot-results-dir", str(tmp_path / "r"),
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*cell c_b: expected booted, got refused (kv_cache_too_small)*"])
    (run,) = (tmp_path / "r").iterdir()
    assert '"status": "complete"' in (run / "results.json").read_text()


def test_the_old_option_spellings_still_work(pytester, matrix, tmp_path):
    pytester.makeconftest("""
import pytest
from harness.runtime.fake import FakeRuntime


@pytest.fixture(scope="session")
def boot_runtime():
    return FakeRuntime()
""")
    pytester.makepyfile(test_matrix=TEST_FILE)
    result = pytester.runpytest_subprocess("--matrix", str(matrix), "--results-dir", str(tmp_path / "r"),
                                           "--select", "c=a", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_under_pytest_xdist_the_plugin_refuses_in_one_clear_line(pytester, matrix):
    import xdist  # noqa: F401 - a pinned test dependency (pyproject `test` extra)
    pytester.makepyfile(test_matrix=TEST_FILE)
    result = pytester.runpytest_subprocess("--boot-matrix", str(matrix), "-n", "2", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--boot-matrix does not run under pytest-xdist (-n)*--boot-shard I/N*"])


@pytest.mark.parametrize("bad", [
    pytest.param({"matrix": "name: x\naxes: {a: {flag: --x, values: [1]}}\ntimeout_s: -1\n"}, id="bad-matrix-key"),
    pytest.param({"select": "nosuch=1"}, id="bad-select"),
])
def test_a_bad_matrix_or_selection_is_one_error_line_without_a_traceback(pytester, matrix, bad):
    pytester.makepyfile(test_matrix=TEST_FILE)
    path = matrix
    if "matrix" in bad:
        path = pytester.path / "bad.yaml"
        path.write_text(bad["matrix"])
    extra = ["--boot-select", bad["select"]] if "select" in bad else []
    result = pytester.runpytest_subprocess("--boot-matrix", str(path), *extra, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = [line for line in result.stderr.lines if line.strip()]
    assert len(err) == 1 and err[0].startswith("ERROR: "), result.stderr.lines
    assert "Traceback" not in result.stdout.str() + result.stderr.str() and "pluggy" not in result.stdout.str()

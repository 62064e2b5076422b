"""The pytest plugin as a user writes against it: a conftest can give the session another runtime (here the shipped
FakeRuntime, so nothing is spawned), options are namespaced (--boot-*: another project's session gains no other
option; the old spellings still work, each with its deprecation warning, and are never registered), and under
pytest-xdist it says why it will not split a run instead of booting the same GPUs twice."""

from __future__ import annotations

import re

import pytest

from harness.pytest_spellings import OLD, rewrite, used
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


def test_the_old_option_spellings_still_work_each_with_its_deprecation_warning(pytester, matrix, tmp_path):
    pytester.makeconftest("""
import pytest
from harness.runtime.fake import FakeRuntime


@pytest.fixture(scope="session")
def boot_runtime():
    return FakeRuntime()
""")
    pytester.makepyfile(test_matrix=TEST_FILE)
    result = pytester.runpytest_subprocess("--matrix", str(matrix), f"--results-dir={tmp_path / 'r'}",
                                           "--select", "c=a", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=3)
    assert len(list((tmp_path / "r").iterdir())) == 1
    for old in ("matrix", "results-dir", "select"):
        result.stdout.fnmatch_lines([f"*PytestDeprecationWarning: --{old} is a deprecated spelling of --boot-{old} "
                                     f"(boot-harness); the next release reads only --boot-{old}"])
    assert "--shard is a deprecated" not in result.stdout.str()


def _options(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest_inprocess("--help", *args)
    assert result.ret == 0
    lines = (re.match(r"  (-[^\s,]+(?:, -[^\s,]+)*)", line) for line in result.stdout.lines)  # "  -x, --exitfirst  ..."
    return {name.partition("=")[0] for m in lines if m for name in m.group(1).split(", ")}


def test_a_plain_pytest_session_of_another_project_gains_only_prefixed_options(pytester):
    """The entry point loads the plugin into every session of a project that installs the package: what it adds to
    `pytest --help` there is `--boot-*`, nothing another project could be using."""
    pytester.makepyfile(test_trivial="def test_one():\n    assert True\n")
    without = _options(pytester, "-p", "no:boot_harness")
    assert {"-k", "--exitfirst", "--pdb"} <= without
    added = _options(pytester) - without
    assert added == {"--boot-matrix", "--boot-results-dir", "--boot-select", "--boot-shard", "--boot-timeout"}
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_a_conftest_that_registers_an_old_spelling_keeps_it(pytester):
    """Another project's own --select and --shard are its options: not rewritten, no warning, no clash."""
    pytester.makeconftest("""
def pytest_addoption(parser):
    parser.addoption("--select", action="append", default=[])
    parser.addoption("--shard", action="store_true")
""")
    pytester.makepyfile(test_mine="""
def test_mine(request):
    assert request.config.getoption("select") == ["fast"] and request.config.getoption("shard") is True
    assert request.config.getoption("boot_select") is None and request.config.getoption("boot_shard") is None
""")
    result = pytester.runpytest_subprocess("--select", "fast", "--shard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "deprecated spelling" not in result.stdout.str()


@pytest.mark.parametrize("args,keep,expected", [
    (["--matrix", "m.yaml", "-k", "x"], (), ["--boot-matrix", "m.yaml", "-k", "x"]),
    (["--results-dir=r", "--shard=1/2"], (), ["--boot-results-dir=r", "--boot-shard=1/2"]),
    (["--select", "a", "--select=b"], {"--select"}, ["--select", "a", "--select=b"]),
    (["--boot-matrix", "m", "--", "--matrix"], (), ["--boot-matrix", "m", "--", "--matrix"]),
    (["--matrixes", "--selected=1"], (), ["--matrixes", "--selected=1"]),
], ids=["separate-value", "joined-value", "claimed-by-a-conftest", "after-double-dash", "longer-names"])
def test_the_old_spellings_are_rewritten_as_options_only(args, keep, expected):
    assert rewrite(args, keep) == expected
    changed = [a.partition("=")[0] for a, b in zip(args, expected, strict=True) if a != b]
    assert list(used(args, expected)) == [(old, OLD[old]) for old in dict.fromkeys(changed)]


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

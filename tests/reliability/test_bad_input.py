"""Bad input: the matrix files the corpus in tests/data/bad_matrices lacked, bad command-line values, and the table of
every bad file in docs/reliability.md kept in sync with what the loader says.

The corpus itself (99 files: negative and zero timeouts, missing patch files, malformed hashes, ...) is checked by
tests/unit/test_bad_matrices.py; the new files live in tests/reliability/data/bad_matrices with their own EXPECTED.tsv
and are checked here the same way: `boot-harness validate` exits 2 with one line `FILE:key: message`. How fast is
bounded by the work done (lines of the loader run for the alias bomb), never by the clock of a loaded machine.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.reliability import cli, fake_matrix, run_dirs
from tests.reliability import bad_input_table as table

EXTRA = table.EXTRA
EXTRA_ROWS = table.rows(EXTRA / "EXPECTED.tsv")


def _param(row):
    return pytest.param(row, id=row[0])


def test_every_new_bad_matrix_is_listed_and_says_what_its_mistake_is():
    files = sorted(p.name for p in EXTRA.glob("*.yaml"))
    assert files == sorted(r[0] for r in EXTRA_ROWS)
    for name in files:
        assert (EXTRA / name).read_bytes().startswith(b"# "), name
    assert not set(files) & {p.name for p in table.CORPUS.glob("*.yaml")}, "already in the corpus"


@pytest.mark.parametrize("row", [_param(r) for r in EXTRA_ROWS])
def test_new_bad_matrix_is_one_line_exit_2(row):
    file, key, words = row
    shown = f"tests/reliability/data/bad_matrices/{file}"
    try:  # a hang bound, not a speed check: the bomb's work is bounded below (test_the_alias_bomb_costs_...)
        r = cli("validate", "--matrix", shown, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("validate hung")
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 2, f"exit {r.returncode}: {r.stdout}{r.stderr}"
    (line,) = r.stderr.splitlines()
    prefix = f"{shown}:{key}: " if key else f"{shown}: "
    assert line.startswith(prefix) and words in line, line


def test_the_alias_bomb_costs_the_loader_a_bounded_number_of_steps():
    """10^8 values once expanded: the loader stops counting at MAX_VALUES, so the lines it runs are a few per value
    up to that bound (not per expanded value), whatever the machine's speed."""
    import sys

    from harness.errors import ConfigError
    from harness.matrix.load import MAX_VALUES, load_matrix

    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
        return count

    sys.settrace(count)
    try:
        with pytest.raises(ConfigError, match="more than 100000 values"):
            load_matrix(EXTRA / "alias_bomb.yaml")
    finally:
        sys.settrace(None)
    assert steps < 20 * MAX_VALUES, f"{steps:,} lines run for a file of 200 bytes"


def test_the_doc_table_of_bad_matrices_is_in_sync():
    assert table.current() is not None, f"{table.DOC} lacks the generated table"
    assert table.current() == table.render(), "regenerate it: python -m tests.reliability.bad_input_table --write"


# ---------------------------------------------------------------------------------------------------- the flags


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf"])
def test_a_timeout_flag_that_is_not_a_positive_number_is_one_line_exit_2(value, tmp_path):
    m = fake_matrix(tmp_path / "m.yaml", {"boot": {"FAKE_VLLM_SCENARIO": "boot"}}, timeout_s=30)
    r = cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), f"--timeout-s={value}", timeout=60)
    assert r.returncode == 2, f"exit {r.returncode}; {r.stderr[-500:]}"
    assert len(r.stderr.strip().splitlines()) == 1 and "--timeout-s" in r.stderr
    assert run_dirs(tmp_path / "r") == [], "nothing was booted"


@pytest.mark.parametrize("args,words", [
    (["run", "--resume", "{tmp}/no-such-run"], "not a run directory"),
    (["run", "--resume", "{tmp}/torn"], "not a valid run record"),
    (["run", "--select", "case=nope", "--results-dir", "{tmp}/r"], "unknown value 'nope'"),
    (["repro", "case_nope"], "no cell 'case_nope'"),
], ids=["resume-missing", "resume-torn-results-json", "select-unknown-value", "repro-unknown-cell"])
def test_bad_invocations_are_one_line_exit_2(args, words, tmp_path):
    m = fake_matrix(tmp_path / "m.yaml", {"boot": {"FAKE_VLLM_SCENARIO": "boot"}})
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "results.json").write_text('{"schema_version": 1, "run_id": "x", "cel')  # cut mid-write
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = cli(argv[0], "--matrix", str(m), *argv[1:], timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr

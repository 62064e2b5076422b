"""The lint gate in the suite, and so in CI: ruff, mypy and the suppressions' reasons (scripts/lint.py, configured in
pyproject.toml) find nothing. A finding fails here with the tool's own lines. Missing tools fail under CI and skip,
saying why, elsewhere (the `test` extra pins them; scripts/setup-dev.sh installs it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.env import require

ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / "scripts" / "lint.py"


def lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LINT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("check", ["ruff", "mypy"])
def test_the_tool_finds_nothing(check):
    require(check, importlib.util.find_spec(check) is not None, "scripts/setup-dev.sh installs the `test` extra")
    done = lint(check)
    assert done.returncode == 0, f"{check} found:\n{done.stdout}{done.stderr}"


def test_every_suppression_names_its_rule_and_says_why():
    done = lint("reasons")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_suppression_without_a_rule_or_a_reason_is_named(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("a = 1  # noqa: E731 - a reason\n"
                   "b = 1  # noqa: E731\n"
                   "c = 1  # noqa\n"
                   "d = 1  # type: ignore[misc]  # a reason\n"
                   "e = 1  # type: ignore[misc]\n"
                   "f = 1  # type: ignore\n"
                   "g = '# noqa'  # a string is no comment\n")
    done = lint("reasons", str(src))
    assert done.returncode == 1
    assert [line.split(":")[1] for line in done.stdout.splitlines()[:-1]] == ["2", "3", "5", "6"]

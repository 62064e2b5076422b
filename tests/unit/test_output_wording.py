"""What every reading command prints over the example nights reads as English: no word twice in a row ("starting at
at"), no count of one with a plural noun ("1 runs"). In-process (`harness.cli.main`), each command once, read line
by line at 200 columns (a table's rows end and start with words of their own, its columns stand apart)."""

from __future__ import annotations

import re

import pytest

from harness.cli import main
from tests.helpers.env import ROOT

RUNS = ROOT / "examples" / "runs"
N1, N2, N3 = (str(RUNS / f"cpu-tiny-night{i}") for i in (1, 2, 3))
LOG = str(RUNS / "cpu-tiny-night3" / "logs" / "mml2048-spec_draft-kv_tight.log")

COMMANDS = {
    "report": ["report", N3],
    "compare": ["compare", N1, N3], "history": ["history", str(RUNS)], "history of one night": ["history", N1],
    "check": ["check", N3], "analyze": ["analyze", N3], "facts": ["facts", LOG],
}
DOUBLED = re.compile(r"\b([A-Za-z]{2,}) \1\b", re.IGNORECASE)
ONE_PLURAL = re.compile(r"\b1 (runs|nights|cells|lines|steps|changes|samples|files|times|errors|warnings|boots|"
                        r"phases|points|tokens|requests|values|seconds|days|cases)\b")


@pytest.mark.parametrize("argv", list(COMMANDS.values()), ids=list(COMMANDS))
def test_no_word_twice_and_no_one_with_a_plural(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code = main(argv)
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()  # a table's columns stand two spaces apart: words of one cell, one
    assert code in (0, 1) and any(lines), (code, out.err)
    assert [ln for ln in lines if DOUBLED.search(ln) or ONE_PLURAL.search(ln)] == []
    assert DOUBLED.search("starting at at 3 s") and ONE_PLURAL.search("of 1 runs"), "the test can fail"

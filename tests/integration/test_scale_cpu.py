"""Scale-out with real vLLM on the CPU, read from the CPU example's own shards (cpu_example_shards: shard 1/2 and 2/2,
each `--parallel 2`, merged): cells really overlap, shards are disjoint and complete, merge keeps every log and
refuses a run given twice. An empty shard boots nothing."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from tests.helpers.boots import CPU_EXAMPLE, harness_cli, only_run_dir, read_run

pytestmark = pytest.mark.vllm


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_shards_are_disjoint_and_cover_the_matrix(vllm_cpu):
    every = set(harness_cli("cells", "--matrix", str(CPU_EXAMPLE), env=vllm_cpu).stdout.split())
    parts = [set(harness_cli("cells", "--matrix", str(CPU_EXAMPLE), "--shard", f"{i}/3", env=vllm_cpu).stdout.split())
             for i in (1, 2, 3)]
    assert set().union(*parts) == every and sum(map(len, parts)) == len(every)


def test_parallel_2_runs_cells_at_once_with_every_expectation_matched(cpu_example_shards):
    base, procs, _ = cpu_example_shards
    for i, proc in procs.items():
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "parallel: 2" in proc.stderr
        run = read_run(only_run_dir(base / f"s{i}"))
        assert run["shard"] == f"{i}/2" and run["status"] == "complete"
        assert all(c["matched"] for c in run["cells"])
    cells = read_run(only_run_dir(base / "s1"))["cells"]
    overlaps = [(a["cell_id"], b["cell_id"]) for a in cells for b in cells if a is not b
                and _t(a["started_at"]) < _t(b["finished_at"]) and _t(b["started_at"]) < _t(a["finished_at"])]
    assert overlaps, "with --parallel 2 some cells were up at the same time"


def test_two_shards_merge_into_one_run_with_every_log(cpu_example_shards):
    base, _, merge = cpu_example_shards
    assert merge.returncode == 0, merge.stderr
    merged = read_run(base / "merged")
    assert merged["status"] == "complete" and merged["summary"]["mismatched"] == 0
    for c in merged["cells"]:
        assert (base / "merged" / "logs" / f"{c['cell_id']}.log").stat().st_size > 0
    sources = json.loads((base / "merged" / "merge.json").read_text())["merged_from"]
    assert sorted(s["shard"] for s in sources) == ["1/2", "2/2"]
    one = only_run_dir(base / "s1")
    again = harness_cli("merge", str(one), str(one), "--out", str(base / "bad"))
    assert again.returncode == 2 and "given twice" in again.stderr, again.stderr
    assert not (base / "bad").exists()


def test_an_empty_shard_boots_nothing_and_writes_an_empty_complete_run(vllm_cpu, tmp_path):
    proc = harness_cli("run", "--matrix", str(CPU_EXAMPLE), "--select", "spec=off", "--shard", "2/2",
                       "--results-dir", str(tmp_path), env=vllm_cpu)
    assert proc.returncode == 0 and "none of the 2 selected cells" in proc.stderr, proc.stderr
    run = read_run(only_run_dir(tmp_path))
    assert (run["status"], run["shard"], run["cells"]) == ("complete", "2/2", [])

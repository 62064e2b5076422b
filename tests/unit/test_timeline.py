"""Where a boot's time went: the harness's own clock on each milestone, the phase a verdict finds a server in, and the
whole path through the executor with the FakeRuntime (a server that stalls in one phase times out naming it;
`within_s`; `compare` flags a boot made twice as slow), the runner and the scripts on one FakeClock: a slow boot and a
deadline are time that passes for the harness, exactly, and not for the test.

How to read a timeline::

    from harness.watch.timeline import TimelineRecorder
    rec = TimelineRecorder(clock, start)          # what attempt.py makes per cell
    rec.mark(Milestone.weights_loaded)            # the watch does this as each line arrives
    rec.timeline(durations, decided_at).phase     # PhaseAt(name="CUDA-graph capture", after=kv_sized, for_s=…)
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.tolerance import Tolerance
from harness.boot.attempt import CellRunner, NullObserver, watch_config
from harness.boot.executor import Executor
from harness.cli.tolerances import parse_time_tolerance
from harness.clock import FakeClock
from harness.errors import UsageError
from harness.gpu.inventory import CpuInventory
from harness.logfacts.timeline import Durations, Milestone, Milestones, Timeline, phase_at, skipped
from harness.results.model import RunStatus
from harness.results.store import RunStore
from harness.runtime.fake import BOOT_LINES, FakeRuntime, Script
from harness.watch.timeline import TimelineRecorder
from tests.builders import fake_cells


def executor_on(clock: FakeClock, loaded, cells, scripts: dict, results_dir: Path,
                default: Script = Script.booted()) -> Executor:
    """One cell at a time on the FakeRuntime, the runner and the scripts on one FakeClock: a script's `line_delay_s`
    is time that passes for the watch and the timeline, not time the test waits (nor does a deadline: the test
    `advance`s the clock past it)."""
    runtime = FakeRuntime(scripts, default=default, clock=clock)
    store = RunStore.create(results_dir, loaded, runtime.name, [c.id for c in cells])
    return Executor(CellRunner(loaded, runtime, store, watch_config(loaded), clock=clock), CpuInventory(1), 1)


def run_on_clock(loaded, cells, scripts: dict, results_dir: Path, default: Script = Script.booted()) -> RunStore:
    executor = executor_on(FakeClock(), loaded, cells, scripts, results_dir, default)
    executor.run(cells)
    return executor.store


class StallWatch(NullObserver):
    """Tells when a cell's timeline reached `milestone` (the watch has read that line)."""

    def __init__(self, milestone: Milestone):
        self.milestone, self.reached = milestone, threading.Event()

    def cell_milestone(self, cell, milestone, at_s):
        if milestone == self.milestone:
            self.reached.set()


def test_a_milestone_moves_with_the_last_rank_until_a_later_phase_begins():
    clock = FakeClock()
    rec = TimelineRecorder(clock, start=100.0)
    rec.mark(Milestone.weights_loaded, 110.0)  # rank 0
    rec.mark(Milestone.weights_loaded, 112.0)  # rank 1: the phase ended for the engine now
    rec.mark(Milestone.compiled, 130.0)
    rec.mark(Milestone.weights_loaded, 131.0)  # a straggler after compile began: not the end of the weights phase
    m = rec.milestones()
    assert (m.weights_loaded, m.compiled) == (12.0, 30.0)


def test_milestones_never_go_backwards_even_when_threads_report_out_of_order():
    rec = TimelineRecorder(FakeClock(), start=0.0)
    rec.mark(Milestone.listening, 40.0)
    rec.mark(Milestone.healthy, 39.9)  # the poller's clock read a hair before the line's
    assert rec.milestones().healthy == 40.0
    reached = [t for _, t in rec.milestones().reached()]
    assert reached == sorted(reached)


def test_the_phase_is_the_one_ending_at_the_next_milestone_not_yet_reached():
    m = Milestones(started=0.0, first_line=2.0, engine_started=10.0, weights_loaded=40.0, compiled=110.0,
                   kv_sized=410.0)
    at = phase_at(m, 1800.0)
    assert (at.name, at.after, at.for_s) == ("CUDA-graph capture", Milestone.kv_sized, 1390.0)
    assert at.describe() == "in CUDA-graph capture for 1,390 s"
    # an eager boot never captures graphs: it is warming up
    assert phase_at(m, 1800.0, skipped(eager=True, device="gpu")).name == "warm-up"
    # a CPU never captures CUDA graphs either; before any line the server is starting
    assert phase_at(Milestones(), 3.0).name == "server start"


def test_spans_name_each_phase_by_the_milestone_that_ends_it_and_the_longest_wins():
    t = Timeline(milestones=Milestones(started=0.5, first_line=1.0, engine_started=12.0, loading_started=19.0,
                                       weights_loaded=20.0, kv_sized=21.0, engine_ready=22.0, listening=23.0,
                                       healthy=23.5, served=23.6, decided=23.6))
    spans = {s.name: s.seconds for s in t.spans()}
    assert spans == {"server start": 0.5, "imports": 0.5, "API server set-up / engine process start": 11.0,
                     "engine start-up / worker start": 7.0, "weight loading": 1.0,
                     "profiling and KV sizing": 1.0, "warm-up": 1.0, "API server start": 1.0, "/health": 0.5,
                     "probe request": 0.1}
    assert t.longest().name == "API server set-up / engine process start"


def test_a_server_that_stalls_in_one_phase_times_out_naming_it(tmp_path):
    """The scripted server logs its boot up to the KV size, then hangs: the deadline's verdict says where."""
    loaded, cells = fake_cells(tmp_path, timeout_s=1.5)
    clock, stalled = FakeClock(), StallWatch(Milestone.kv_sized)
    executor = executor_on(clock, loaded, cells[:1], {"c_a": Script.full_boot(until="graphs_captured")}, tmp_path / "r")
    results: list = []
    boot = threading.Thread(target=lambda: results.extend(executor.run(cells[:1], stalled)))
    boot.start()
    assert stalled.reached.wait(10)
    clock.advance(1.5)  # the stall lasts until the deadline
    boot.join(10)
    (r,) = results
    assert (r.outcome, r.reason) == ("timeout", "deadline")
    assert r.detail.startswith("no verdict within 1.5 s: in CUDA-graph capture for ")
    assert r.timeline.phase.after is Milestone.kv_sized and r.timeline.phase.name == "CUDA-graph capture"
    assert r.timeline.milestones.graphs_captured is None and r.timeline.milestones.decided >= 1.5


def test_a_full_boot_records_every_milestone_in_order_and_the_durations_vllm_printed(tmp_path):
    loaded, cells = fake_cells(tmp_path)
    executor = executor_on(FakeClock(), loaded, cells[:1], {"c_a": Script.full_boot(line_delay_s=0.02)},
                           tmp_path / "r")
    (r,) = executor.run(cells[:1])
    reached = r.timeline.milestones.reached()
    assert [m.value for m, _ in reached] == ["started", *(m for m, _ in BOOT_LINES), "healthy", "served", "decided"]
    times = [t for _, t in reached]
    assert times == sorted(times) and r.timeline.milestones.decided == r.timings.verdict_s
    assert r.timeline.durations == Durations(model_load_s=5.1, model_load_gib=14.99, compile_s=21.5,
                                             compile_cache_hit=False, graph_capture_s=12.0, graph_capture_gib=0.52,
                                             engine_init_s=41.2)
    on_disk = json.loads((executor.store.run_dir / "cells" / "c_a.json").read_text())
    assert on_disk["timeline"]["milestones"]["kv_sized"] == r.timeline.milestones.kv_sized
    assert on_disk["timeline"]["phase"] == {"name": "verdict", "after": "served", "for_s": 0.0}


def test_within_s_bounds_the_verdict_and_a_slow_boot_says_which_phase_was_slow(tmp_path):
    loaded, cells = fake_cells(tmp_path, expect=[{"where": {"c": "a"}, "outcome": "booted", "within_s": 30},
                                              {"outcome": "booted", "within_s": 0.2}])
    store = run_on_clock(loaded, cells, {"c_b": Script.full_boot(line_delay_s=0.1)}, tmp_path / "r")
    a, b = store.finish(RunStatus.complete).cells
    assert (a.matched, a.expected.within_s) == (True, 30)
    assert b.outcome == "booted" and b.matched is False
    assert b.miss().startswith("booted (ready) after ") and ", expected within 0.2 s: longest phase " in b.miss()


def test_compare_flags_a_boot_made_twice_as_slow_per_cell_and_per_phase(tmp_path):
    loaded, cells = fake_cells(tmp_path)
    fast = run_on_clock(loaded, cells, {}, tmp_path / "a", default=Script.full_boot(line_delay_s=0.02))
    slow = run_on_clock(loaded, cells, {"c_b": Script.full_boot(line_delay_s=0.4)}, tmp_path / "b",
                        default=Script.full_boot(line_delay_s=0.02))
    # c_b: 0.14 s, then 2.8 s, on the fake clock; c_a 0.14 s both times (well inside the 1.5 s tolerance)
    fast_run, slow_run = fast.finish(RunStatus.complete), slow.finish(RunStatus.complete)
    diff = compare_runs(fast_run, slow_run, time_tolerance=Tolerance.of_seconds(0.5, 1.5))
    assert diff.has_regression and not diff.regressions  # the outcomes agree: only the time regressed
    assert {x.cell_id for x in diff.slower} == {"c_b"}
    boot = next(x for x in diff.slower if x.what == "boot")
    assert boot.b_s > 2 * boot.a_s
    assert json.loads(json.dumps(diff.output().model_dump(mode="json")))["time_regressions"][0]["cell_id"] == "c_b"
    # the same runs under a tolerance the change does not exceed both ways: nothing
    assert not compare_runs(fast_run, slow_run, time_tolerance=Tolerance.of_seconds(0.5, 60)).slower


@pytest.mark.parametrize("text,want", [("25%,30s", (0.25, 30.0)), ("30s,10%", (0.1, 30.0)), ("50%", (0.5, 30.0)),
                                       ("5s", (0.25, 5.0)), ("0%,0s", (0.0, 0.0))])
def test_the_time_tolerance_takes_a_percentage_and_seconds_in_either_order(text, want):
    t = parse_time_tolerance(text)
    assert (t.rel, t.absolute) == want


@pytest.mark.parametrize("text", ["", "25", "25%,30", "fast", "25%,30s,1%", "10%,20%", "-5%"])
def test_a_bad_time_tolerance_is_one_usage_error(text):
    with pytest.raises(UsageError, match="--time-tolerance"):
        parse_time_tolerance(text)



def test_the_live_table_shows_the_phase_each_booting_cell_is_in_now(tmp_path):
    """The executor tells the observer each milestone as it happens; the live table names the phase a cell is in."""
    import io
    import time

    from rich.console import Console

    from harness.report.progress import LiveProgress

    loaded, cells = fake_cells(tmp_path, values=("a",), timeout_s=3)
    clock = FakeClock()
    executor = executor_on(clock, loaded, cells, {"c_a": Script.full_boot(until="graphs_captured")}, tmp_path / "r")
    console = Console(file=io.StringIO(), width=160)
    progress = LiveProgress(cells, console)
    worker = threading.Thread(target=executor.run, args=(cells, progress))
    worker.start()
    try:
        deadline = time.monotonic() + 2.5
        while "kv_sized" not in progress.reached.get("c_a", {}) and time.monotonic() < deadline:
            time.sleep(0.01)
        console.print(progress)
    finally:
        clock.advance(3)  # the stall lasts until the deadline
        worker.join()
    assert "in CUDA-graph capture for " in console.file.getvalue()
    assert progress.reached == {}, "a finished cell has no live phase"

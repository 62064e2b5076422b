"""How cells run at once: each on its own GPUs (a fake inventory here), after those GPUs are back at idle, with a
`gpu_mem_util_exceeds_free` refusal retried once instead of reported, and Ctrl-C/SIGTERM leaving no server behind. The
servers are real processes (tests/fakes/fake_vllm.py behind a small wrapper that records what each one was given); every
wait of the harness's own (the idle wait) is on a FakeClock, and the test's own waits poll, so nothing here sleeps."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness.boot.attempt import CellRunner, watch_config
from harness.boot.executor import Executor
from harness.boot.server_registry import LiveServers
from harness.clock import FakeClock
from harness.errors import Interrupted
from harness.gpu.fake import FakeInventory
from harness.gpu.idle import IdleBaseline
from harness.gpu.inventory import CpuInventory
from harness.matrix.cells import value_token
from harness.matrix.load import load_matrix
from harness.results.model import RunResult
from harness.results.store import RunStore
from harness.runtime.process import ProcessRuntime

FAKE = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm.py")
BUSY = ("ERROR 08-20 10:00:11 [core.py:718] ValueError: Free memory on device (10.5/79.19 GiB) on startup is less "
        "than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes.")
WRAPPER = f'''
import json, os, runpy, sys, time
from pathlib import Path
rec = Path(os.environ["REC_DIR"])
cell = os.environ["REC_CELL"]
n = len(list(rec.glob(cell + ".*.json"))) + 1
(rec / f"{{cell}}.{{n}}.json").write_text(json.dumps({{"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                    "pgid": os.getpgid(0), "t": time.time()}}))
busy = os.environ.get("REC_BUSY", "")
if busy == "always" or (busy == "first" and n == 1):
    print({BUSY!r}, flush=True)
    sys.exit(1)
sys.argv = [{FAKE!r}] + sys.argv[1:]
runpy.run_path({FAKE!r}, run_name="__main__")
'''


def setup(tmp_path: Path, cells: dict[str, dict[str, str]], gpus_per_cell: int = 0, delay: float = 0.2,
          timeout_s: float = 20):
    """A matrix with one axis `c` whose values are the cells (env per cell), booted through the wrapper."""
    (tmp_path / "rec").mkdir()
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    doc = {"name": "sched", "command": [sys.executable, str(wrapper)], "model": "fake", "timeout_s": timeout_s,
           "linger_s": 0.5, "gpus_per_cell": gpus_per_cell,
           "env": {"REC_DIR": str(tmp_path / "rec"), "FAKE_VLLM_DELAY": str(delay)},
           "axes": {"c": {name: {"env": {"REC_CELL": value_token("c", name), **env}} for name, env in cells.items()}},
           "expect": [{"where": {"c": list(cells)}, "outcome": "booted"}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_matrix(path)
    all_cells = list(loaded.cells)
    store = RunStore.create(tmp_path / "results", loaded, "process", [c.id for c in all_cells])
    runner = CellRunner(loaded, ProcessRuntime(loaded.matrix.command), store, watch_config(loaded))
    return all_cells, runner, store


def records(tmp_path: Path, cell_id: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "rec").glob(f"{cell_id}.*.json"))]


def poll(done, timeout_s: float = 15.0) -> bool:
    """Wait (really: this is the test waiting for threads, not the harness waiting) until `done()`, in 10 ms steps."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    return done()


def main_thread_in(*calls: str) -> bool:
    """Whether the main thread is, right now, in the chain of calls `calls` (outermost first, each calling the next
    directly), read from its stack."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    names.reverse()
    return any(names[i:i + len(calls)] == list(calls) for i in range(len(names)))


def overlaps(timeline) -> list[tuple[str, str]]:
    return [(a[0], b[0]) for i, a in enumerate(timeline) for b in timeline[i + 1:] if a[2] < b[3] and b[2] < a[3]]


def test_cells_run_at_once_on_disjoint_gpus_and_record_them_in_matrix_order(tmp_path):
    cells, runner, store = setup(tmp_path, {n: {} for n in "abcd"}, gpus_per_cell=2, delay=0.6)
    clock = FakeClock()
    inv = FakeInventory(4, total_gib=80, clock=clock)
    sched = Executor(runner, inv, parallel=2, gpus_per_cell=2, idle=IdleBaseline(inv, poll_s=0.02, clock=clock))
    results = sched.run(cells)
    assert [r.cell_id for r in results] == [c.id for c in cells]
    assert all((r.outcome, r.matched) == ("booted", True) for r in results), [r.detail for r in results]
    pairs = overlaps(sched.timeline)
    assert pairs, "two cells were booting at the same time"
    by_cell = {t[0]: set(t[1]) for t in sched.timeline}
    assert all(not by_cell[a] & by_cell[b] for a, b in pairs), "cells at once never share a GPU"
    for r in results:
        (rec,) = records(tmp_path, r.cell_id)
        assert rec["cvd"] == ",".join(g.id for g in r.gpus) and len(r.gpus) == 2, "the server saw only its GPUs"
        g = r.gpus[0]
        assert (g.name, g.driver, g.total_gib, g.free_gib) == ("Fake GPU", "0.0-fake", 80, 79.5)
    run = RunResult.model_validate_json((store.run_dir / "results.json").read_text())
    assert [c.cell_id for c in run.cells] == [c.id for c in cells]


def test_cpu_cells_run_at_once_without_a_gpu_assignment(tmp_path):
    cells, runner, _ = setup(tmp_path, {"a": {}, "b": {}}, delay=0.6)
    sched = Executor(runner, CpuInventory(2), parallel=2)
    results = sched.run(cells)
    assert [r.outcome for r in results] == ["booted", "booted"] and overlaps(sched.timeline)
    assert all(records(tmp_path, r.cell_id)[0]["cvd"] is None and r.gpus == [] for r in results)


def test_a_cell_waits_for_its_gpu_to_return_to_idle_and_says_so_in_its_log(tmp_path):
    cells, runner, store = setup(tmp_path, {"a": {}})
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    idle = IdleBaseline(inv, timeout_s=10, poll_s=0.02, clock=clock)
    idle.capture()
    inv.hold(0, gib=30, for_s=0.5)  # the previous cell's server, still giving its memory back
    t0 = clock.now()
    sched = Executor(runner, inv, parallel=1, gpus_per_cell=1, idle=idle, clock=clock)
    (r,) = sched.run(cells)
    assert sched.timeline[0][2] - t0 >= 0.45, "started only once the GPU was idle"
    assert r.gpus[0].free_gib == 79.5, "free memory at start is the idle figure"
    log = (store.run_dir / r.log_path).read_text()
    assert "GPUs at their idle baseline (waited" in log and "Fake GPU" in log


def test_a_busy_refusal_is_contaminated_and_retried_once_after_the_wait(tmp_path):
    cells, runner, store = setup(tmp_path, {"a": {"REC_BUSY": "first"}})
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    (r,) = Executor(runner, inv, parallel=1, gpus_per_cell=1,
                    idle=IdleBaseline(inv, poll_s=0.02, clock=clock)).run(cells)
    assert (r.outcome, r.attempts) == ("booted", 2), r.detail
    assert r.contaminated
    first = (store.run_dir / "logs" / f"{r.cell_id}.attempt1.log").read_text()
    assert "Free memory on device" in first and "contaminated" in first
    assert "attempt 2 of 2" in (store.run_dir / r.log_path).read_text()
    assert len(records(tmp_path, r.cell_id)) == 2


def test_a_second_busy_refusal_on_an_idle_gpu_is_the_configurations_verdict(tmp_path):
    cells, runner, _ = setup(tmp_path, {"a": {"REC_BUSY": "always"}})
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    (r,) = Executor(runner, inv, parallel=1, gpus_per_cell=1,
                    idle=IdleBaseline(inv, poll_s=0.02, clock=clock)).run(cells)
    assert (r.outcome, r.reason, r.attempts, r.matched) == ("refused", "gpu_mem_util_exceeds_free", 2, False)


def test_a_second_busy_refusal_while_memory_is_still_held_is_never_the_verdict(tmp_path):
    cells, runner, _ = setup(tmp_path, {"a": {"REC_BUSY": "always"}})
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    idle = IdleBaseline(inv, timeout_s=0.2, poll_s=0.02, clock=clock)
    idle.capture()
    inv.hold(0, gib=60)  # something outside the harness holds the GPU all along
    (r,) = Executor(runner, inv, parallel=1, gpus_per_cell=1, idle=idle).run(cells)
    assert (r.outcome, r.reason, r.attempts) == ("error", "gpu_memory_held", 2)
    assert "not this configuration's verdict" in r.detail and r.matched is False


def test_an_interrupt_stops_every_running_server_keeps_finished_cells_and_marks_the_run(tmp_path):
    # The hanging servers' deadline is 600 s away: a run that waited for them would record their timeouts there. That
    # they were stopped, not waited for, is read from what happened (each got the harness's SIGTERM, none has a
    # verdict, their groups are gone), not from this machine's clock.
    hang = {"FAKE_VLLM_SCENARIO": "hang", "FAKE_VLLM_MARKS": str(tmp_path / "marks")}
    (tmp_path / "marks").mkdir()
    cells, runner, store = setup(tmp_path, {"fast": {}, "hang1": hang, "hang2": hang}, timeout_s=600)
    sched = Executor(runner, CpuInventory(3), parallel=3)

    def interrupt_when_the_fast_cell_is_recorded():
        poll(lambda: (store.cells_dir / "c_fast.json").exists())
        poll(lambda: len(sched.live.running()) >= 2)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=interrupt_when_the_fast_cell_is_recorded, daemon=True).start()
    with pytest.raises(Interrupted):
        sched.run(cells)
    run = RunResult.model_validate_json((store.run_dir / "results.json").read_text())
    assert run.status == "interrupted" and [c.cell_id for c in run.cells] == ["c_fast"]
    assert sorted(p.name for p in store.cells_dir.glob("*.json")) == ["c_fast.json"], "no verdict for a hanging cell"
    assert not list((store.run_dir / "active").glob("*.json")), "every process group record is gone"
    for cid in ("c_hang1", "c_hang2"):
        (rec,) = records(tmp_path, cid)
        assert (tmp_path / "marks" / f"term.{rec['pgid']}").exists(), f"{cid}: the harness never sent SIGTERM"
        with pytest.raises(ProcessLookupError):
            os.killpg(rec["pgid"], 0)


def test_an_interrupt_returns_only_after_every_worker_has_finished_its_teardown(tmp_path, monkeypatch):
    """A worker's teardown (log, work directory) goes on after the main thread stopped its server. The interrupt must
    not cut the main thread's wait for it short: on Python < 3.13 a signal that raises inside Thread.join marks the
    joined thread stopped while it runs (CPython gh-90882), and the run used to be marked interrupted, and the process
    to exit, with a cell's work directory half removed (seen in CI as `work/case_victim` left behind)."""
    from harness.runtime import scratch

    cells, runner, store = setup(tmp_path, {"hang1": {"FAKE_VLLM_SCENARIO": "hang"},
                                            "hang2": {"FAKE_VLLM_SCENARIO": "hang"}})
    real_remove = scratch.remove
    torn_down: list[str] = []

    def slow_remove(work, keep):
        # the first worker is the one the main thread waits on when the signal comes: its teardown is the long one,
        # lasting until the main thread has come to join it
        if threading.current_thread().name == "cell-worker-0":
            poll(lambda: main_thread_in("_shutdown", "join"), timeout_s=5)
        real_remove(work, keep)
        torn_down.append(work.name)

    monkeypatch.setattr(scratch, "remove", slow_remove)
    sched = Executor(runner, CpuInventory(2), parallel=2)

    def interrupt_when_both_run():
        poll(lambda: len(sched.live.running()) >= 2)
        poll(lambda: main_thread_in("_wait_for"))  # the main thread is back in its wait for the workers
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_both_run, daemon=True).start()
    with pytest.raises(Interrupted):
        sched.run(cells)
    assert sorted(torn_down) == ["c_hang1", "c_hang2"], "run() returned before a worker's teardown ended"
    assert not list((store.run_dir / "work").iterdir())
    assert not [t.name for t in threading.enumerate() if t.name.startswith("cell-worker")]


def test_a_runtime_bug_in_one_worker_stops_the_others_and_is_raised(tmp_path):
    cells, runner, store = setup(tmp_path, {"hang": {"FAKE_VLLM_SCENARIO": "hang"}, "bug": {}})
    real_start = runner.runtime.start

    def start(cell, ctx, on_line):
        if cell.id == "c_bug":
            poll(lambda: records(tmp_path, "c_hang"), timeout_s=10)  # the bug strikes once the other server runs
            raise RuntimeError("a bug in the runtime")
        return real_start(cell, ctx, on_line)

    runner.runtime.start = start
    with pytest.raises(RuntimeError, match="a bug in the runtime"):
        Executor(runner, CpuInventory(2), parallel=2).run(cells)
    (rec,) = records(tmp_path, "c_hang")
    with pytest.raises(ProcessLookupError):
        os.killpg(rec["pgid"], 0)


class _SlowStop:
    """A server whose stop takes as long as the test says (one that ignores SIGTERM until the grace runs out)."""

    def __init__(self, quick: bool = False):
        self.release = threading.Event()
        if quick:
            self.release.set()
        self.stops = 0

    def stop(self, *args):
        self.stops += 1
        self.release.wait(5)


def test_a_server_the_main_thread_stops_voids_its_cells_verdict_before_the_stop_returns():
    live = LiveServers()
    slow, quick = _SlowStop(), _SlowStop(quick=True)
    live.add("slow", slow)
    live.add("quick", quick)
    owner_first = live.add("owned", _SlowStop(quick=True))
    owner_first.stop()  # its worker began the teardown itself: its verdict stands
    t = threading.Thread(target=live.stop_all)
    t.start()
    poll(lambda: live.was_killed("slow"), timeout_s=2)
    assert live.was_killed("slow") and t.is_alive(), "void at once, though its stop is still going"
    slow.release.set()
    t.join(5)
    assert live.was_killed("quick") and not live.was_killed("owned")
    late = _SlowStop(quick=True)
    live.add("late", late)  # started while everything was being stopped
    assert live.was_killed("late") and late.stops == 1


def test_a_shared_gpu_request_one_cell_at_a_time_waits_retries_and_passes_the_request_on(tmp_path):
    """`gpus: all` without gpus_per_cell: the matrix's own request goes to every cell unchanged (no
    CUDA_VISIBLE_DEVICES assignment), yet each cell waits for those GPUs to be idle, records them, and a memory-busy
    refusal is booted once more — the same hygiene as cells on their own GPUs, with `--parallel 1`."""
    from harness.boot.slots import plan_slots

    cells, runner, store = setup(tmp_path, {"a": {"REC_BUSY": "first"}, "b": {}})
    loaded = runner.loaded
    runner.loaded = type(loaded)(**{**loaded.__dict__, "matrix": loaded.matrix.model_copy(update={"gpus": "all"})})
    plan = plan_slots(runner.loaded.matrix, "1", inventory=FakeInventory(2, total_gib=80))
    assert plan.parallel == 1 and plan.shared_gpus == [0, 1]
    assert "every cell waits for GPUs 0, 1 to be idle" in plan.describe()
    results = plan.executor(runner).run(cells)
    assert [(r.outcome, r.attempts) for r in results] == [("booted", 2), ("booted", 1)]
    assert all([g.index for g in r.gpus] == [0, 1] for r in results)
    assert all(rec["cvd"] is None for r in results for rec in records(tmp_path, r.cell_id))
    assert all("GPUs at their idle baseline" in (store.run_dir / r.log_path).read_text() for r in results)


def test_a_matrix_that_asks_for_gpus_on_a_host_without_nvml_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    cells, runner, _ = setup(tmp_path, {"a": {}})
    doc = yaml.safe_load((tmp_path / "m.yaml").read_text())
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({**doc, "gpus": "all"}))
    monkeypatch.setenv("PYTHONPATH", "")
    import harness.gpu.nvml as nvml

    monkeypatch.setattr(nvml.NvmlInventory, "open", classmethod(lambda cls, **kw: (_ for _ in ()).throw(
        nvml.NvmlUnavailable("NVML does not answer (no driver)"))))
    assert main(["run", "--matrix", str(tmp_path / "g.yaml"), "--results-dir", str(tmp_path / "r")]) == 2
    assert not (tmp_path / "r").exists(), "refused before a run directory was made"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpus: the matrix asks for GPUs, but NVML does not answer"), err

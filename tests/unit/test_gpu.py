"""GPU hand-out without a GPU: the NVML inventory over a stand-in for pynvml, the pool that never gives one GPU to two
cells, `--parallel auto|N`, and the wait for a GPU's memory to return to its idle baseline (on a FakeClock: the
waits of minutes the harness makes take no time here)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from harness.clock import FakeClock
from harness.errors import NvmlUnavailable, UsageError
from harness.gpu.fake import FakeInventory
from harness.gpu.idle import IdleBaseline
from harness.gpu.inventory import CpuInventory, GpuPool, Inventory, open_inventory, resolve_parallel
from harness.gpu.nvml import NvmlInventory, visible_indices
from harness.units import GIB


class FakeNvml:
    """The calls NvmlInventory makes, over a list of (name, uuid, total, used) GPUs."""

    def __init__(self, gpus, driver="570.86.15", fail=None):
        self.gpus, self.driver, self.fail = gpus, driver, fail

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlSystemGetDriverVersion(self):
        return self.driver.encode()  # older bindings return bytes

    def nvmlDeviceGetName(self, h):
        return self.gpus[h][0]

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h][1]

    def nvmlDeviceGetMemoryInfo(self, h):
        _, _, total, used = self.gpus[h]
        return SimpleNamespace(total=total, used=used, free=total - used)


H200 = ("NVIDIA H200", "GPU-aaaa-1111", 141 * GIB, 1 * GIB)


def test_nvml_reports_name_driver_and_memory_per_gpu():
    nvml = FakeNvml([H200, ("NVIDIA H200", "GPU-bbbb-2222", 141 * GIB, 40 * GIB)])
    inv = NvmlInventory.open(nvml=nvml, env={})
    assert isinstance(inv, Inventory) and inv.devices() == [0, 1]
    g = inv.info(1)
    assert (g.index, g.id, g.uuid, g.name, g.driver) == (1, "1", "GPU-bbbb-2222", "NVIDIA H200", "570.86.15")
    assert (g.total_gib, g.free_gib) == (141.0, 101.0)
    assert inv.used_bytes(1) == 40 * GIB


def test_process_cells_are_told_uuids_because_cuda_and_nvml_number_gpus_differently():
    inv = NvmlInventory.open(nvml=FakeNvml([H200]), env={}, id_kind="uuid")
    assert inv.info(0).id == "GPU-aaaa-1111"


def test_the_harness_own_cuda_visible_devices_limits_what_it_hands_out():
    gpus = [("G", f"GPU-{i}{i}{i}{i}-x", 80 * GIB, 0) for i in range(4)]
    inv = NvmlInventory.open(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": "2,GPU-0000"})
    assert inv.devices() == [2, 0]
    assert visible_indices("1,7,2", 4, {}) == [1], "CUDA stops at the first entry it cannot resolve"
    with pytest.raises(UsageError, match="MIG"):
        visible_indices("MIG-abc", 4, {})
    with pytest.raises(NvmlUnavailable, match="leaves no GPU"):
        NvmlInventory.open(nvml=FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": ""})


def test_no_nvml_means_a_one_line_usage_error_only_when_cells_need_gpus(monkeypatch):
    with pytest.raises(NvmlUnavailable, match="does not answer"):
        NvmlInventory.open(nvml=FakeNvml([], fail="NVML Shared Library Not Found"), env={})
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        NvmlInventory.open(nvml=FakeNvml([]), env={})
    monkeypatch.setattr(NvmlInventory, "open", classmethod(lambda cls, **kw: (_ for _ in ()).throw(
        NvmlUnavailable("NVML sees no GPU"))))
    with pytest.raises(UsageError, match="gpus_per_cell: 1 hands GPUs to cells, but NVML sees no GPU"):
        open_inventory(1, env={})
    assert open_inventory(0, env={}).kind == "cpu"
    assert open_inventory(0, env={"BOOT_HARNESS_CPU_SLOTS": "3"}).slots == 3


def test_the_pool_never_gives_a_gpu_to_two_cells_at_once():
    pool = GpuPool([0, 1, 2, 3], per_cell=2)
    a, b = pool.reserve(), pool.reserve()
    assert (a, b) == ([0, 1], [2, 3])
    stop = threading.Event()
    got = []
    t = threading.Thread(target=lambda: got.append(pool.reserve(stop)))
    t.start()
    t.join(0.05)
    assert got == [] and t.is_alive(), "blocks while every GPU is held"
    pool.release(a)
    t.join(2)
    assert got == [[0, 1]]
    stop.set()
    assert pool.reserve(stop) is None, "a stop wakes a waiting worker with nothing"
    with pytest.raises(UsageError, match="needs 3 GPUs"):
        GpuPool([0, 1], per_cell=3)


@pytest.mark.parametrize("spec,gpus,per_cell,expected", [
    ("auto", 8, 1, 8), ("auto", 8, 2, 4), ("auto", 3, 2, 1), ("2", 8, 2, 2), ("16", 8, 2, 4)])
def test_parallel_auto_is_gpus_over_gpus_per_cell_and_n_is_capped_by_it(spec, gpus, per_cell, expected):
    n, why = resolve_parallel(spec, FakeInventory(gpus), per_cell)
    assert n == expected and why


def test_parallel_without_gpus_per_cell_is_cpu_slots_unless_the_matrix_shares_gpus():
    assert resolve_parallel("auto", CpuInventory(), 0)[0] == 1
    assert resolve_parallel("auto", CpuInventory(3), 0)[0] == 3
    assert resolve_parallel("2", CpuInventory(), 0)[0] == 2
    assert resolve_parallel("auto", CpuInventory(), 0, shares_gpus=True)[0] == 1
    with pytest.raises(UsageError, match="would share GPUs"):
        resolve_parallel("2", CpuInventory(), 0, shares_gpus=True)
    with pytest.raises(UsageError, match="needs 2 GPUs"):
        resolve_parallel("auto", FakeInventory(1), 2)
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(UsageError, match="auto or a positive integer"):
            resolve_parallel(bad, CpuInventory(), 0)


def test_the_idle_wait_returns_once_memory_is_back_at_the_baseline():
    clock = FakeClock()
    inv = FakeInventory(2, clock=clock)
    idle = IdleBaseline(inv, timeout_s=180, poll_s=1.0, clock=clock)
    idle.capture()
    inv.hold(1, gib=30, for_s=30)  # a server that is still dying
    assert idle.wait([0]).idle and idle.wait([0]).waited_s == 0 and clock.slept == []
    t0 = clock.now()
    w = idle.wait([0, 1])
    assert w.idle and clock.now() - t0 == w.waited_s == 30, w
    assert clock.slept == [1.0] * 30, "polled every poll_s until the memory came back"
    assert "idle baseline (waited 30.0 s)" in w.describe()


def test_the_idle_wait_is_bounded_and_says_what_is_still_held():
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    idle = IdleBaseline(inv, timeout_s=180, poll_s=1.0, clock=clock)
    idle.capture()
    inv.hold(0, gib=12)
    w = idle.wait([0])
    assert not w.idle and w.waited_s == 180 and w.over_gib == {0: 12.0} and "still above" in w.describe()
    stop = threading.Event()
    stop.set()
    idle.timeout_s, idle.poll_s = 30, 5
    t0 = clock.now()
    assert idle.wait([0], stop).stopped and clock.now() == t0, "a stop ends the wait at once"


def test_a_stop_while_the_idle_wait_sleeps_ends_it_there():
    stop = threading.Event()

    class InterruptedClock(FakeClock):
        def sleep(self, seconds):
            super().sleep(seconds)
            if len(self.slept) == 3:  # Ctrl-C during the third poll's sleep
                stop.set()

    clock = InterruptedClock()
    inv = FakeInventory(1, clock=clock)
    idle = IdleBaseline(inv, timeout_s=180, poll_s=1.0, clock=clock)
    idle.capture()
    inv.hold(0, gib=12)
    w = idle.wait([0], stop)
    assert w.stopped and w.waited_s == 3 and not w.idle and "stopped while waiting" in w.describe()


def test_a_run_that_started_while_memory_was_held_learns_the_lower_idle_level():
    clock = FakeClock()
    inv = FakeInventory(1, clock=clock)
    inv.hold(0, gib=20, for_s=10)
    idle = IdleBaseline(inv, timeout_s=60, poll_s=1.0, clock=clock)
    idle.capture()  # baseline includes the 20 GiB
    clock.advance(15)  # the memory was given back meanwhile
    assert idle.wait([0]).idle
    assert idle.baseline[0] == int(0.5 * GIB), "lowered to what the free GPU really uses"
    inv.hold(0, gib=20)
    idle.timeout_s = 10
    assert not idle.wait([0]).idle, "and holds the GPU to it"

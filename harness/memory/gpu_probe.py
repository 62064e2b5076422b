"""A GPU cell's memory through NVML: per GPU of the cell, what the server's own processes hold (NVML's per-process
figures are host PIDs, matched against the server's processes) and what everyone holds, so a neighbour on a shared
GPU is told apart from the server. Where this host sees neither the server's PIDs nor any PID NVML lists (the harness
in another PID namespace than the server), the device's whole use stands for the server's, and the record's devices
say so by showing no neighbour. Once the server's processes are gone, the curve ends: what the driver still holds
after it is not the server's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness.errors import GpuLost, ProbeFailed
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import DeviceReading, Limit, Reading
from harness.memory.process_tree import CachedPids, visible


class GpuMemory(Protocol):
    """What the probe asks of a GPU inventory (harness.gpu.nvml.NvmlInventory, the fake one)."""

    def total_bytes(self, index: int) -> int: ...

    def used_bytes(self, index: int) -> int | None: ...

    def processes(self, index: int) -> dict[int, int]:
        """Host PID → bytes of each process NVML reports on the GPU."""


class GpuProbe:
    source = MemorySource.nvml

    def __init__(self, gpus: GpuMemory, indices: list[int], pids: Callable[[], set[int]]):
        self.gpus, self.indices, self._pids = gpus, list(indices), CachedPids(pids)
        self._seen = False

    def limit(self) -> Limit:
        try:
            totals = {i: self.gpus.total_bytes(i) for i in self.indices}
        except GpuLost as exc:
            raise ProbeFailed(str(exc)) from None
        return Limit(sum(totals.values()), LimitKind.device_total, totals)

    def read(self) -> Reading:
        server_pids = self._pids()
        if server_pids and not any(visible(pid) for pid in server_pids):
            self._pids.stale()  # every process it knew is gone: walk again now, not at the next round
            server_pids = self._pids()
        if server_pids:
            self._seen = True
        elif self._seen:
            raise ProbeFailed("the server's processes are gone")
        devices = []
        try:
            for i in self.indices:
                used = self.gpus.used_bytes(i) or 0
                procs = self.gpus.processes(i)
                if server_pids:
                    mine = sum(b for pid, b in procs.items() if pid in server_pids)
                    if any(pid not in server_pids and visible(pid) for pid in procs):
                        self._pids.stale()  # a process this walk did not know: the server's new worker, or not
                elif procs and not any(visible(pid) for pid in procs):
                    mine = used  # another PID namespace: the device's use stands for the server's
                else:
                    mine = 0  # not started yet
                devices.append(DeviceReading(i, mine, used))
        except GpuLost as exc:
            raise ProbeFailed(str(exc)) from None
        return Reading(sum(d.server_bytes for d in devices), tuple(devices))

"""A GPU cell's memory through NVML: per GPU of the cell, what the server's own processes hold (NVML's per-process
figures are host PIDs, matched against the server's processes) and what everyone holds, so a neighbour on a shared
GPU is told apart from the server. Where none of the server's PIDs is visible here (the harness in another PID
namespace than the server), the device's whole use stands for the server's, and the record's devices say so by
showing no neighbour."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness.errors import GpuLost
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import DeviceReading, Limit, ProbeFailed, Reading


class GpuMemory(Protocol):
    """What the probe asks of a GPU inventory (harness.gpu.nvml.NvmlInventory, the fake one)."""

    def total_bytes(self, index: int) -> int: ...

    def used_bytes(self, index: int) -> int | None: ...

    def processes(self, index: int) -> dict[int, int]:
        """Host PID → bytes of each process NVML reports on the GPU."""


class GpuProbe:
    source = MemorySource.nvml

    def __init__(self, gpus: GpuMemory, indices: list[int], pids: Callable[[], set[int]]):
        self.gpus, self.indices, self._pids = gpus, list(indices), pids

    def limit(self) -> Limit:
        try:
            totals = {i: self.gpus.total_bytes(i) for i in self.indices}
        except GpuLost as exc:
            raise ProbeFailed(str(exc)) from None
        return Limit(sum(totals.values()), LimitKind.device_total, totals)

    def read(self) -> Reading:
        server_pids = self._pids()
        devices = []
        try:
            for i in self.indices:
                used = self.gpus.used_bytes(i) or 0
                procs = self.gpus.processes(i)
                mine = sum(b for pid, b in procs.items() if pid in server_pids) if server_pids else used
                devices.append(DeviceReading(i, mine, used))
        except GpuLost as exc:
            raise ProbeFailed(str(exc)) from None
        return Reading(sum(d.server_bytes for d in devices), tuple(devices))

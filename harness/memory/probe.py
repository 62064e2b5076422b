"""What a memory sampler reads: a probe, one per boot, that answers "how much does the server hold now".

A Protocol, so the process tree, the container engine's stats, NVML and a unit test's scripted curve are small
classes the sampler treats alike. A probe that can no longer answer raises `ProbeFailed` with a sentence: the curve
stops there and the record says why; the cell and the run go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from harness.errors import ProbeFailed
from harness.memory.model import LimitKind, MemorySource

__all__ = ["DeviceReading", "Limit", "MemoryProbe", "ProbeFailed", "Reading"]


@dataclass(frozen=True)
class DeviceReading:
    """One GPU at one sample: the server's own processes' memory on it, and everyone's."""

    index: int
    server_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class Reading:
    """The server's memory at one sample; `devices` for an NVML probe."""

    bytes: int
    devices: tuple[DeviceReading, ...] = ()


@dataclass(frozen=True)
class Limit:
    bytes: int | None
    kind: LimitKind | None
    #: Each GPU's total, by index (NVML probes).
    device_totals: dict[int, int] = field(default_factory=dict)


class MemoryProbe(Protocol):
    source: MemorySource

    def limit(self) -> Limit:
        """What the server's memory is held against; asked once, before the first sample."""

    def read(self) -> Reading:
        """The server's memory now; raises ProbeFailed when it cannot be read."""

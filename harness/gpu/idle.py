"""Waiting for a GPU's memory to come back to its idle baseline before a cell starts on it.

A server that was just stopped (or crashed) gives its memory back seconds later, sometimes tens of seconds; a cell
started on that GPU meanwhile sees less free memory and may refuse (`gpu_memory_busy`, or a smaller KV pool) for a
reason that is not its configuration's. The baseline is each GPU's used memory when the run starts, lowered whenever a
free GPU is seen using less (so a run that started while something was still dying learns the real idle level). Idle
means used ≤ baseline + tolerance. The wait is bounded: past `timeout_s` the cell starts anyway and the result says
the GPU was not idle.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness.clock import SYSTEM, Clock
from harness.gpu.inventory import Inventory
from harness.units import GIB

MIB = 1024**2
#: A CUDA context alone is ~0.3-0.6 GiB, a leftover KV pool many GiB; 512 MiB tells them apart.
DEFAULT_TOLERANCE = 512 * MIB
DEFAULT_TIMEOUT_S = 180.0


@dataclass
class IdleWait:
    """How the wait for one cell's GPUs went."""

    idle: bool
    waited_s: float
    #: GiB above the baseline per GPU when the wait ended (only the GPUs still over it when not idle).
    over_gib: dict[int, float] = field(default_factory=dict)
    stopped: bool = False

    def describe(self) -> str:
        if self.stopped:
            return "stopped while waiting for the GPUs to go idle"
        if self.idle:
            return f"GPUs at their idle baseline (waited {self.waited_s:.1f} s)"
        over = ", ".join(f"GPU {i} +{g:.2f} GiB" for i, g in sorted(self.over_gib.items()))
        return f"GPUs still above their idle baseline after {self.waited_s:.1f} s ({over}); started anyway"


class IdleBaseline:
    def __init__(self, inventory: Inventory, tolerance_bytes: int = DEFAULT_TOLERANCE,
                 timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float = 1.0,
                 clock: Clock = SYSTEM):
        self.inventory = inventory
        self.tolerance = tolerance_bytes
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.clock = clock
        self._lock = threading.Lock()
        self.baseline: dict[int, int] = {}

    def capture(self) -> dict[int, int | None]:
        """Measure every GPU now (call before the first cell starts)."""
        seen = {}
        for i in self.inventory.devices():
            used = self.inventory.used_bytes(i)
            seen[i] = used
            if used is not None:
                self._observe(i, used)
        return seen

    def _observe(self, index: int, used: int) -> None:
        with self._lock:
            if index not in self.baseline or used < self.baseline[index]:
                self.baseline[index] = used

    def over(self, index: int) -> int | None:
        """Bytes above idle (≤ 0 when idle); None when the GPU cannot be measured."""
        used = self.inventory.used_bytes(index)
        if used is None:
            return None
        self._observe(index, used)  # the GPU is ours and nothing of ours runs on it: a lower reading is a truer idle
        with self._lock:
            return used - self.baseline[index] - self.tolerance

    def wait(self, indices: list[int], stop: threading.Event | None = None) -> IdleWait:
        """Block until every GPU in `indices` is idle, `timeout_s` passes, or `stop` is set; every pause is the
        clock's, so a test on a FakeClock waits minutes in microseconds."""
        stop = stop if stop is not None else threading.Event()
        t0 = self.clock.now()
        while True:
            over = {i: o for i in indices if (o := self.over(i)) is not None and o > 0}
            waited = self.clock.now() - t0
            if not over:
                return IdleWait(True, round(waited, 3))
            over_gib = {i: round((o + self.tolerance) / GIB, 3) for i, o in over.items()}
            if waited >= self.timeout_s:
                return IdleWait(False, round(waited, 3), over_gib)
            if self.clock.wait(stop, min(self.poll_s, max(0.0, self.timeout_s - waited))):
                return IdleWait(False, round(self.clock.now() - t0, 3), over_gib, stopped=True)

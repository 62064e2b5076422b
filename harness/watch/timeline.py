"""The harness's own clock on one boot: when each milestone happened, as the runtime and the watch saw it.

vLLM prints some durations and second-resolution timestamps; the harness sees every line arrive, so it can time every
phase on one clock, including the ones nobody prints (imports, API server start, /health, the probe).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from harness.clock import SYSTEM, Clock
from harness.logfacts.timeline import RANK, Durations, Milestone, Milestones, PhaseAt, Timeline, phase_at


class TimelineRecorder:
    """Milestones of one cell, in seconds since `start` on `clock`. Thread-safe: runtimes mark from their threads.

    A milestone may be marked again (the last rank's weights, a draft model's compile) until a later one is reached,
    so each says when its phase ended for the whole engine and the milestones never go backwards."""

    def __init__(self, clock: Clock = SYSTEM, start: float | None = None,
                 on_mark: Callable[[Milestone, float], None] | None = None):
        self.clock = clock
        self.start = clock.now() if start is None else start
        self._at: dict[Milestone, float] = {}
        self._lock = threading.Lock()
        #: Told each milestone marked, with seconds since the start (outside the lock: it may take its time).
        self._on_mark = on_mark

    def mark(self, milestone: Milestone, t: float | None = None) -> None:
        """`milestone` happened at `t` (on `clock`; now when None)."""
        at = self.clock.now() if t is None else t
        with self._lock:
            if any(RANK[m] > RANK[milestone] for m in self._at if m is not Milestone.decided):
                return  # a later phase has begun: this line is a straggler, not the end of the phase
            floor = max((v for m, v in self._at.items() if RANK[m] < RANK[milestone]), default=self.start)
            self._at[milestone] = at = max(at, floor)
        if self._on_mark is not None:
            self._on_mark(milestone, round(at - self.start, 3))

    def milestones(self) -> Milestones:
        with self._lock:
            return Milestones(**{m.value: round(t - self.start, 3) for m, t in self._at.items()})

    def phase(self, t: float | None = None, skip: frozenset[Milestone] = frozenset()) -> PhaseAt:
        """Where the server is at `t` (now when None), never naming a phase in `skip` (LogFacts.skipped)."""
        at = self.clock.now() if t is None else t
        return phase_at(self.milestones(), round(at - self.start, 3), skip)

    def timeline(self, durations: Durations, decided_at: float | None,
                 skip: frozenset[Milestone] = frozenset()) -> Timeline:
        """The record: milestones, vLLM's own durations, and the phase at the verdict."""
        if decided_at is not None:
            self.mark(Milestone.decided, decided_at)
        return Timeline(milestones=self.milestones(), durations=durations,
                        phase=self.phase(decided_at, skip) if decided_at is not None else None)

"""What one candidate's boot says: good, bad, or skip (no verdict on the question asked), read from its cell record.

`--on verdict`: a candidate is bad when its verdict (outcome and reason) is the bad end's. `--on time`: when its boot
(or one phase of it) is slower than the good end's beyond the time tolerance `compare` uses (harness.analysis.timing:
25 % and 30 s by default, both). `--on memory`: when its memory peak grew beyond the memory tolerance `compare` uses
(harness.analysis.compare: 10 % and 256 MiB). An `error` record is the environment's fault, never a verdict: skip,
like `git bisect skip`; so is a time or a peak that cannot be compared (another outcome than the good end's, no
curve), since a refusal is no faster boot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from harness.analysis.timing import BOOT, boot_times
from harness.analysis.tolerance import DEFAULT_MEMORY_TOLERANCE, DEFAULT_TIME_TOLERANCE, Tolerance
from harness.results.model import CellResult
from harness.units import fmt_bytes, fmt_seconds
from harness.verdict import Outcome


class Mark(StrEnum):
    good = "good"
    bad = "bad"
    skip = "skip"


class On(StrEnum):
    verdict = "verdict"
    time = "time"
    memory = "memory"


@dataclass(frozen=True)
class Said:
    """One boot's answer: its mark and the words the step line and the answer print."""

    mark: Mark
    said: str


@dataclass(frozen=True)
class Oracle:
    """Reads a candidate's record against the good end's (`reference`, set once the good end booted)."""

    on: On = On.verdict
    #: `--on time`: the phase whose seconds are compared (`boot`: the verdict's time).
    phase: str = BOOT
    time_tolerance: Tolerance = DEFAULT_TIME_TOLERANCE
    memory_tolerance: Tolerance = DEFAULT_MEMORY_TOLERANCE

    def measure(self, r: CellResult) -> float | None:
        """The number `--on time|memory` compares; None when the record has none."""
        if self.on == On.time:
            return boot_times(r).get(self.phase)
        if self.on == On.memory:
            return float(r.memory.peak_bytes) if r.memory is not None and r.memory.peak_bytes is not None else None
        return None

    @property
    def what(self) -> str:
        return self.phase if self.on == On.time else "memory peak" if self.on == On.memory else "verdict"

    def shown(self, value: float | None) -> str:
        if value is None:
            return "—"
        return fmt_seconds(value) if self.on == On.time else fmt_bytes(int(value))

    def judge(self, r: CellResult, good: CellResult, bad: CellResult | None) -> Said:
        """`r` against the good end's record `good` and (verdict mode) the bad end's `bad`; the ends themselves are
        judged by the same rule (the good end against itself is good, by construction)."""
        if r.outcome == Outcome.error:
            return Said(Mark.skip, f"{r.verdict()}: an environment fault, not a verdict")
        if self.on == On.verdict:
            if bad is None:  # the bad end itself, judged before its verdict is the reference
                return Said(Mark.good if verdict_key(r) == verdict_key(good) else Mark.bad, r.verdict())
            if verdict_key(r) == verdict_key(bad):
                return Said(Mark.bad, r.verdict())
            other = "" if verdict_key(r) == verdict_key(good) else " (neither end's verdict: not the bad one)"
            return Said(Mark.good, r.verdict() + other)
        what = self.what
        if r.outcome != good.outcome:
            return Said(Mark.skip, f"{r.verdict()}: its {what} is not comparable with the good end's "
                                   f"{good.verdict()}")
        a, b = self.measure(good), self.measure(r)
        if a is None or b is None:
            return Said(Mark.skip, f"{r.verdict()}: no {what} recorded")
        worse = self.time_tolerance.exceeded(a, b) if self.on == On.time else self.memory_tolerance.exceeded(
            int(a), int(b))
        words = f"{what} {self.shown(b)} (good end {self.shown(a)})"
        return Said(Mark.bad if worse and b > a else Mark.good, words)

    def tolerance(self) -> str | None:
        if self.on == On.time:
            return self.time_tolerance.describe()
        if self.on == On.memory:
            return self.memory_tolerance.describe()
        return None


def verdict_key(r: CellResult) -> tuple[str, str | None]:
    return (str(r.outcome), str(r.reason) if r.reason else None)

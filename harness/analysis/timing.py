"""Boot time across two runs: which cells (and which of their phases) became slower, and which faster.

A boot's time is noisy — a shared runner, a cold page cache — so a change counts only when it is beyond *both* a
relative and an absolute tolerance (`25%,30s`, harness.analysis.tolerance): 30 s more on a 40-minute boot is noise,
and so is 40 % more on a 2-second phase. Only cells with the same outcome in both runs are compared (a refusal is not
a faster boot).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from harness.analysis.tolerance import Tolerance
from harness.jsonout import JsonOutput
from harness.results.model import CellResult
from harness.units import fmt_seconds

BOOT = "boot"
"""The `what` of a whole cell's verdict time, beside its phases' names."""


@dataclass(frozen=True)
class TimeChange:
    cell_id: str
    what: str
    """`boot` (the verdict time) or a phase's name (`torch.compile`, …)."""
    a_s: float
    b_s: float

    @property
    def rel(self) -> float | None:
        return (self.b_s - self.a_s) / self.a_s if self.a_s else None

    def describe(self) -> str:
        change = f"{self.rel:+.0%}" if self.rel is not None else "from 0"
        return f"{self.what}: {fmt_seconds(self.a_s)} → {fmt_seconds(self.b_s)} ({change})"

    def output(self) -> TimeChangeJson:
        return TimeChangeJson(cell_id=self.cell_id, what=self.what, a_s=self.a_s, b_s=self.b_s,
                              relative=None if self.rel is None else round(self.rel, 4))


class TimeChangeJson(JsonOutput):
    cell_id: str
    what: str = Field(description="`boot` (the verdict time) or a phase's name")
    a_s: float
    b_s: float
    relative: float | None


def boot_times(c: CellResult) -> dict[str, float]:
    out: dict[str, float] = {}
    if c.timings.verdict_s is not None:
        out[BOOT] = c.timings.verdict_s
    for span in c.timeline.spans():
        out[span.name] = out.get(span.name, 0.0) + span.seconds
    return out


def time_changes(a: CellResult, b: CellResult, tol: Tolerance) -> tuple[list[TimeChange], list[TimeChange]]:
    """(slower, faster) between two records of one cell: the verdict time and every phase both timed."""
    if a.outcome != b.outcome:
        return [], []
    ta, tb = boot_times(a), boot_times(b)
    slower: list[TimeChange] = []
    faster: list[TimeChange] = []
    for what in [w for w in tb if w in ta]:
        if tol.exceeded(ta[what], tb[what]):
            (slower if tb[what] > ta[what] else faster).append(TimeChange(a.cell_id, what, ta[what], tb[what]))
    return slower, faster

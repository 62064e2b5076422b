"""`boot-harness compare RUN_A RUN_B`: the same cells across two runs (last night vs tonight); the pairs within one
run are harness.analysis.pairs, the flags' parsers harness.cli.tolerances.

Cells are matched by id. A **regression** is a cell that booted in A and did anything else in B, or that newly fails
its expectation in B (a cell only B has counts when it mismatches); a **fix** is the reverse. Cells found in one run
only are listed, and so are KV numbers that moved by more than the tolerance (default 2 %; GiB figures also by more
than their 0.01 print unit). Boot times and phases that became slower beyond the time tolerance (both ways: default
25 % and 30 s) are time regressions (harness.analysis.timing). A memory peak that grew beyond the memory tolerance
(both ways: default 10 % and 256 MiB) is a memory regression; only cells with a memory curve in both runs, the same
outcome and the same source are compared. `has_regression` decides exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import Field

from harness.analysis.timing import TimeChange, TimeChangeJson, time_changes
from harness.analysis.tolerance import DEFAULT_MEMORY_TOLERANCE, DEFAULT_TIME_TOLERANCE, Tolerance
from harness.jsonout import JsonOutput, Number
from harness.results.model import CellResult, Expected, RunResult
from harness.results.store import now as wall_now
from harness.units import fmt_bytes
from harness.verdict import Outcome, Reason

DEFAULT_TOLERANCE = 0.02


# ---------------------------------------------------------------- memory peaks


@dataclass(frozen=True)
class MemoryChange:
    """One cell's memory peak in A and in B (the phase each came in)."""

    cell_id: str
    a_bytes: int
    b_bytes: int
    a_phase: str | None = None
    b_phase: str | None = None
    source: str | None = None

    @property
    def rel(self) -> float | None:
        return (self.b_bytes - self.a_bytes) / self.a_bytes if self.a_bytes else None

    def describe(self) -> str:
        change = f"{self.rel:+.0%}" if self.rel is not None else "from 0"
        return f"peak {fmt_bytes(self.a_bytes)} → {fmt_bytes(self.b_bytes)} ({change})"

    def output(self) -> MemoryChangeJson:
        return MemoryChangeJson(cell_id=self.cell_id, a_bytes=self.a_bytes, b_bytes=self.b_bytes,
                                delta_bytes=self.b_bytes - self.a_bytes,
                                relative=None if self.rel is None else round(self.rel, 4),
                                a_phase=self.a_phase, b_phase=self.b_phase, source=self.source)


def memory_change(a: CellResult, b: CellResult) -> MemoryChange | None:
    """The two peaks of one cell, when both runs measured one the same way and the verdicts agree (a refusal's peak
    is no smaller boot); None otherwise."""
    ma, mb = a.memory, b.memory
    if ma is None or mb is None or ma.peak_bytes is None or mb.peak_bytes is None:
        return None
    if a.outcome != b.outcome or ma.source != mb.source:
        return None
    return MemoryChange(a.cell_id, ma.peak_bytes, mb.peak_bytes, ma.peak_phase, mb.peak_phase, str(mb.source))


# ---------------------------------------------------------------- across two runs

#: Raw numbers compared for drift: (label, getter, unit, absolute print unit below which a change is rounding).
_DRIFT = [
    ("kv.model_load_gib", lambda c: c.kv.model_load_gib, "GiB", 0.01),
    ("kv.available_gib", lambda c: c.kv.available_gib, "GiB", 0.01),
    ("kv.reserved_gib", lambda c: c.kv.reserved_gib, "GiB", 0.01),
    ("kv.kv_tokens", lambda c: c.kv.kv_tokens, "tokens", 0),
    ("kv.max_concurrency", lambda c: c.kv.max_concurrency, "x", 0.01),
    ("kv.cuda_graph_gib", lambda c: c.kv.cuda_graph_gib, "GiB", 0.01),
    ("kv.offload_cap_gib", lambda c: c.kv.offload_cap_gib, "GiB", 0.01),
    ("kv.offload_uncapped_gib", lambda c: c.kv.offload_uncapped_gib, "GiB", 0.01),
    ("kv.autofit_max_model_len", lambda c: c.kv.autofit_max_model_len, "tokens", 0),
    ("refusal.needed_gib", lambda c: c.refusal.needed_gib if c.refusal else None, "GiB", 0.01),
    ("refusal.available_gib", lambda c: c.refusal.available_gib if c.refusal else None, "GiB", 0.01),
    ("refusal.estimated_max_model_len", lambda c: c.refusal.estimated_max_model_len if c.refusal else None,
     "tokens", 0),
]


@dataclass
class Change:
    cell_id: str
    a: CellResult | None
    b: CellResult | None
    why: str

    def output(self) -> ChangeJson:
        def side(c: CellResult | None) -> ChangeSideJson | None:
            return None if c is None else ChangeSideJson(outcome=c.outcome, reason=c.reason, matched=c.matched,
                                                         expected=c.expected)

        return ChangeJson(cell_id=self.cell_id, a=side(self.a), b=side(self.b), why=self.why)


@dataclass
class Drift:
    cell_id: str
    field: str
    unit: str
    a: float | None
    b: float | None

    @property
    def rel(self) -> float | None:
        """The change relative to A (None when a side is missing or A is 0)."""
        if self.a is None or self.b is None or not self.a:
            return None
        return (self.b - self.a) / abs(self.a)

    def output(self) -> DriftJson:
        return DriftJson(cell_id=self.cell_id, field=self.field, unit=self.unit, a=self.a, b=self.b,
                         relative=None if self.rel is None else round(self.rel, 6))


@dataclass
class RunDiff:
    a_id: str
    b_id: str
    tolerance: float
    regressions: list[Change] = field(default_factory=list)
    fixes: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    only_a: list[CellResult] = field(default_factory=list)
    only_b: list[CellResult] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    unchanged: int = 0
    notes: list[str] = field(default_factory=list)
    time_tolerance: Tolerance = DEFAULT_TIME_TOLERANCE
    slower: list[TimeChange] = field(default_factory=list)
    faster: list[TimeChange] = field(default_factory=list)
    memory_tolerance: Tolerance = DEFAULT_MEMORY_TOLERANCE
    #: Cells whose peaks were compared (a memory curve in both runs, same outcome, same source).
    memory_compared: int = 0
    bigger: list[MemoryChange] = field(default_factory=list)
    smaller: list[MemoryChange] = field(default_factory=list)

    @property
    def has_regression(self) -> bool:
        return bool(self.regressions or self.slower or self.bigger)

    def output(self) -> CompareRunsJson:
        """What `compare RUN_A RUN_B --json` prints."""
        return CompareRunsJson(
            a=self.a_id, b=self.b_id, tolerance=self.tolerance, has_regression=self.has_regression,
            regressions=[c.output() for c in self.regressions], fixes=[c.output() for c in self.fixes],
            changed=[c.output() for c in self.changed],
            only_in_a=[OnlyInAJson(cell_id=c.cell_id, outcome=c.outcome, reason=c.reason) for c in self.only_a],
            only_in_b=[OnlyInBJson(cell_id=c.cell_id, outcome=c.outcome, reason=c.reason, matched=c.matched)
                       for c in self.only_b],
            drift=[d.output() for d in self.drift], unchanged=self.unchanged, notes=self.notes,
            time_tolerance=TimeToleranceJson(relative=self.time_tolerance.rel, seconds=self.time_tolerance.absolute),
            time_regressions=[t.output() for t in self.slower], time_improvements=[t.output() for t in self.faster],
            memory_tolerance=MemoryToleranceJson(relative=self.memory_tolerance.rel,
                                                 bytes=int(self.memory_tolerance.absolute)),
            memory_compared=self.memory_compared, memory_regressions=[m.output() for m in self.bigger],
            memory_improvements=[m.output() for m in self.smaller])


def _state(c: CellResult) -> str:
    """`refused (tp_not_divisible)`; a crash on an exception the catalogue names only in general says which
    (`crashed (uncaught_exception: KeyError)`)."""
    exc = c.exception()
    return f"{c.outcome}" + (f" ({c.reason}{': ' + exc if exc else ''})" if c.reason else "")


def _expect(c: CellResult) -> str:
    if c.expected is None:
        return "no expectation"
    return f"expected {c.expected.outcome}" + (f" ({c.expected.reason})" if c.expected.reason else "")


def order_notes(a: RunResult, b: RunResult, now: datetime) -> list[str]:
    """What a reader of "A then B" must know about the runs' recorded starts: B is compared as the later night
    because it was given second, whatever its start says, and a start in the future says nothing of when it ran."""
    from harness.analysis.history_runs import future

    notes = [f"run {r.run_id} started {r.started_at:%Y-%m-%d %H:%M}, {ahead} after this host's clock: a start in "
             "the future (a wrong clock or an edited record) says nothing of when it ran"
             for r in (a, b) if (ahead := future(r.started_at, now)) is not None]
    if _utc(b.started_at) < _utc(a.started_at):
        notes.append(f"B ({b.run_id}) started before A ({a.run_id}): compared as given, A then B")
    return notes


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def compare_runs(a: RunResult, b: RunResult, tolerance: float = DEFAULT_TOLERANCE,
                 time_tolerance: Tolerance = DEFAULT_TIME_TOLERANCE,
                 memory_tolerance: Tolerance = DEFAULT_MEMORY_TOLERANCE, now: datetime | None = None) -> RunDiff:
    diff = RunDiff(a.run_id, b.run_id, tolerance, time_tolerance=time_tolerance, memory_tolerance=memory_tolerance)
    diff.notes += order_notes(a, b, wall_now() if now is None else now)
    if a.matrix.sha256 != b.matrix.sha256:
        diff.notes.append(f"the runs used different matrix files ({a.matrix.name} sha256 {a.matrix.sha256[:12]}, "
                          f"{b.matrix.name} sha256 {b.matrix.sha256[:12]}): cells are matched by id")
    cells_a = {c.cell_id: c for c in a.cells}
    cells_b = {c.cell_id: c for c in b.cells}
    for cid, cb in cells_b.items():
        ca = cells_a.get(cid)
        if ca is None:
            diff.only_b.append(cb)
            if cb.matched is False:
                diff.regressions.append(Change(cid, None, cb, f"new cell, {_state(cb)}: {_expect(cb)}"))
            continue
        if ca.outcome == Outcome.booted and cb.outcome != Outcome.booted:
            diff.regressions.append(Change(cid, ca, cb, f"booted → {_state(cb)}"))
        elif cb.matched is False and ca.matched is not False:
            diff.regressions.append(Change(cid, ca, cb, f"{_state(ca)} → {_state(cb)}: now fails its expectation "
                                                        f"({_expect(cb)})"))
        elif ca.outcome != Outcome.booted and cb.outcome == Outcome.booted:
            diff.fixes.append(Change(cid, ca, cb, f"{_state(ca)} → booted"))
        elif ca.matched is False and cb.matched is True:
            diff.fixes.append(Change(cid, ca, cb, f"{_state(ca)} → {_state(cb)}: meets its expectation again"))
        elif (ca.outcome, ca.reason, ca.exception()) != (cb.outcome, cb.reason, cb.exception()):  # a cause is a verdict
            diff.changed.append(Change(cid, ca, cb, f"{_state(ca)} → {_state(cb)}"))
        else:
            diff.unchanged += 1
        slower, faster = time_changes(ca, cb, time_tolerance)
        diff.slower += slower
        diff.faster += faster
        if (mem := memory_change(ca, cb)) is not None:
            diff.memory_compared += 1
            if memory_tolerance.exceeded(mem.a_bytes, mem.b_bytes):
                (diff.bigger if mem.b_bytes > mem.a_bytes else diff.smaller).append(mem)
        same_outcome = ca.outcome == cb.outcome
        for name, get, unit, unit_abs in _DRIFT:
            va, vb = get(ca), get(cb)
            if va is None and vb is None:
                continue
            if va is None or vb is None:
                if same_outcome:
                    diff.drift.append(Drift(cid, name, unit, va, vb))
                continue
            d = abs(vb - va)
            if d > tolerance * abs(va) and d > unit_abs + 1e-12:
                diff.drift.append(Drift(cid, name, unit, va, vb))
    diff.only_a = [c for cid, c in cells_a.items() if cid not in cells_b]
    return diff


# ---------------------------------------------------------------- `compare RUN_A RUN_B --json` (harness.jsonout)


class MemoryChangeJson(JsonOutput):
    cell_id: str
    a_bytes: int
    b_bytes: int
    delta_bytes: int
    relative: float | None
    a_phase: str | None
    b_phase: str | None
    source: str | None


class ChangeSideJson(JsonOutput):
    outcome: Outcome
    reason: Reason | None
    matched: bool | None
    expected: Expected | None


class ChangeJson(JsonOutput):
    cell_id: str
    a: ChangeSideJson | None = Field(description="null: a cell only B has")
    b: ChangeSideJson | None
    why: str


class OnlyInAJson(JsonOutput):
    cell_id: str
    outcome: Outcome
    reason: Reason | None


class OnlyInBJson(OnlyInAJson):
    matched: bool | None


class DriftJson(JsonOutput):
    cell_id: str
    field: str = Field(description="the record's figure (kv.kv_tokens, refusal.needed_gib, ...)")
    unit: str
    a: Number | None
    b: Number | None
    relative: float | None


class TimeToleranceJson(JsonOutput):
    relative: float
    seconds: float


class MemoryToleranceJson(JsonOutput):
    relative: float
    bytes: int


class CompareRunsJson(JsonOutput):
    """`boot-harness compare RUN_A RUN_B --json`: what changed from A to B; `has_regression` is exit 1."""

    a: str
    b: str
    tolerance: float
    has_regression: bool
    regressions: list[ChangeJson]
    fixes: list[ChangeJson]
    changed: list[ChangeJson]
    only_in_a: list[OnlyInAJson]
    only_in_b: list[OnlyInBJson]
    drift: list[DriftJson]
    unchanged: int
    notes: list[str]
    time_tolerance: TimeToleranceJson
    time_regressions: list[TimeChangeJson]
    time_improvements: list[TimeChangeJson]
    memory_tolerance: MemoryToleranceJson
    memory_compared: int
    memory_regressions: list[MemoryChangeJson]
    memory_improvements: list[MemoryChangeJson]

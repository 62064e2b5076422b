"""`boot-harness compare`: cells that differ in one axis within a run, or the same cells across two runs.

- **Within one run** (`compare RUN [--axis image]`): every pair of cells equal on all axes but `axis`, with both
  outcomes and reasons and the KV numbers side by side with their differences. Pairs whose outcome flipped come
  first.
- **Across two runs** (`compare RUN_A RUN_B`): cells matched by id. A **regression** is a cell that booted in A and
  did anything else in B, or that newly fails its expectation in B (a cell only B has counts when it mismatches);
  a **fix** is the reverse. Cells found in one run only are listed, and so are KV numbers that moved by more than the
  tolerance (default 2 %; GiB figures also by more than their 0.01 print unit). Boot times and phases that became
  slower beyond the time tolerance (both ways: default 25 % and 30 s) are time regressions (harness.analysis.timing).
  A memory peak that grew beyond the memory tolerance (both ways: default 10 % and 256 MiB) is a memory regression;
  only cells with a memory curve in both runs, the same outcome and the same source are compared.
  `has_regression` decides exit 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from harness.analysis.kv import (
    GIB,
    CellKv,
    axis_order,
    axis_values,
    cell_kv,
    human_int,
    length_axis,
)
from harness.analysis.timing import DEFAULT_TIME_TOLERANCE, TimeChange, TimeTolerance, time_changes
from harness.errors import UsageError
from harness.results.model import CellResult, RunResult
from harness.results.store import now as wall_now
from harness.units import KIB, MIB, fmt_bytes
from harness.verdict import Outcome

DEFAULT_AXIS = "image"
DEFAULT_TOLERANCE = 0.02


def parse_tolerance(text: str) -> float:
    """`2%`, `2` (percent) or `0.02` (a fraction) → 0.02."""
    raw = str(text).strip()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        else:
            value = float(raw)
            value = value / 100 if value >= 1 else value
    except ValueError:
        raise UsageError(f"--tolerance {text}: not a number (write 2%, 2 or 0.02)") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--tolerance {text}: must be a finite fraction or percentage, 0 or more")
    return value


# ---------------------------------------------------------------- memory peaks


@dataclass(frozen=True)
class MemoryTolerance:
    """A peak grew only when it grew by more than both: 10 % of a 500 MiB CPU boot is sampling noise, and so is
    256 MiB of a 70 GiB GPU boot's peak."""

    rel: float = 0.10
    abs_bytes: int = 256 * MIB

    def exceeded(self, a: int, b: int) -> bool:
        d = abs(b - a)
        return d > self.abs_bytes and d > self.rel * abs(a)

    def describe(self) -> str:
        """`10% and 256 MiB`: the size as the flag writes it where it is a round number of a unit."""
        size = next((f"{self.abs_bytes / unit:g} {name}" for unit, name in _MEM_NAMES
                     if self.abs_bytes >= unit and (self.abs_bytes * 100) % unit == 0), fmt_bytes(self.abs_bytes))
        return f"{self.rel:.0%} and {size}"


DEFAULT_MEMORY_TOLERANCE = MemoryTolerance()
_MEM_NAMES = ((1 << 40, "TiB"), (1 << 30, "GiB"), (MIB, "MiB"), (KIB, "KiB"), (1, "B"))

_MEM_PART = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|b|kib|mib|gib|tib)\s*$", re.IGNORECASE)
_MEM_UNIT = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": 1 << 40}


def parse_memory_tolerance(text: str) -> MemoryTolerance:
    """`10%,256MiB` (either order; one part keeps the other's default; B, KiB, MiB, GiB, TiB) → MemoryTolerance."""
    rel, abs_bytes = DEFAULT_MEMORY_TOLERANCE.rel, DEFAULT_MEMORY_TOLERANCE.abs_bytes
    parts = str(text).split(",")
    if not 1 <= len(parts) <= 2:
        raise UsageError(f"--memory-tolerance {text}: write a percentage and a size, e.g. 10%,256MiB")
    seen = set()
    for part in parts:
        m = _MEM_PART.match(part)
        kind = None if m is None else "%" if m.group(2) == "%" else "size"
        if m is None or kind in seen:
            raise UsageError(f"--memory-tolerance {text}: {part.strip()!r} is not a percentage (10%) or a size "
                             "(256MiB)")
        seen.add(kind)
        value = float(m.group(1))
        if not math.isfinite(value) or value * _MEM_UNIT.get(m.group(2).lower(), 1) > 1 << 62:
            raise UsageError(f"--memory-tolerance {text}: {part.strip()!r} is beyond any memory")
        if kind == "%":
            rel = value / 100
        else:
            abs_bytes = int(value * _MEM_UNIT[m.group(2).lower()])
    return MemoryTolerance(rel, abs_bytes)


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

    def to_dict(self) -> dict:
        return {"cell_id": self.cell_id, "a_bytes": self.a_bytes, "b_bytes": self.b_bytes,
                "delta_bytes": self.b_bytes - self.a_bytes,
                "relative": None if self.rel is None else round(self.rel, 4),
                "a_phase": self.a_phase, "b_phase": self.b_phase, "source": self.source}


def memory_change(a: CellResult, b: CellResult) -> MemoryChange | None:
    """The two peaks of one cell, when both runs measured one the same way and the verdicts agree (a refusal's peak
    is no smaller boot); None otherwise."""
    ma, mb = a.memory, b.memory
    if ma is None or mb is None or ma.peak_bytes is None or mb.peak_bytes is None:
        return None
    if a.outcome != b.outcome or ma.source != mb.source:
        return None
    return MemoryChange(a.cell_id, ma.peak_bytes, mb.peak_bytes, ma.peak_phase, mb.peak_phase, str(mb.source))


# ---------------------------------------------------------------- numbers side by side


@dataclass
class NumberDiff:
    name: str
    unit: str  # "bytes" | "tokens" | "x"
    a: float | None
    b: float | None
    #: (a, b) only known as a GiB figure too coarse to compare (`0.01 GiB`): shown as printed, no difference.
    coarse: tuple[bool, bool] = (False, False)

    @property
    def delta(self) -> float | None:
        if self.a is None or self.b is None or any(self.coarse):
            return None
        return self.b - self.a

    @property
    def rel(self) -> float | None:
        """The change relative to A."""
        d = self.delta
        if d is None or not self.a:
            return None
        return d / abs(self.a)

    def fmt(self, v: float | None, signed: bool = False, coarse: bool = False) -> str:
        if v is None:
            return "—"
        if coarse:
            return f"{v / GIB:.2f} GiB (as printed)"
        if self.unit == "bytes":
            return fmt_bytes(v, signed)
        if self.unit == "x":
            return f"{v:+.2f}x" if signed else f"{v:.2f}x"
        return f"{v:+,.0f}" if signed else f"{v:,.0f}"

    def to_dict(self) -> dict:
        return {"name": self.name, "unit": self.unit, "a": self.a, "b": self.b, "delta": self.delta,
                "coarse": list(self.coarse)}


def kv_numbers(a: CellKv, b: CellKv) -> list[NumberDiff]:
    """needed, available, cap, KV tokens, concurrency and vLLM's estimated max length of two cells."""
    def q(k: CellKv, what: str) -> float | None:
        v = getattr(k, what)
        return None if v is None else v.bytes

    def c(what: str) -> tuple[bool, bool]:
        va, vb = getattr(a, what), getattr(b, what)
        return (va is not None and bool(va.coarse), vb is not None and bool(vb.coarse))

    def est(k: CellKv) -> float | None:
        return k.cell.refusal.estimated_max_model_len if k.cell.refusal else None

    return [
        NumberDiff("needed", "bytes", q(a, "need"), q(b, "need"), c("need")),
        NumberDiff("available", "bytes", q(a, "available"), q(b, "available"), c("available")),
        NumberDiff("cap", "bytes", q(a, "cap"), q(b, "cap"), c("cap")),
        NumberDiff("KV tokens", "tokens", a.cell.kv.kv_tokens, b.cell.kv.kv_tokens),
        NumberDiff("concurrency", "x", a.cell.kv.max_concurrency, b.cell.kv.max_concurrency),
        NumberDiff("estimated max len", "tokens", est(a), est(b)),
    ]


# ---------------------------------------------------------------- within one run


@dataclass
class Pair:
    axis: str
    shared: dict[str, str]
    a: CellResult
    b: CellResult
    numbers: list[NumberDiff]

    @property
    def flipped(self) -> bool:
        return self.a.outcome != self.b.outcome

    def to_dict(self) -> dict:
        def side(c: CellResult) -> dict:
            return {"cell_id": c.cell_id, "value": c.axes.get(self.axis), "outcome": c.outcome, "reason": c.reason,
                    "matched": c.matched}

        return {"axis": self.axis, "shared": self.shared, "flipped": self.flipped, "a": side(self.a),
                "b": side(self.b), "numbers": [n.to_dict() for n in self.numbers if n.a is not None or n.b is not None]}


def pairs_within(run: RunResult, axis: str | None = None,
                 length_override: str | None = None) -> list[Pair]:
    """Pairs of cells equal on every axis but `axis` (default `image`), flipped outcomes first."""
    axes = axis_order(run)
    if axis is None:
        if DEFAULT_AXIS not in axes:
            raise UsageError(f"run {run.run_id} has no `{DEFAULT_AXIS}` axis: choose one with --axis "
                             f"(axes are: {', '.join(axes) or 'none'})")
        axis = DEFAULT_AXIS
    if axis not in axes:
        raise UsageError(f"--axis {axis}: the run has no such axis (axes are: {', '.join(axes) or 'none'})")
    lax = length_axis(run, length_override)
    order = axis_values(run, axis)
    others = [a for a in axes if a != axis]
    groups: dict[tuple, dict[str, CellResult]] = {}
    for c in run.cells:
        groups.setdefault(tuple(c.axes.get(o, "") for o in others), {})[c.axes.get(axis, "")] = c
    pairs = []
    for key, by_value in groups.items():
        present = [v for v in order if v in by_value]
        for i, va in enumerate(present):
            for vb in present[i + 1:]:
                a, b = by_value[va], by_value[vb]
                pairs.append(Pair(axis, dict(zip(others, key, strict=False)), a, b,
                                  kv_numbers(cell_kv(a, lax), cell_kv(b, lax))))

    def sort_key(p: Pair) -> tuple:
        vals = tuple((human_int(v) is None, human_int(v) or 0, v) for v in p.shared.values())
        return (not p.flipped, vals)

    return sorted(pairs, key=sort_key)


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

    def to_dict(self) -> dict:
        def side(c: CellResult | None) -> dict | None:
            return None if c is None else {
                "outcome": c.outcome, "reason": c.reason, "matched": c.matched,
                "expected": None if c.expected is None else c.expected.model_dump()}

        return {"cell_id": self.cell_id, "a": side(self.a), "b": side(self.b), "why": self.why}


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

    def to_dict(self) -> dict:
        return {"cell_id": self.cell_id, "field": self.field, "unit": self.unit, "a": self.a, "b": self.b,
                "relative": None if self.rel is None else round(self.rel, 6)}


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
    time_tolerance: TimeTolerance = DEFAULT_TIME_TOLERANCE
    slower: list[TimeChange] = field(default_factory=list)
    faster: list[TimeChange] = field(default_factory=list)
    memory_tolerance: MemoryTolerance = DEFAULT_MEMORY_TOLERANCE
    #: Cells whose peaks were compared (a memory curve in both runs, same outcome, same source).
    memory_compared: int = 0
    bigger: list[MemoryChange] = field(default_factory=list)
    smaller: list[MemoryChange] = field(default_factory=list)

    @property
    def has_regression(self) -> bool:
        return bool(self.regressions or self.slower or self.bigger)

    def to_dict(self) -> dict:
        return {"a": self.a_id, "b": self.b_id, "tolerance": self.tolerance, "has_regression": self.has_regression,
                "regressions": [c.to_dict() for c in self.regressions], "fixes": [c.to_dict() for c in self.fixes],
                "changed": [c.to_dict() for c in self.changed],
                "only_in_a": [{"cell_id": c.cell_id, "outcome": c.outcome, "reason": c.reason} for c in self.only_a],
                "only_in_b": [{"cell_id": c.cell_id, "outcome": c.outcome, "reason": c.reason,
                               "matched": c.matched} for c in self.only_b],
                "drift": [d.to_dict() for d in self.drift], "unchanged": self.unchanged, "notes": self.notes,
                "time_tolerance": {"relative": self.time_tolerance.rel, "seconds": self.time_tolerance.abs_s},
                "time_regressions": [t.to_dict() for t in self.slower],
                "time_improvements": [t.to_dict() for t in self.faster],
                "memory_tolerance": {"relative": self.memory_tolerance.rel,
                                     "bytes": self.memory_tolerance.abs_bytes},
                "memory_compared": self.memory_compared,
                "memory_regressions": [m.to_dict() for m in self.bigger],
                "memory_improvements": [m.to_dict() for m in self.smaller]}


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
                 time_tolerance: TimeTolerance = DEFAULT_TIME_TOLERANCE,
                 memory_tolerance: MemoryTolerance = DEFAULT_MEMORY_TOLERANCE, now: datetime | None = None) -> RunDiff:
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


# ---------------------------------------------------------------- rendering (rich)


"""`boot-harness compare RUN --axis AXIS`: the cells of one run that differ in one axis (patched vs unpatched), side
by side: every pair of cells equal on all axes but `axis`, with both outcomes and reasons and the KV numbers with
their differences. Pairs whose outcome flipped come first. (Two runs: harness.analysis.compare.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from harness.analysis.kv import CellKv, axis_order, axis_values, cell_kv, length_axis
from harness.errors import UsageError
from harness.jsonout import JsonOutput, Number
from harness.results.model import CellResult, RunResult
from harness.units import GIB, fmt_bytes, human_int
from harness.verdict import Outcome, Reason

DEFAULT_AXIS = "image"


# ---------------------------------------------------------------- numbers side by side


@dataclass
class NumberDiff:
    name: str
    unit: Literal["bytes", "tokens", "x"]
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

    def output(self) -> NumberDiffJson:
        return NumberDiffJson(name=self.name, unit=self.unit, a=self.a, b=self.b, delta=self.delta,
                              coarse=list(self.coarse))


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

    def output(self) -> PairJson:
        def side(c: CellResult) -> PairSideJson:
            return PairSideJson(cell_id=c.cell_id, value=c.axes.get(self.axis), outcome=c.outcome, reason=c.reason,
                                matched=c.matched)

        return PairJson(axis=self.axis, shared=self.shared, flipped=self.flipped, a=side(self.a), b=side(self.b),
                        numbers=[n.output() for n in self.numbers if n.a is not None or n.b is not None])


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
                pairs.append(Pair(axis, dict(zip(others, key, strict=True)), a, b,
                                  kv_numbers(cell_kv(a, lax), cell_kv(b, lax))))

    def sort_key(p: Pair) -> tuple:
        vals = tuple((human_int(v) is None, human_int(v) or 0, v) for v in p.shared.values())
        return (not p.flipped, vals)

    return sorted(pairs, key=sort_key)


def pairs_output(run: RunResult, axis: str | None, pairs: list[Pair]) -> ComparePairsJson:
    """What `compare RUN --json` prints: the axis the pairs differ in (as asked, when no pair was found)."""
    return ComparePairsJson(run=run.run_id, axis=pairs[0].axis if pairs else axis, pairs=[p.output() for p in pairs])


# ---------------------------------------------------------------- `compare RUN --json` (harness.jsonout)


class NumberDiffJson(JsonOutput):
    name: str
    unit: Literal["bytes", "tokens", "x"]
    a: Number | None
    b: Number | None
    delta: Number | None = Field(description="b - a; null when a side is missing or too coarse to compare")
    coarse: list[bool] = Field(description="(a, b): known only as a GiB figure too coarse to compare")


class PairSideJson(JsonOutput):
    cell_id: str
    value: str | None = Field(description="the cell's value of the axis the pair differs in")
    outcome: Outcome
    reason: Reason | None
    matched: bool | None


class PairJson(JsonOutput):
    axis: str
    shared: dict[str, str] = Field(description="the values of every other axis, which the two cells share")
    flipped: bool
    a: PairSideJson
    b: PairSideJson
    numbers: list[NumberDiffJson]


class ComparePairsJson(JsonOutput):
    """`boot-harness compare RUN --json`: pairs of cells equal on every axis but `axis`, flipped outcomes first."""

    run: str
    axis: str | None
    pairs: list[PairJson]

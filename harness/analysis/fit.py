"""`boot-harness analyze`: KV need and cap against max_model_len, their crossover, and the floor that boots a refusal.

For each group of cells that share every axis but max_model_len:

- a least-squares line of the **need** (the smallest KV pool one request of that length needs) and one of the
  **cap** (the KV pool the engine may use), each as bytes per token and fixed GiB, with its inputs and residuals;
- the **crossover**: the length where the lines meet, and which side of it fits (`above`: cap overtakes need there;
  `below`: need outgrows cap there, so that is the longest length that fits; `always`; `never`);
- for each KV-refused cell, the smallest **floor** that boots it, ready to paste as `CLAV_KV_RESERVE_FLOOR_GIB` or
  `--kv-cache-memory-bytes`, and vLLM's own estimated maximum length beside the fitted one;
- **findings**: numbers that contradict their outcome (a boot whose need exceeds its cap), a boot above a refusal,
  figures too coarse to use.

The math is in docs/analysis.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from pydantic import Field

from harness.analysis.kv import (
    FLOOR_ENV,
    KV_BYTES_FLAG,
    CellKv,
    Quantity,
    Source,
    axis_order,
    cell_kv,
    length_axis,
)
from harness.errors import UsageError
from harness.jsonout import JsonOutput
from harness.predict.prediction import FactCheck
from harness.results.model import RunResult
from harness.units import GIB, fmt_bytes
from harness.verdict import Outcome, Reason


class CrossoverKind(StrEnum):
    above = "above"
    below = "below"
    always = "always"
    never = "never"
    unknown = "unknown"


class Severity(StrEnum):
    #: numbers that contradict each other or their outcome
    inconsistent = "inconsistent"
    warning = "warning"
    note = "note"


# ---------------------------------------------------------------- `analyze --json` (harness.jsonout)


class PointJson(JsonOutput):
    length: int
    bytes: int
    gib: float
    cell_id: str
    source: str = Field(description="where the figure came from, as reports print it")
    residual_bytes: int


class LineJson(JsonOutput):
    """bytes = fixed_bytes + bytes_per_token × max_model_len."""

    bytes_per_token: float
    fixed_bytes: int
    fixed_gib: float
    method: str
    max_abs_residual_bytes: int
    rms_residual_bytes: int
    points: list[PointJson]


class CrossoverJson(JsonOutput):
    kind: CrossoverKind
    length: int | None
    cap_bytes_there: int | None
    text: str


class FloorJson(JsonOutput):
    """The smallest KV floor that boots one refused cell, and what to paste for it."""

    cell_id: str
    length: int
    cap_bytes: int | None
    cap_source: str | None
    need_bytes: int | None
    need_hi_bytes: int | None
    need_source: str | None
    fitted_need_bytes: int | None
    floor_bytes: int | None
    floor_gib: str | None
    basis: str
    paste: list[str]
    vllm_estimated_max_model_len: int | None
    fitted_max_model_len: int | None
    notes: list[str]


class FindingJson(JsonOutput):
    severity: Severity
    cell_id: str | None
    text: str


class GroupCellJson(JsonOutput):
    cell_id: str
    length: int | None
    outcome: Outcome
    reason: Reason | None
    cap_bytes: int | None
    need_bytes: int | None


class PredictionRowJson(JsonOutput):
    cell_id: str
    predicted_need_bytes: int | None
    bytes_per_token: int | None
    agrees: bool | None
    checks: list[FactCheck]
    skipped: str | None


class GroupJson(JsonOutput):
    group: dict[str, str] = Field(description="the axis values the group's cells share")
    label: str
    block_tokens: int
    block_source: str
    cells: list[GroupCellJson]
    need: LineJson | None
    need_why: str
    cap: LineJson | None
    cap_why: str
    predicted_need: LineJson | None
    predictions: list[PredictionRowJson]
    crossover: CrossoverJson
    floors: list[FloorJson]
    findings: list[FindingJson]


class AnalyzeJson(JsonOutput):
    """`boot-harness analyze --json`: per group of cells sharing every axis but max_model_len, the fitted lines."""

    run_id: str
    length_axis: str
    groups: list[GroupJson]


class AnalyzeEmptyJson(JsonOutput):
    """`boot-harness analyze --json` of a run that holds no cells: nothing to analyze, said so."""

    run: str
    cells: Literal[0]
    note: str


@dataclass
class Point:
    length: int
    bytes: float
    cell_id: str
    source: Source
    residual: float = 0.0
    #: the source as printed (with what a derived figure was derived from)
    where: str = ""

    def output(self) -> PointJson:
        return PointJson(length=self.length, bytes=round(self.bytes), gib=round(self.bytes / GIB, 4),
                         cell_id=self.cell_id, source=self.where or str(self.source),
                         residual_bytes=round(self.residual))
    def to_dict(self) -> dict:
        return {"length": self.length, "bytes": round(self.bytes), "gib": round(self.bytes / GIB, 4),
                "cell_id": self.cell_id, "source": self.where or str(self.source),
                "residual_bytes": round(self.residual)}


@dataclass
class Line:
    """bytes = intercept + slope × max_model_len."""

    slope: float
    intercept: float
    points: list[Point]
    method: str

    def at(self, length: float) -> float:
        return self.intercept + self.slope * length

    @property
    def max_residual(self) -> float:
        return max((abs(p.residual) for p in self.points), default=0.0)

    @property
    def rms_residual(self) -> float:
        if not self.points:
            return 0.0
        return math.sqrt(sum(p.residual ** 2 for p in self.points) / len(self.points))

    def describe(self) -> str:
        sign = "+" if self.intercept >= 0 else "−"
        if max((p.bytes for p in self.points), default=0.0) >= 0.1 * GIB:
            fixed = f"{abs(self.intercept) / GIB:.2f} GiB"
        else:
            fixed = fmt_bytes(abs(self.intercept))
        return f"{self.slope:,.0f} B/token {sign} {fixed} fixed"

    def output(self) -> LineJson:
        return LineJson(bytes_per_token=round(self.slope, 3), fixed_bytes=round(self.intercept),
                        fixed_gib=round(self.intercept / GIB, 4), method=self.method,
                        max_abs_residual_bytes=round(self.max_residual), rms_residual_bytes=round(self.rms_residual),
                        points=[p.output() for p in self.points])


def least_squares(points: list[Point], method: str | None = None) -> Line | None:
    """The least-squares line through points of at least two distinct lengths (None otherwise); fills residuals."""
    xs = [float(p.length) for p in points]
    if len(set(xs)) < 2:
        return None
    n = len(points)
    mx, my = sum(xs) / n, sum(p.bytes for p in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (p.bytes - my) for x, p in zip(xs, points, strict=False))
    slope = sxy / sxx
    intercept = my - slope * mx
    for p in points:
        p.residual = p.bytes - (intercept + slope * p.length)
    distinct = len(set(xs))
    how = method or ("exact through 2 lengths (no residual to check it against)" if distinct == 2 and n == 2
                     else f"least squares over {n} points at {distinct} lengths")
    return Line(slope, intercept, points, how)


@dataclass
class Crossover:
    """Where cap = need. `kind`: above (cap ≥ need from `length` up), below (cap ≥ need up to `length`), always,
    never, or unknown (a line is missing)."""

    kind: CrossoverKind
    length: float | None = None
    text: str = ""
    cap_bytes: float | None = None

    def output(self) -> CrossoverJson:
        return CrossoverJson(kind=self.kind, length=None if self.length is None else round(self.length),
                             cap_bytes_there=None if self.cap_bytes is None else round(self.cap_bytes),
                             text=self.text)


def crossover(cap: Line | None, need: Line | None, block: int = 1) -> Crossover:
    if cap is None or need is None:
        missing = " and ".join(n for n, line in (("cap", cap), ("need", need)) if line is None)
        return Crossover(CrossoverKind.unknown, text=f"unknown: no {missing} line")
    dslope = cap.slope - need.slope
    dfixed = cap.intercept - need.intercept
    if abs(dslope) < 1e-9 * max(abs(cap.slope), abs(need.slope), 1.0):
        if dfixed >= 0:
            return Crossover(CrossoverKind.always, text="always: cap and need grow alike and cap is above")
        return Crossover(CrossoverKind.never, text="never: cap and need grow alike and cap stays below")
    at = -dfixed / dslope
    if dslope > 0:
        if at <= 0:
            return Crossover(CrossoverKind.always, text="always: cap ≥ need at every length")
        at_b = math.ceil(at / block) * block
        return Crossover(CrossoverKind.above, at_b,
                         f"cap overtakes need at ≈{at_b:,.0f} tokens: lengths from there up fit",
                         cap.at(at_b))
    if at <= 0:
        return Crossover(CrossoverKind.never, text="never: need ≥ cap at every length, and it grows faster")
    at_b = math.floor(at / block) * block
    return Crossover(CrossoverKind.below, at_b,
                     f"cap ≥ need up to ≈{at_b:,.0f} tokens: lengths up to there fit, beyond it the need outgrows "
                     "the cap", cap.at(at_b))


@dataclass
class Floor:
    """The smallest KV floor that boots one refused cell."""

    cell_id: str
    length: int
    cap: Quantity | None
    need: Quantity | None
    fitted_need: float | None
    floor_bytes: int | None
    floor_gib: str | None
    basis: str
    vllm_estimate: int | None
    fitted_max_len: int | None
    notes: list[str] = field(default_factory=list)
    #: Whether the seed's patch was applied to the cell, so that its floor variable is read at all.
    floor_env_applies: bool = False

    def paste(self) -> list[str]:
        """What raises the KV pool for this cell: the flag always; the patch's variable only where the patch is."""
        if self.floor_bytes is None:
            return []
        env = [f"{FLOOR_ENV}={self.floor_gib}"] if self.floor_env_applies else []
        return [*env, f"{KV_BYTES_FLAG} {self.floor_bytes}"]

    def output(self) -> FloorJson:
        return FloorJson(cell_id=self.cell_id, length=self.length,
                         cap_bytes=None if self.cap is None else round(self.cap.bytes),
                         cap_source=None if self.cap is None else self.cap.where,
                         need_bytes=None if self.need is None else round(self.need.bytes),
                         need_hi_bytes=None if self.need is None else round(self.need.hi),
                         need_source=None if self.need is None else self.need.where,
                         fitted_need_bytes=None if self.fitted_need is None else round(self.fitted_need),
                         floor_bytes=self.floor_bytes, floor_gib=self.floor_gib, basis=self.basis,
                         paste=self.paste(), vllm_estimated_max_model_len=self.vllm_estimate,
                         fitted_max_model_len=self.fitted_max_len, notes=self.notes)


@dataclass
class Finding:
    severity: Severity
    text: str
    cell_id: str | None = None

    def output(self) -> FindingJson:
        return FindingJson(severity=self.severity, cell_id=self.cell_id, text=self.text)


@dataclass
class GroupAnalysis:
    key: dict[str, str]
    cells: list[CellKv]
    block: int
    block_source: str
    need_line: Line | None
    need_why: str
    cap_line: Line | None
    cap_why: str
    cross: Crossover
    floors: list[Floor]
    findings: list[Finding]
    #: the predictor's need (config.json + flags, docs/kv-model.md) at each cell's length, as a line
    predicted_line: Line | None = None

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.key.items()) or "all cells"

    def lines(self) -> list[tuple[str, Line | None, str]]:
        """(name, line, why there is none) for every line a report shows: measured need, predicted need, cap."""
        return [("need", self.need_line, self.need_why),
                ("predicted need", self.predicted_line, "no cell's model could be predicted at two lengths"),
                ("cap", self.cap_line, self.cap_why)]

    def output(self) -> GroupJson:
        return GroupJson(
            group=self.key, label=self.label, block_tokens=self.block, block_source=self.block_source,
            cells=[GroupCellJson(cell_id=c.cell_id, length=c.length, outcome=c.outcome, reason=c.cell.reason,
                                 cap_bytes=None if c.cap is None else round(c.cap.bytes),
                                 need_bytes=None if c.need is None else round(c.need.bytes)) for c in self.cells],
            need=self.need_line.output() if self.need_line else None, need_why=self.need_why,
            cap=self.cap_line.output() if self.cap_line else None, cap_why=self.cap_why,
            predicted_need=self.predicted_line.output() if self.predicted_line else None,
            predictions=[_prediction_row(c) for c in self.cells if c.cell.prediction is not None],
            crossover=self.cross.output(), floors=[f.output() for f in self.floors],
            findings=[f.output() for f in self.findings])


@dataclass
class Analysis:
    run_id: str
    length_axis: str
    groups: list[GroupAnalysis]

    @property
    def findings(self) -> list[Finding]:
        return [f for g in self.groups for f in g.findings]

    def output(self) -> AnalyzeJson:
        """What `analyze --json` prints."""
        return AnalyzeJson(run_id=self.run_id, length_axis=self.length_axis, groups=[g.output() for g in self.groups])


def _prediction_row(c: CellKv) -> PredictionRowJson:
    r = c.cell.prediction
    p = r.prediction if r else None
    return PredictionRowJson(cell_id=c.cell_id, predicted_need_bytes=p.need_bytes if p else None,
                             bytes_per_token=p.bytes_per_token if p else None, agrees=r.agrees if r else None,
                             checks=list(r.checks if r else []), skipped=r.skipped if r else None)


def _predicted_points(cells: list[CellKv]) -> list[Point]:
    out = []
    for c in cells:
        r = c.cell.prediction
        if c.length is not None and r is not None and r.prediction is not None:
            out.append(Point(r.prediction.max_model_len, float(r.prediction.need_bytes), c.cell_id, Source.predicted))
    return out


#: a measured line's term differs from the predicted one's by more than this fraction (or one KV block's bytes)
TERM_TOLERANCE = 0.02


def prediction_findings(measured: Line | None, predicted: Line | None, cells: list[CellKv]) -> list[Finding]:
    """Which term a mismatch between the logged and the predicted need points at: the slope is the per-token KV
    (under-modelled when the measured slope is steeper), the intercept the fixed per-sequence state (missing when the
    measured line has a fixed term the prediction lacks — the seed's 0.52 GiB)."""
    out: list[Finding] = []
    for c in cells:
        r = c.cell.prediction
        if r is not None and r.agrees is False:
            bad = ", ".join(f"{ch.fact} predicted {ch.predicted} logged {ch.logged}"
                            for ch in r.checks if not ch.agrees)
            out.append(Finding(Severity.warning, f"the boot disagrees with its prediction: {bad}", c.cell_id))
    if measured is None or predicted is None:
        return out
    block = max((c.cell.prediction.prediction.bytes_per_block for c in cells
                 if c.cell.prediction and c.cell.prediction.prediction), default=0)
    slope_gap = measured.slope - predicted.slope
    if abs(slope_gap) > TERM_TOLERANCE * max(predicted.slope, 1.0):
        out.append(Finding(Severity.inconsistent,
                           f"slope: the server needs {measured.slope:,.0f} B/token, the prediction "
                           f"{predicted.slope:,.0f} ({slope_gap:+,.0f} B/token): per-token KV "
                           f"{'under' if slope_gap > 0 else 'over'}-modelled (layers, heads, dtype, MTP/draft layers)"))
    gap = measured.intercept - predicted.intercept
    if abs(gap) > max(block, TERM_TOLERANCE * abs(predicted.at(max(p.length for p in predicted.points)))):
        out.append(Finding(Severity.inconsistent,
                           f"intercept: the server's need has a fixed {fmt_bytes(gap, signed=True)} "
                           f"the prediction {'lacks' if gap > 0 else 'does not see'}: a per-sequence term "
                           "(mamba / linear-attention state, speculative slots) "
                           f"{'missing from' if gap > 0 else 'counted in'} the model"))
    return out


def _points(cells: list[CellKv], what: str, excluded: list[str]) -> list[Point]:
    pts = []
    for c in cells:
        q = c.cap if what == "cap" else c.need
        if c.length is None or q is None:
            continue
        if q.coarse:
            excluded.append(f"{c.cell_id}: {what} {q.gib:.2f} GiB ({q.where}) is printed too coarsely to fit")
            continue
        pts.append(Point(c.length, q.bytes, c.cell_id, q.source, where=q.where))
    return pts


def _why_no_line(points: list[Point], what: str, excluded: list[str]) -> str:
    if not points:
        return f"no {what} figure" + (f" ({len(excluded)} too coarse)" if excluded else "") + ": nothing to fit"
    lengths = sorted({p.length for p in points})
    return (f"{len(points)} point(s), all at length {lengths[0]:,}: a line needs two lengths, so none is guessed"
            if len(lengths) == 1 else "")


def _cap_line(cells: list[CellKv], excluded: list[str]) -> tuple[Line | None, str]:
    pts = _points(cells, "cap", excluded)
    if pts and all(p.source == Source.kv_bytes_flag for p in pts) and len({p.bytes for p in pts}) == 1:
        for p in pts:
            p.residual = 0.0
        return Line(0.0, pts[0].bytes, pts, f"explicit {KV_BYTES_FLAG}: the same at every length"), ""
    line = least_squares(pts)
    return line, ("" if line else _why_no_line(pts, "cap", excluded))


def _with_held_back(need: Line | None, cells: list[CellKv]) -> Line | None:
    """The need line as the pool must hold it (the block vLLM holds back added), for where it meets the cap."""
    held = max((c.held_bytes for c in cells), default=0.0)
    return dataclasses.replace(need, intercept=need.intercept + held) if need is not None and held else need


def _floor(c: CellKv, need_line: Line | None, floor_env_applies: bool = False) -> Floor:
    r = c.cell.refusal
    notes: list[str] = []
    fitted = need_line.at(c.length) if need_line and c.length is not None else None
    if c.need is not None:
        top, basis = c.need.hi + c.held_bytes, f"need from {c.need.where}, upper end" + (
            f", plus the {fmt_bytes(c.held_bytes)} block vLLM holds back" if c.held_bytes else "")
    elif fitted is not None and need_line is not None:
        top, basis = fitted + need_line.max_residual + c.held_bytes, "fitted need + largest residual" + (
            " + the held-back block" if c.held_bytes else "")
    else:
        top, basis = None, "no need figure for this cell and no need line: boot it once with a large KV to measure"
    floor_bytes = floor_gib = None
    if top is not None:
        floor_bytes = int(math.ceil(top))
        gib = math.ceil(floor_bytes / GIB * 100 - 1e-9) / 100
        if int(gib * GIB) < floor_bytes:
            gib += 0.01
        floor_gib = f"{gib:.2f}"
        if c.cap is not None and floor_bytes <= c.cap.lo:
            notes.append(f"the need is below the cap ({fmt_bytes(c.cap.bytes)}): a floor will not change this refusal")
        uncapped = c.cell.kv.offload_uncapped_gib
        if uncapped is not None and floor_bytes > uncapped * GIB:
            notes.append(f"the profiled KV memory is only {uncapped:.2f} GiB: the floor cannot raise the cap above it "
                         "(compile and graph headroom come off the top)")
        if c.cap is not None and c.cap.source == Source.offload_cap:
            notes.append(f"{FLOOR_ENV} and a raised {KV_BYTES_FLAG} only lift the offload cap with "
                         "patches/gpu_worker-kv-cap.patch applied")
    fitted_max = None
    if need_line is not None and need_line.slope > 0 and c.cap is not None:
        blk = c.block
        fitted_max = int(max(0.0, (c.cap.bytes - c.held_bytes - need_line.intercept) / need_line.slope) // blk * blk)
    estimate = r.estimated_max_model_len if r else None
    if estimate and fitted_max:
        off = (fitted_max - estimate) / estimate
        if abs(off) > 0.10:
            notes.append(f"the fitted maximum length differs from vLLM's estimate by {off:+.0%}")
    return Floor(c.cell_id, c.length or 0, c.cap, c.need, fitted, floor_bytes, floor_gib, basis, estimate,
                 fitted_max, notes, floor_env_applies=floor_env_applies)


def _findings(cells: list[CellKv], excluded: list[str]) -> list[Finding]:
    out = [Finding(Severity.note, text) for text in excluded]
    for c in cells:
        if c.need is None or c.cap is None:
            continue
        if c.outcome == Outcome.booted and c.need.lo > c.cap.hi:
            out.append(Finding(
                Severity.inconsistent,
                f"booted although its need {fmt_bytes(c.need.bytes)} ({c.need.where}) exceeds its cap "
                f"{fmt_bytes(c.cap.bytes)} ({c.cap.where}): a number is wrong, or this boot did not go through the "
                "cap the same way — check its log", c.cell_id))
        if c.kv_refused and c.need.hi + c.held_bytes < c.cap.lo:
            out.append(Finding(
                Severity.inconsistent,
                f"refused for KV although its need {fmt_bytes(c.need.bytes)} is below the cap "
                f"{fmt_bytes(c.cap.bytes)} ({c.cap.where}): the engine sized the pool from something else", c.cell_id))
    booted = [c for c in cells if c.outcome == Outcome.booted and c.length is not None]
    for r in cells:
        if r.kv_refused and r.length is not None:
            above = [b for b in booted if b.length is not None and b.length > r.length]
            if above:
                out.append(Finding(Severity.inconsistent,
                                   f"refused at {r.length:,} tokens while {above[0].cell_id} booted at "
                                   f"{above[0].length:,}: the outcome is not monotonic in the length", r.cell_id))
    return out


def no_cells(run: RunResult) -> str | None:
    """Why a run has nothing to analyze or draw: it holds no cells (an empty shard, a selection that took none)."""
    return None if run.cells else f"run {run.run_id} holds no cells (an empty shard or selection): nothing to show"


def analyze_run(run: RunResult, length_override: str | None = None,
                block: int | None = None) -> Analysis:
    # The floor variable is the seed's patch's: worth suggesting only for a run on the fork (its cap logged) or with
    # the patch applied; a plain vLLM (the CPU example) is raised by --kv-cache-memory-bytes alone.
    forked = any(c.patches or FLOOR_ENV in c.env or c.kv.offload_cap_gib is not None for c in run.cells)
    if (empty := no_cells(run)) is not None:
        raise UsageError(empty)
    axis = length_axis(run, length_override)
    if axis is None:
        raise UsageError(f"run {run.run_id}: no max_model_len axis (axes are: {', '.join(axis_order(run)) or 'none'}); "
                         "name it with --length-axis")
    others = [a for a in axis_order(run) if a != axis]
    groups: dict[tuple, list[CellKv]] = {}
    for cell in run.cells:
        key = tuple(cell.axes.get(a, "") for a in others)
        groups.setdefault(key, []).append(cell_kv(cell, axis, block))
    out = []
    for key, cells in groups.items():
        cells.sort(key=lambda c: (c.length is None, c.length or 0))
        excluded: list[str] = []
        need_pts = _points(cells, "need", excluded)
        need_line = least_squares(need_pts)
        need_why = "" if need_line else _why_no_line(need_pts, "need", [e for e in excluded if " need " in e])
        cap_line, cap_why = _cap_line(cells, excluded)
        blk = cells[0].block
        g = GroupAnalysis(dict(zip(others, key, strict=False)), cells, blk, cells[0].block_source, need_line,
                          need_why, cap_line,
                          cap_why, crossover(cap_line, _with_held_back(need_line, cells), blk), [],
                          _findings(cells, excluded))
        g.floors = [_floor(c, need_line, forked) for c in cells if c.kv_refused]
        g.predicted_line = least_squares(_predicted_points(cells), "the predictor at each cell's length")
        g.findings += prediction_findings(need_line, g.predicted_line, cells)
        out.append(g)
    return Analysis(run.run_id, axis, out)


# ---------------------------------------------------------------- rendering (rich)

"""`boot-harness report --json`: what the grid, the markdown and the HTML show of each cell, as data — its place in
the grid, outcome, cause and hint, the KV figures (cap, need, tokens, concurrency, vLLM's estimate), the expectation
and whether it was met, time and memory — from the same grids (harness.report.grid), so no view disagrees."""

from __future__ import annotations

from pydantic import Field

from harness.analysis.fit import no_cells
from harness.analysis.kv import CellKv, Quantity
from harness.jsonout import JsonOutput
from harness.report import memory
from harness.report.build import Report
from harness.report.grid import expectation_mark, inconsistent, key_numbers
from harness.results.model import Expected, RunStatus
from harness.verdict import Outcome, Reason
from harness.verdict.causes import Finding


class FigureJson(JsonOutput):
    """A KV figure in bytes, where it came from, and whether the harness derived it (`≈` in the grid)."""

    bytes: int
    source: str
    derived: bool
    coarse: bool = Field(description="known only as a GiB figure too coarse to compare (0.01 GiB)")


class ReportKvJson(JsonOutput):
    cap: FigureJson | None = Field(description="the KV pool the engine may use")
    need: FigureJson | None = Field(description="what one request of max_model_len needs")
    available: FigureJson | None
    kv_tokens: int | None
    max_concurrency: float | None
    estimated_max_model_len: int | None = Field(description="vLLM's estimate for the memory it had (a refusal)")
    model_limit: int | None = Field(description="the model's own maximum length (a max_len_exceeds_model refusal)")
    inconsistent: bool = Field(description="booted although the need exceeds the cap: the numbers contradict it")


class ReportCellJson(JsonOutput):
    cell_id: str
    axes: dict[str, str]
    grid: str = Field(description="the grid's title (its split axis's value, or the run)")
    row: str = Field(description="the grid row: the max_model_len axis's value")
    column: str = Field(description="the grid column: the other axes' values")
    outcome: Outcome
    reason: Reason | None
    verdict: str
    exception: str | None = Field(description="a crash the catalogue names only in general: the exception type")
    cause: Finding | None
    hint: str | None = Field(description="the line every view shows under the cell: what would boot it")
    expected: Expected | None
    matched: bool | None
    mark: str = Field(description="the grid's expectation mark: ✓, ✗ expected …, or empty")
    miss: str | None = Field(description="why the cell missed its expectation")
    kv: ReportKvJson
    verdict_s: float | None
    memory_peak_bytes: int | None
    numbers: list[str] = Field(description="the grid cell's lines, as printed")


class ReportJson(JsonOutput):
    """`boot-harness report --json`: every cell as the grid shows it, and the notes the report prints."""

    run_id: str
    run_dir: str
    matrix: str
    status: RunStatus
    summary: dict[str, int] = Field(description="count per outcome, plus cells, matched, mismatched")
    split_axis: str | None
    row_axis: str | None
    cells: list[ReportCellJson]
    notes: list[str]


def _figure(q: Quantity | None) -> FigureJson | None:
    if q is None:
        return None
    return FigureJson(bytes=round(q.bytes), source=q.where, derived=q.source.derived, coarse=q.coarse)


def _kv(k: CellKv) -> ReportKvJson:
    c = k.cell
    r = c.refusal
    return ReportKvJson(
        cap=_figure(k.cap), need=_figure(k.need), available=_figure(k.available), kv_tokens=c.kv.kv_tokens,
        max_concurrency=c.kv.max_concurrency, estimated_max_model_len=r.estimated_max_model_len if r else None,
        model_limit=r.derived_max_model_len if r is not None and r.kind == Reason.max_len_exceeds_model else None,
        inconsistent=inconsistent(k))


def report_output(rep: Report, run_dir: str) -> ReportJson:
    """The report's cells in grid order (grid, row, column), and its notes."""
    run = rep.run
    cells = []
    for g in rep.grids:
        for row in g.rows:
            for col in g.cols:
                k = g.at(row, col)
                if k is None:
                    continue
                c = k.cell
                cells.append(ReportCellJson(
                    cell_id=c.cell_id, axes=c.axes, grid=g.title, row=row, column=g.col_label(col),
                    outcome=c.outcome, reason=c.reason, verdict=c.verdict(), exception=c.exception(), cause=c.cause,
                    hint=c.cause_hint(), expected=c.expected, matched=c.matched, mark=expectation_mark(c),
                    miss=c.miss(), kv=_kv(k), verdict_s=c.timings.verdict_s,
                    memory_peak_bytes=c.memory.peak_bytes if c.memory is not None else None,
                    numbers=key_numbers(k)))
    notes = list(rep.notes)
    if (empty := no_cells(run)) is not None:
        notes.append(empty)
    if (none := memory.why_none(run)) is not None:
        notes.append(none)
    first = rep.grids[0] if rep.grids else None
    return ReportJson(run_id=run.run_id, run_dir=run_dir, matrix=run.matrix.name, status=run.status,
                      summary=dict(run.summary), split_axis=first.split_axis if first else None,
                      row_axis=first.row_axis if first else None, cells=cells, notes=notes)

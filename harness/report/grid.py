"""The outcome grid of a run: one grid per value of a split axis (default `image`, when the run has one), rows the
max_model_len values, columns every combination of the other axes; each cell its outcome, reason, key KV numbers and
whether it met its expectation. The HTML, markdown and terminal forms all draw this one model."""

from __future__ import annotations

from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

from harness.analysis.kv import (
    CellKv,
    axis_order,
    axis_values,
    cell_kv,
    length_axis,
)
from harness.errors import UsageError
from harness.report import memory
from harness.report.style import SYMBOL, outcome_text
from harness.report.timeline import time_summary
from harness.results.model import CellResult, RunResult
from harness.results.store import load_run
from harness.units import fmt_bytes
from harness.verdict import Outcome, Reason

DEFAULT_SPLIT = "image"


def outcome_counts(summary: dict) -> str:
    """`3 booted, 1 refused, 0 crashed, 0 timeout, 0 error`: every outcome, in the catalogue's order."""
    return ", ".join(f"{summary.get(o, 0)} {o}" for o in Outcome)


def expectation_mark(c: CellResult) -> str:
    """`✓` met, `✗ expected booted` not met, `` no expectation."""
    if c.matched is None or c.expected is None:
        return ""
    if c.matched:
        return "✓"
    return "✗ expected " + c.expected.outcome + (f" ({c.expected.reason})" if c.expected.reason else "")


def inconsistent(k: CellKv) -> bool:
    """A boot whose need exceeds its cap beyond rounding: the numbers and the outcome contradict each other."""
    return k.cell.outcome == Outcome.booted and k.need is not None and k.cap is not None and k.need.lo > k.cap.hi


#: What the numbers in a grid cell mean: printed under every grid (terminal, markdown, HTML).
NUMBERS_LEGEND = ("cap: the KV pool the engine may use; need: what one request of max_model_len needs (vLLM's "
                  "figure; ≈: derived by the harness where vLLM printed none precise enough, `analyze` says how "
                  "precise); "
                  "tok: the KV cache's size in tokens; 1.50x: vLLM's maximum concurrency, how many requests of "
                  "max_model_len the KV cache holds at once; est. max: vLLM's estimated maximum model length "
                  "for the memory it had; ⚠: the numbers contradict the outcome; ⏱: seconds from the cell's start to "
                  "the verdict and the phase that took longest (a timeout: the phase it stalled in)")


def numbers_legend(run: RunResult) -> str:
    """NUMBERS_LEGEND, and what the memory numbers mean when a cell of the run has a memory curve."""
    return NUMBERS_LEGEND + ("; " + memory.MEMORY_LEGEND if memory.has_memory(run) else "")


def key_numbers(k: CellKv) -> list[str]:
    """The KV numbers that explain the outcome, shortest first; then the times, the memory, and how the server's stop
    went when it was not clean (SIGKILLed, processes left, unknown)."""
    c = k.cell
    out = []
    if inconsistent(k) and k.need is not None and k.cap is not None:  # inconsistent: both are there
        out.append(f"⚠ need {k.need.shown()} > cap {k.cap.shown()}, yet booted")
    elif k.cell.outcome == Outcome.refused and k.need is not None:
        out.append(f"need {k.need.shown()}" + (f" > cap {k.cap.shown()}" if k.cap else ""))
    elif k.cap is not None:
        out.append(f"cap {fmt_bytes(k.cap.bytes)}")
    if c.kv.kv_tokens is not None:
        out.append(f"{c.kv.kv_tokens:,} tok" + (f" · {c.kv.max_concurrency:.2f}x" if c.kv.max_concurrency else ""))
    if c.refusal is not None and c.refusal.estimated_max_model_len:
        out.append(f"est. max {c.refusal.estimated_max_model_len:,}")
    elif c.refusal is not None and c.refusal.kind == Reason.max_len_exceeds_model and c.refusal.derived_max_model_len:
        out.append(f"model limit {c.refusal.derived_max_model_len:,}")
    if (t := time_summary(c)) is not None:
        out.append(t)
    if (m := memory.grid_line(c)) is not None:
        out.append(m)
    if c.stop is not None and not c.stop.clean:  # a server that had to be killed, or outlived its stop
        out.append(c.stop.describe())
    return out


@dataclass
class Grid:
    run_id: str
    split_axis: str | None
    split_value: str | None
    row_axis: str | None
    rows: list[str]
    col_axes: list[str]
    cols: list[tuple[str, ...]]
    cells: dict[tuple[str, tuple[str, ...]], CellKv] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.split_axis} = {self.split_value}" if self.split_axis else f"run {self.run_id}"

    def col_label(self, col: tuple[str, ...], sep: str = ", ") -> str:
        return sep.join(f"{a}={v}" for a, v in zip(self.col_axes, col, strict=False)) or "—"

    def at(self, row: str, col: tuple[str, ...]) -> CellKv | None:
        return self.cells.get((row, col))


def build_grids(run: RunResult, split: str | None = None, length_override: str | None = None) -> list[Grid]:
    """The run's grids; none for a run that holds no cells (each renderer says so, `no_cells`)."""
    if not run.cells:
        return []
    axes = axis_order(run)
    if split is not None and split not in axes:
        raise UsageError(f"--axis {split}: the run has no such axis (axes are: {', '.join(axes) or 'none'})")
    if split is None and DEFAULT_SPLIT in axes:
        split = DEFAULT_SPLIT
    row_axis = length_axis(run, length_override)
    if split is not None and split == row_axis:
        raise UsageError(f"--axis {split} is the max_model_len axis, which is the grid's rows: choose another axis")
    if row_axis is None:
        row_axis = next((a for a in axes if a != split), None)
    col_axes = [a for a in axes if a not in (split, row_axis)]
    rows = axis_values(run, row_axis) if row_axis else [""]
    grids = []
    values: list[str | None] = [*axis_values(run, split)] if split else [None]
    for value in values:
        cells = [c for c in run.cells if split is None or c.axes.get(split) == value]
        cols: list[tuple[str, ...]] = []
        for c in cells:
            col = tuple(c.axes.get(a, "") for a in col_axes)
            if col not in cols:
                cols.append(col)
        rank = {a: {v: i for i, v in enumerate(axis_values(run, a))} for a in col_axes}
        cols.sort(key=lambda col: tuple(rank[a].get(v, 0) for a, v in zip(col_axes, col, strict=False)))
        g = Grid(run.run_id, split, value, row_axis, [r for r in rows if any(
            c.axes.get(row_axis) == r for c in cells)] if row_axis else rows, col_axes, cols)
        for c in cells:
            g.cells[(c.axes.get(row_axis, "") if row_axis else "", tuple(c.axes.get(a, "") for a in col_axes))] = \
                cell_kv(c, length_axis(run, length_override))
        grids.append(g)
    return grids


# ---------------------------------------------------------------- terminal


def grid_renderable(run: RunResult, split: str | None = None, length_override: str | None = None):
    """A rich renderable of every grid (what the pytest plugin prints at the end of a session)."""
    from rich.console import Group
    from rich.text import Text

    from harness.analysis.fit import no_cells
    from harness.escape import terminal, terminal_line
    from harness.report.text import PlainTable, literal

    if (empty := no_cells(run)) is not None:
        return literal(empty)
    tables = []
    for g in build_grids(run, split, length_override):
        title = f"{g.title}  ({run.run_id})" if g.split_axis else g.title
        # too wide, the columns go on in another table below, the rows' values repeated: no column is left out
        t = PlainTable(title=title, title_justify="left", show_lines=True, split=True)
        t.add_column(g.row_axis or "", justify="right", style="bold", id=True)
        for col in g.cols:
            t.add_column(g.col_label(col, "\n"))
        for row in g.rows:
            cells = []
            for col in g.cols:
                k = g.at(row, col)
                if k is None:
                    cells.append(Text("—", style="dim"))
                    continue
                c = k.cell
                text = outcome_text(c.outcome, f"{SYMBOL.get(c.outcome, '?')} {c.outcome}", bold=True)
                if c.reason and c.reason != Reason.ready:
                    text.append(terminal(f" ({c.reason})"))
                mark = expectation_mark(c)
                if mark:
                    text.append(terminal(f" {mark}"), style="green" if mark == "✓" else "bold red")
                for line in key_numbers(k):
                    text.append("\n" + terminal_line(line), style="dim")
                if hint := c.cause_hint():
                    text.append("\n→ " + terminal_line(hint), style="italic")
                cells.append(text)
            t.add_row(row, *cells)
        tables.append(t)
    if (mem := memory.renderable(run)) is not None:
        tables.append(mem)
    s = run.summary
    foot = literal(f"{s.get('cells', len(run.cells))} cells: {outcome_counts(s)}; {s.get('mismatched', 0)} mismatched")
    return Group(*tables, foot, Text(numbers_legend(run), style="dim"))


def grid_text(run: RunResult | Path | str, width: int = 120, color: bool = False, split: str | None = None) -> str:
    """The grid as text (ANSI colours when `color`), from a run or its directory: for terminals, logs and the pytest
    plugin's terminal summary. Never raises for a run without a length axis (rows are then the first axis)."""
    from harness.report.text import plain_console

    if not isinstance(run, RunResult):
        run, _ = load_run(Path(run))
    buf = StringIO()
    console = plain_console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                            no_color=not color)
    console.print(grid_renderable(run, split))
    return buf.getvalue()

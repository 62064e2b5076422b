"""What a run shows while it goes and when it ends: at a terminal a live table and a summary table; through a pipe
(CI logs, `| tee`, `| grep ID`) one whole line per event and per cell — never a cut id, never a verdict wrapped onto
the next line. One time per cell: when the verdict came, seconds after the cell started; teardown is apart."""

from __future__ import annotations

import re
import time

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness.analysis.kv import cell_kv, length_axis
from harness.escape import terminal, terminal_line
from harness.logfacts.timeline import Milestone, Milestones, phase_at, skipped
from harness.matrix.cells import Cell
from harness.predict.serve_flags import eager
from harness.report.style import outcome_text
from harness.report.text import PlainTable, plain_console, say_line, show
from harness.results.model import CellResult, RunResult
from harness.units import fmt_seconds, fmt_tokens
from harness.verdict import Outcome

#: What a wrapped event or summary line never breaks: a figure and its unit, a KV number and its name.
KEEP = (re.compile(r"KV (?:needed|pool|tokens) (?:—|\S+(?: [KMGT]?i?B)?)|-?\d[\d.,]* (?:s|[KMGT]?i?B)\b"),)


def _verdict(r: CellResult) -> str:
    return r.verdict()


def _longest(r: CellResult) -> str:
    slow = r.timeline.longest()
    return "—" if slow is None else f"{slow.name} {fmt_seconds(slow.seconds)}"


def _expected(r: CellResult) -> str:
    if r.expected is None or r.matched is None:
        return "no expectation"
    return "matched" if r.matched else f"MISMATCH: {r.miss()}"


def _times(r: CellResult) -> str:
    t = r.timings
    verdict = "verdict —" if t.verdict_s is None else f"verdict {fmt_seconds(t.verdict_s)} after start"
    if t.total_s is not None and t.verdict_s is not None:
        verdict += f", teardown {fmt_seconds(max(0.0, t.total_s - t.verdict_s))}"
    if (slow := r.timeline.longest()) is not None:
        verdict += f" — longest phase: {slow.name} {fmt_seconds(slow.seconds)}"
    if r.memory is not None and r.memory.peak_bytes:  # a fake server's curve holds nothing: nothing to say
        verdict += f" — memory {r.memory.describe()}"
    return verdict


def event_line(cell: Cell, r: CellResult) -> str:
    """`<id> booted (ready) — verdict 27.1 s after start, teardown 0.5 s — matched`: everything on one line."""
    retried = f" — {r.attempts} attempts" if r.attempts > 1 else ""
    return f"{cell.id} {_verdict(r)} — {_times(r)}{retried} — {_expected(r)}{_hint(r)}"


def _hint(r: CellResult) -> str:
    """` — hint: <the cause's hint>` (escaped for a terminal), or nothing when the cell has no cause."""
    hint = r.cause_hint()
    return f" — hint: {terminal_line(hint)}" if hint else ""


class LiveProgress:
    """Implements the executor's Observer. On a terminal a live table; elsewhere one line per event."""

    def __init__(self, cells: list[Cell], console: Console | None = None):
        self.console = console or plain_console(stderr=True)
        self.cells = cells
        self.state: dict[str, str] = {c.id: "pending" for c in cells}
        self.started: dict[str, float] = {}
        #: Milestones of the cells in flight (seconds since each started): where each boot is now.
        self.reached: dict[str, dict[str, float]] = {}
        self.results: dict[str, CellResult] = {}
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.console.is_terminal:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def __rich__(self) -> Table:
        done = sum(1 for s in self.state.values() if s not in ("pending", "booting"))
        table = PlainTable(title=f"{done}/{len(self.cells)} cells")
        table.add_column("cell", id=True)
        table.add_column("state", overflow="fold")
        table.add_column("verdict after start", justify="right")
        table.add_column("phase: now, or the longest", overflow="fold")
        for c in self.cells:
            st = self.state[c.id]
            r = self.results.get(c.id)
            phase = _longest(r) if r else ""
            if st == "booting":
                now = time.monotonic() - self.started[c.id]
                skip = skipped(eager(c.server_args), None)
                el = f"{now:.1f} s …"
                phase = phase_at(Milestones(**self.reached.get(c.id, {})), now, skip).describe()
            else:
                el = fmt_seconds(r.timings.verdict_s) if r else ""
            table.add_row(c.id, outcome_text(r.outcome, _verdict(r)) if r else st, el, phase)
        return table

    def _say(self, text: str) -> None:
        say_line(self.console, text, keep=KEEP)

    def cell_started(self, cell: Cell) -> None:
        self.reached.pop(cell.id, None)  # a retry starts its timeline again
        self.state[cell.id] = "booting"
        self.started[cell.id] = time.monotonic()
        if self._live is None:
            self._say(f"{cell.id} booting")

    def cell_milestone(self, cell: Cell, milestone: Milestone, at_s: float) -> None:
        self.reached.setdefault(cell.id, {})[milestone.value] = at_s

    def cell_finished(self, cell: Cell, result: CellResult) -> None:
        self.reached.pop(cell.id, None)
        self.state[cell.id] = result.outcome
        self.results[cell.id] = result
        if self._live is None:
            self._say(event_line(cell, result))


def _numbers(r: CellResult, axis: str | None) -> tuple[str, str, str]:
    kv = cell_kv(r, axis)
    return kv.need.shown() if kv.need is not None else "—", kv.cap.shown() if kv.cap is not None else "—", \
        fmt_tokens(r.kv.kv_tokens)


def summary(run: RunResult, console: Console) -> RenderableType | str:
    """At a terminal a table (ids wrap inside their column, never cut); through a pipe one line per cell."""
    axis = length_axis(run)
    if not console.is_terminal:
        lines = [f"run {run.run_id} ({run.status}): {run.summary.get('cells', 0)} cells, "
                 f"{run.summary.get('matched', 0)} matched, {run.summary.get('mismatched', 0)} mismatched, "
                 f"{run.summary.get(Outcome.error, 0)} errors"]
        for r in run.cells:
            need, cap, tokens = _numbers(r, axis)
            lines.append(f"{r.cell_id}: {_verdict(r)} — {_expected(r)} — KV needed {need}, KV pool {cap}, "
                         f"KV tokens {tokens} — {_times(r)}{_hint(r)}")
        return "\n".join(lines)
    table = PlainTable(title=f"run {run.run_id} ({run.status})")
    drops = {"longest phase": 1, "KV tokens": 2, "verdict after start": 3, "hint": 4}  # narrow, these give way first
    with_hint = any(r.cause_hint() for r in run.cells)
    for col in ("cell", "verdict", "expected", "KV needed", "KV pool", "KV tokens", "verdict after start",
                "longest phase", *(("hint",) if with_hint else ())):
        table.add_column(col, id=col == "cell", drop=drops.get(col),
                         justify="right" if col.startswith("KV") or col.startswith("verdict a") else "left")
    for r in run.cells:
        need, cap, tokens = _numbers(r, axis)
        marks: dict[bool | None, str | tuple[str, str]] = {True: ("✓ ", "green"), False: ("✗ ", "red"), None: ""}
        mark = marks[r.matched]
        table.add_row(r.cell_id, outcome_text(r.outcome, _verdict(r)), Text.assemble(mark, terminal(_expected(r))),
                      need, cap, tokens, fmt_seconds(r.timings.verdict_s), _longest(r),
                      *((terminal_line(r.cause_hint() or "—"),) if with_hint else ()))
    return table


def print_summary(run: RunResult, console: Console) -> None:
    shown = summary(run, console)
    if isinstance(shown, str):
        for line in shown.split("\n"):
            say_line(console, line, keep=KEEP)
    else:
        show(console, shown)

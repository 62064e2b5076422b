"""Live progress (cell, state, elapsed) while a run goes, and the summary table after it; rich does the drawing."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from harness.cells import Cell
from harness.report.style import STYLE
from harness.results.model import CellResult, RunResult



def _gib(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _match(r: CellResult) -> str:
    return {True: "[green]✓[/]", False: "[red]✗[/]", None: ""}[r.matched]


class LiveProgress:
    """Implements the runner's Observer. On a terminal a live table; elsewhere (CI logs) one line per event."""

    def __init__(self, cells: list[Cell], console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.cells = cells
        self.state: dict[str, str] = {c.id: "pending" for c in cells}
        self.started: dict[str, float] = {}
        self.elapsed: dict[str, float] = {}
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
        table = Table(title=f"{sum(1 for s in self.state.values() if s not in ('pending', 'booting'))}/{len(self.cells)} cells")
        for col in ("cell", "state", "elapsed"):
            table.add_column(col)
        for c in self.cells:
            st = self.state[c.id]
            if st == "booting":
                el = time.monotonic() - self.started[c.id]
            else:
                el = self.elapsed.get(c.id)
            table.add_row(c.id, f"[{STYLE.get(st.split()[0], '')}]{st}[/]" if st in STYLE or " " in st else st,
                          "" if el is None else f"{el:.1f}s")
        return table

    def cell_started(self, cell: Cell) -> None:
        self.state[cell.id] = "booting"
        self.started[cell.id] = time.monotonic()
        if self._live is None:
            self.console.print(f"[bold]{cell.id}[/] booting", highlight=False)

    def cell_finished(self, cell: Cell, result: CellResult) -> None:
        self.elapsed[cell.id] = time.monotonic() - self.started.get(cell.id, time.monotonic())
        self.state[cell.id] = result.outcome
        if self._live is None:
            mark = {True: "matched", False: "MISMATCH", None: "no expectation"}[result.matched]
            self.console.print(
                f"[bold]{cell.id}[/] [{STYLE[result.outcome]}]{result.outcome}[/] ({result.reason}) "
                f"in {self.elapsed[cell.id]:.1f}s — {mark}", highlight=False)


def summary_table(run: RunResult) -> Table:
    table = Table(title=f"run {run.run_id} ({run.status})")
    for col in ("cell", "outcome", "reason", "expected", "ok", "needed GiB", "available GiB", "KV tokens", "verdict s"):
        table.add_column(col, justify="right" if col.endswith(("GiB", "tokens", " s")) else "left")
    for r in run.cells:
        exp = "" if r.expected is None else r.expected.outcome + (f" ({r.expected.reason})" if r.expected.reason else "")
        needed = r.refusal.needed_gib if r.refusal else None
        available = (r.refusal.available_gib if r.refusal and r.refusal.available_gib is not None
                     else r.kv.available_gib if r.kv.available_gib is not None else r.kv.reserved_gib)
        table.add_row(r.cell_id, f"[{STYLE[r.outcome]}]{r.outcome}[/]", r.reason or "", exp, _match(r), _gib(needed),
                      _gib(available), "" if r.kv.kv_tokens is None else f"{r.kv.kv_tokens:,}",
                      "" if r.timings.verdict_s is None else f"{r.timings.verdict_s:.1f}")
    return table

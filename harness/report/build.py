"""The report of a run, built once: its grids, analysis and KV plot, rendered as HTML, markdown and terminal text."""


from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.fit import Analysis, analyze_run
from harness.errors import UsageError
from harness.report.grid import Grid, build_grids, grid_text
from harness.results.model import RunResult


@dataclass
class Report:
    run: RunResult
    grids: list[Grid]
    analysis: Analysis | None
    notes: list[str] = field(default_factory=list)
    plot: bool = False
    """Whether the KV plot is drawn (matplotlib there and asked for); each image is drawn when first used."""

    @functools.cached_property
    def png(self) -> bytes | None:
        """Every group in one PNG (`report --plot`)."""
        from harness.report.plot import plot_png

        return plot_png(self.analysis) if self.plot and self.analysis is not None else None

    @functools.cached_property
    def pngs(self) -> list[tuple[str, bytes]]:
        """(group, PNG) per group: the HTML page's panels."""
        from harness.report.plot import plot_pngs

        return plot_pngs(self.analysis) if self.plot and self.analysis is not None else []

    def html(self) -> str:
        from harness.report.html import render_html

        return render_html(self.run, self.grids, self.analysis, self.pngs, self.notes)

    def markdown(self, plot_link: str | None = None) -> str:
        from harness.report.markdown import render_markdown

        return render_markdown(self.run, self.grids, self.analysis, plot_link, self.notes)


def build_report(run: RunResult, split: str | None = None, length_override: str | None = None,
                 plot: bool = True) -> Report:
    grids = build_grids(run, split, length_override)
    notes: list[str] = []
    analysis = None
    try:
        analysis = analyze_run(run, length_override) if run.cells else None  # an empty run says so once, above
    except UsageError as exc:
        notes.append(f"no KV analysis: {exc}")
    drawn = False
    if plot and analysis is not None:
        from harness.report.plot import MISSING, available

        drawn = available()
        if not drawn:
            notes.append(MISSING)
    return Report(run, grids, analysis, notes, drawn)


def session_summary(run_dir: Path, width: int = 120, color: bool = False) -> str:
    """What the pytest plugin prints at the end of a session: the grid of the session's run, as text."""
    return grid_text(Path(run_dir), width=width, color=color)

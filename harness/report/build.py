"""The report of a run, built once: its grids, analysis and KV plot, rendered as HTML, markdown and terminal text."""


from __future__ import annotations

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
    png: bytes | None
    notes: list[str] = field(default_factory=list)

    def html(self) -> str:
        from harness.report.html import render_html

        return render_html(self.run, self.grids, self.analysis, self.png, self.notes)

    def markdown(self, plot_link: str | None = None) -> str:
        from harness.report.markdown import render_markdown

        return render_markdown(self.run, self.grids, self.analysis, plot_link, self.notes)


def build_report(run: RunResult, split: str | None = None, length_override: str | None = None,
                 plot: bool = True) -> Report:
    grids = build_grids(run, split, length_override)
    notes: list[str] = []
    analysis = png = None
    try:
        analysis = analyze_run(run, length_override) if run.cells else None  # an empty run says so once, above
    except UsageError as exc:
        notes.append(f"no KV analysis: {exc}")
    if plot and analysis is not None:
        from harness.report.plot import MISSING, available, plot_png

        if available():
            png = plot_png(analysis)
        else:
            notes.append(MISSING)
    return Report(run, grids, analysis, png, notes)


def session_summary(run_dir: Path, width: int = 120, color: bool = False) -> str:
    """What the pytest plugin prints at the end of a session: the grid of the session's run, as text."""
    return grid_text(Path(run_dir), width=width, color=color)

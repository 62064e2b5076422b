"""The frontiers a run found, as a table."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.frontier import GroupFrontier


def render_frontiers(found: list[GroupFrontier], run_dir: Path | None = None):
    """The heading is a line of its own, not the table's title: a title wraps at the table's width, a run
    directory's path is often wider."""
    from rich.console import Group

    from harness.report.text import PlainTable, literal

    t = PlainTable()
    for col in ("group", "frontier", "refuses at", "boots", "probes", "status"):
        t.add_column(col, justify="right" if col in ("frontier", "refuses at", "boots") else "left", id=col == "group",
                     drop=1 if col == "probes" else None)
    for g in found:
        s = g.search
        t.add_row(g.label, "—" if s.frontier is None else f"{s.frontier:,}",
                  "—" if s.refused_at is None else f"{s.refused_at:,}", str(s.boots),
                  " → ".join(p.short() for p in s.probes), s.text)
    return Group(literal(f"frontier{f' ({run_dir})' if run_dir else ''}", style="italic"), t)

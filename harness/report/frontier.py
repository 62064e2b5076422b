"""The frontiers a run found, as a table."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.frontier import GroupFrontier


def render_frontiers(found: list[GroupFrontier], run_dir: Path | None = None):
    from rich.table import Table

    t = Table(title=f"frontier{f' ({run_dir})' if run_dir else ''}", title_justify="left")
    for col in ("group", "frontier", "refuses at", "boots", "probes", "status"):
        t.add_column(col, justify="right" if col in ("frontier", "refuses at", "boots") else "left")
    for g in found:
        s = g.search
        t.add_row(g.label, "—" if s.frontier is None else f"{s.frontier:,}",
                  "—" if s.refused_at is None else f"{s.refused_at:,}", str(s.boots),
                  " → ".join(p.short() for p in s.probes), s.text)
    return t

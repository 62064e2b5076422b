"""Comparisons as rich renderables: pairs within a run, and last night against tonight."""

from __future__ import annotations

from harness.analysis.compare import Change, RunDiff
from harness.analysis.pairs import Pair
from harness.escape import terminal
from harness.report.style import outcome_text
from harness.results.model import CellResult
from harness.units import fmt_bytes, fmt_seconds
from harness.verdict import Outcome


def _o(c: CellResult | None):
    """`booted (ready) ✓`, the outcome in its colour."""
    from rich.text import Text

    if c is None:
        return Text("—")
    mark = {True: " ✓", False: " ✗", None: ""}[c.matched]
    return Text.assemble(outcome_text(c.outcome), terminal((f" ({c.reason})" if c.reason else "") + mark))


def render_pairs(pairs: list[Pair], run_id: str):
    from rich.console import Group
    from rich.text import Text

    from harness.report.text import PlainTable, literal

    if not pairs:
        return literal(f"run {run_id}: no two cells differ in that axis alone")
    axis = pairs[0].axis
    flipped = sum(p.flipped for p in pairs)
    out: list = [literal(f"run {run_id}: {len(pairs)} pair(s) differing only in {axis}, {flipped} with a flipped "
                         "outcome", style="bold")]
    for p in pairs:
        shared = ", ".join(f"{k}={v}" for k, v in p.shared.items()) or "(no other axis)"
        head = Text.assemble(("FLIPPED ", "bold red") if p.flipped else "", (terminal(shared), "bold"),
                             terminal(f": {axis}={p.a.axes.get(axis)} "), _o(p.a),
                             terminal(f"  vs  {axis}={p.b.axes.get(axis)} "), _o(p.b))
        out.append(Text(""))
        out.append(head)
        t = PlainTable(box=None, pad_edge=False, show_header=True, header_style="dim")
        for col in ("", str(p.a.axes.get(axis)), str(p.b.axes.get(axis)), "difference"):
            t.add_column(col, justify="left" if col == "" else "right")
        for n in p.numbers:
            if n.a is None and n.b is None:
                continue
            rel = f" ({n.rel:+.0%})" if n.rel is not None and n.delta else ""
            t.add_row(n.name, n.fmt(n.a, coarse=n.coarse[0]), n.fmt(n.b, coarse=n.coarse[1]),
                      (n.fmt(n.delta, signed=True) + rel) if n.delta is not None else "")
        if t.row_count:
            out.append(t)
        for c in (p.a, p.b):
            if c.detail and c.outcome != Outcome.booted:
                out.append(literal(f"  {c.cell_id}: {c.detail[:300]}", style="dim", whole=True))  # the log's words
    return Group(*out)


def render_diff(d: RunDiff):
    from rich.console import Group
    from rich.text import Text

    from harness.report.text import PlainTable, literal

    out: list = [literal(f"{d.a_id} → {d.b_id}: {len(d.regressions)} regression(s), {len(d.fixes)} fix(es), "
                         f"{len(d.changed)} other change(s), {d.unchanged} unchanged, {len(d.only_a)} only in A, "
                         f"{len(d.only_b)} only in B, {len(d.drift)} KV number(s) drifted beyond {d.tolerance:.1%}, "
                         f"{len(d.slower)} time regression(s) beyond {d.time_tolerance.describe()}"
                         # said only where memory was measured in both runs: older records read as they always did
                         + (f", {len(d.bigger)} memory peak(s) grown beyond {d.memory_tolerance.describe()}"
                            if d.memory_compared else ""),
                         style="bold")]
    for n in d.notes:
        out.append(literal(f"note: {n}", style="yellow"))

    def changes(title: str, items: list[Change], style: str) -> None:
        if not items:
            return
        t = PlainTable(title=title, title_justify="left", title_style=style, box=None, pad_edge=False)
        for col in ("cell", "A", "B", "why"):  # narrow, A and B give way: `why` says both
            t.add_column(col, id=col == "cell", drop={"A": 2, "B": 1}.get(col))
        for c in items:
            t.add_row(c.cell_id, _o(c.a), _o(c.b), c.why)
        out.extend([Text(""), t])

    changes("REGRESSIONS", d.regressions, "bold red")
    changes("fixes", d.fixes, "bold green")
    changes("other changes", d.changed, "bold")
    for title, cells in (("only in A", d.only_a), ("only in B", d.only_b)):
        if cells:
            out.append(Text(""))
            out.append(literal(f"{title}: " + ", ".join(f"{c.cell_id} ({c.outcome})" for c in cells)))
    def table(title: str, style: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        """A titled table whose number columns (A, B, change) are right-aligned; nothing when it has no rows."""
        if rows:
            t = PlainTable(title=title, title_justify="left", title_style=style, box=None, pad_edge=False)
            for col in columns:
                t.add_column(col, justify="right" if col in ("A", "B", "change") else "left", id=col == "cell")
            for row in rows:
                t.add_row(*row)
            out.extend([Text(""), t])

    for title, items, style in ((f"TIME REGRESSIONS beyond {d.time_tolerance.describe()}", d.slower, "bold red"),
                                (f"faster beyond {d.time_tolerance.describe()}", d.faster, "bold green")):
        table(title, style, ("cell", "what", "A", "B", "change"),
              [(x.cell_id, x.what, fmt_seconds(x.a_s), fmt_seconds(x.b_s),
                f"{x.rel:+.0%}" if x.rel is not None else "from 0") for x in items])
    for title, mems, style in ((f"MEMORY REGRESSIONS: peaks grown beyond {d.memory_tolerance.describe()}", d.bigger,
                                "bold red"),
                               (f"smaller peaks beyond {d.memory_tolerance.describe()}", d.smaller, "bold green")):
        table(title, style, ("cell", "A", "B", "change", "phase (B)"),
              [(m.cell_id, fmt_bytes(m.a_bytes), fmt_bytes(m.b_bytes),
                fmt_bytes(m.b_bytes - m.a_bytes, signed=True) + (f" ({m.rel:+.0%})" if m.rel is not None else ""),
                m.b_phase or "—") for m in mems])
    if d.drift:
        t = PlainTable(title=f"KV drift beyond {d.tolerance:.1%}", title_justify="left", title_style="bold", box=None,
                  pad_edge=False)
        for col in ("cell", "number", "A", "B", "change"):
            t.add_column(col, justify="right" if col in ("A", "B", "change") else "left", id=col == "cell")
        for x in d.drift:
            change = ("appeared" if x.a is None else "disappeared" if x.b is None
                      else f"{x.rel:+.1%}" if x.rel is not None else "from 0")
            t.add_row(x.cell_id, x.field, "—" if x.a is None else f"{x.a:g}", "—" if x.b is None else f"{x.b:g}",
                      change)
        out.extend([Text(""), t])
    return Group(*out)

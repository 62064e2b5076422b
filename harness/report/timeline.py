"""Where a run's boot time went: one stacked bar per cell in the HTML (one scale for all cells, phases named, a
legend), a table in markdown and at the terminal, and the run's total per phase, so a reader sees which phase
dominates a night without opening a log."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from harness.logfacts.timeline import Milestone, PhaseSpan, span_names
from harness.results.model import CellResult, RunResult
from harness.units import fmt_seconds
from harness.verdict import Outcome

#: One colour per phase (the milestone that ends it), for the bars and their legend.
PHASE_COLOURS: dict[Milestone, str] = {
    Milestone.pulled: "#b0bec5",
    Milestone.started: "#90a4ae",
    Milestone.first_line: "#ffcc80",
    Milestone.engine_started: "#ffe082",
    Milestone.loading_started: "#fff3b0",
    Milestone.weights_loaded: "#80cbc4",
    Milestone.compiled: "#ef9a9a",
    Milestone.kv_sized: "#9fa8da",
    Milestone.graphs_captured: "#ce93d8",
    Milestone.engine_ready: "#a5d6a7",
    Milestone.listening: "#fff59d",
    Milestone.healthy: "#bcaaa4",
    Milestone.served: "#81d4fa",
}
#: Every name a span may have, with its colour: a joined span ("start-up and weight loading") takes its end's.
NAME_COLOURS: dict[str, str] = {n: c for m, c in PHASE_COLOURS.items() for n in span_names(m)}
#: The tail of a bar after the last milestone: the phase the verdict found the server in (a refusal, a timeout).
TAIL_COLOUR = "#e0e0e0"


@dataclass(frozen=True)
class Bar:
    cell: CellResult
    spans: list[PhaseSpan]
    #: Seconds from the last milestone to the verdict, in the phase the verdict found the server in.
    tail_s: float
    tail_name: str | None

    @property
    def total_s(self) -> float:
        return sum(s.seconds for s in self.spans) + self.tail_s


def bars(run: RunResult) -> list[Bar]:
    out = []
    for c in run.cells:
        spans = c.timeline.spans()
        phase = c.timeline.phase
        tail = phase.for_s if phase is not None and phase.after is not Milestone.served else 0.0
        out.append(Bar(c, spans, round(tail, 3), phase.name if phase is not None and tail else None))
    return out


def phase_totals(run: RunResult) -> list[tuple[str, float]]:
    """Seconds per phase over every cell of the run, largest first (the verdict's unfinished phase included)."""
    totals: dict[str, float] = {}
    for b in bars(run):
        for s in b.spans:
            totals[s.name] = totals.get(s.name, 0.0) + s.seconds
        if b.tail_name:
            totals[b.tail_name] = totals.get(b.tail_name, 0.0) + b.tail_s
    return sorted(totals.items(), key=lambda kv: -kv[1])


def dominant(run: RunResult, top: int = 3) -> str | None:
    """`1,234 s of boot time in 12 cells: torch.compile 41 %, weight loading 22 %, imports 15 %`."""
    totals = phase_totals(run)
    whole = sum(v for _, v in totals)
    if not whole:
        return None
    share = ", ".join(f"{name} {v / whole:.0%}" for name, v in totals[:top])
    return f"{fmt_seconds(whole)} of boot time in {len(run.cells)} cells: {share}"


def time_summary(c: CellResult) -> str | None:
    """One line for a grid cell: the verdict's time and the longest phase, or where a timeout stalled."""
    t = c.timings.verdict_s
    if t is None:
        return None
    if c.outcome == Outcome.timeout and c.timeline.phase is not None:
        return f"⏱ {fmt_seconds(t)}: {c.timeline.phase.describe()}"
    slow = c.timeline.longest()
    return f"⏱ {fmt_seconds(t)}" + (f" · {slow.name} {fmt_seconds(slow.seconds)}" if slow else "")


def _names_in(run_bars: list[Bar]) -> list[str]:
    """The phases any cell went through, in boot order."""
    seen = {s.name for b in run_bars for s in b.spans} | {b.tail_name for b in run_bars if b.tail_name}
    return [n for n in NAME_COLOURS if n in seen]


def table_rows(run: RunResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows: cell, verdict, time to verdict, longest phase, then seconds per phase."""
    run_bars = bars(run)
    names = _names_in(run_bars)
    header = ["cell", "verdict", "verdict after", "longest phase", *names]
    rows = []
    for b in run_bars:
        per = {s.name: s.seconds for s in b.spans}
        if b.tail_name:
            per[b.tail_name] = per.get(b.tail_name, 0.0) + b.tail_s
        slow = b.cell.timeline.longest()
        rows.append([b.cell.cell_id, b.cell.verdict(), fmt_seconds(b.cell.timings.verdict_s),
                     f"{slow.name} {fmt_seconds(slow.seconds)}" if slow else "—",
                     *(fmt_seconds(per[n]) if n in per else "" for n in names)])
    return header, rows


def markdown(run: RunResult) -> list[str]:
    header, rows = table_rows(run)
    if not rows:
        return []
    from harness.escape import md_text as esc

    lines = ["### Boot timeline", ""]
    if (d := dominant(run)) is not None:
        lines += [esc(d), ""]
    lines.append("| " + " | ".join(esc(h) for h in header) + " |")
    lines.append("|:---|:---|---:|:---|" + "---:|" * (len(header) - 4))
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    lines.append("")
    return lines


CSS = """
.timeline{margin:8px 0 16px;max-width:1100px}
.timeline .row{display:flex;align-items:center;margin:3px 0}
.timeline .label{width:320px;flex:none;font-size:.85em;overflow-wrap:anywhere;padding-right:8px}
.timeline .track{flex:1;display:flex;height:18px;background:#fafafa;border:1px solid #e0e0e0}
.timeline .seg{height:100%;min-width:1px}
.timeline .total{width:190px;flex:none;font-size:.85em;padding-left:8px;font-variant-numeric:tabular-nums}
.phase-legend span{display:inline-block;padding:1px 8px;margin:2px 6px 2px 0;border:1px solid #9e9e9e;font-size:.85em}
"""


def html(run: RunResult) -> str:
    """The section: a bar per cell on one scale (the slowest cell spans the track), segments named in their title."""
    run_bars = bars(run)
    scale = max((b.total_s for b in run_bars), default=0.0)
    if not scale:
        return ""
    colour = NAME_COLOURS
    rows = []
    for b in run_bars:
        segs = [(s.name, s.seconds, colour[s.name]) for s in b.spans]
        if b.tail_name:
            segs.append((f"{b.tail_name} (unfinished at the verdict)", b.tail_s, TAIL_COLOUR))
        seg_html = "".join(
            f'<div class="seg" data-phase="{escape(name, quote=True)}" data-seconds="{sec:g}" '
            f'title="{escape(name, quote=True)}: {escape(fmt_seconds(sec))}" '
            f'style="width:{100 * sec / scale:.3f}%;background:{col}"></div>'
            for name, sec, col in segs if sec > 0)
        cid = escape(b.cell.cell_id, quote=True)
        note = time_summary(b.cell) or ""
        rows.append(f'<div class="row" id="timeline-{cid}" data-cell-id="{cid}">'
                    f'<div class="label">{escape(b.cell.cell_id)}'
                    f'</div><div class="track">{seg_html}</div>'
                    f'<div class="total">{escape(note)}</div></div>')
    present = _names_in(run_bars)
    legend = "".join(f'<span style="background:{colour[n]}">{escape(n)}</span>' for n in present)
    legend += f'<span style="background:{TAIL_COLOUR}">unfinished at the verdict</span>'
    head = dominant(run)
    return ('<section id="timeline"><h2>Boot timeline</h2>'
            + (f'<p class="meta">{escape(head)}; one scale for all cells: the longest bar is '
               f'{escape(fmt_seconds(scale))}</p>' if head else "")
            + f'<p class="phase-legend">{legend}</p><div class="timeline">{"".join(rows)}</div></section>')

"""`boot-harness history` rendered: a terminal table (a row per cell, its nights as a strip of outcome symbols, ids
whole through a pipe), markdown for the nightly job summary, and one offline HTML page — a row per cell, a column per
night coloured by outcome and outlined where it missed its expectation, a boot-time sparkline (inline SVG, no script:
every complete night the cell has a boot time on, whatever its verdict, on a scale from 0 s to the row's highest night,
both written beside it) with its change points marked.

Stable hooks for tools and tests: each row `<tr class="cell-history" id="history-CELL_ID" data-cell-id="CELL_ID"
data-since="RUN">`, each night `<td class="night OUTCOME matched|mismatched|unexpected|gap" data-run="RUN"
data-status="STATUS">`, each sparkline `<svg class="spark" data-max-s="SECONDS">` with a `<circle class="dot OUTCOME">`
per night (the flips only past DOTS nights) and a `<circle class="cp" data-run="RUN">` per change point of the total
boot time.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from rich.console import Group
from rich.text import Text

from harness.analysis.history import CellHistory, History
from harness.analysis.history_runs import TOTAL, Entry, Night
from harness.escape import md_code, md_text
from harness.report.glyphs import text_only
from harness.report.html import COLOURS, css
from harness.report.markdown import BADGE
from harness.report.style import STYLE, SYMBOL
from harness.report.text import PlainTable, Prose, literal
from harness.units import fmt_seconds, plural
from harness.verdict import Outcome

GAP = "·"
"""A night the cell did not run."""


def _symbol(e: Entry | None) -> str:
    return GAP if e is None else SYMBOL.get(e.outcome, "?")


def _expectation(e: Entry) -> str:
    return "unexpected" if e.matched is None else "matched" if e.matched else "mismatched"


def _strip(h: History, c: CellHistory) -> Text:
    """One symbol per night in the outcome's colour; a missed expectation bold and underlined, a night that is not
    complete dim. Nights in a row with one style are one span (a year is 365 symbols a row; rich's cost is per span)."""
    t = Text()
    run, style = "", None
    for n, e in zip(h.runs, c.entries, strict=False):
        now = "" if e is None else STYLE.get(e.outcome, "")
        if e is not None and e.matched is False:
            now += " bold underline"
        if not n.counts:
            now += " dim"
        now = now.strip()
        if now != style and run:
            t.append(run, style=style)
            run = ""
        run, style = run + _symbol(e), now
    if run:
        t.append(run, style=style)
    return t


def _since(h: History, c: CellHistory) -> str:
    return "—" if c.since is None else h.runs[c.since].run_id


def _boot(c: CellHistory) -> str:
    if c.time_changes:
        return "; ".join(t.describe() for t in c.time_changes)
    if c.too_few is not None:
        return f"too few runs to tell steps ({c.too_few.got} of {c.too_few.needed})"
    return "no step" if c.series else "—"


def _changes(c: CellHistory) -> str:
    if c.before is None:
        return "—"
    return ", ".join(ch.describe() for ch in c.changes) or "nothing recorded"


def render_table(h: History) -> Group:
    first, last = h.runs[0], h.runs[-1]
    table = PlainTable(title=f"{plural(len(h.runs), 'run')}, {first.started_at:%Y-%m-%d %H:%M} → "
                             f"{last.started_at:%Y-%m-%d %H:%M} (oldest first; {GAP} not run)")
    # narrow, the run ids and what changed give way (until first, since last): the cell id and its verdict never
    table.add_column("cell", id=True)
    table.add_column("nights")
    table.add_column("verdict")
    for col, drop in (("since", 1), ("until", 4)):
        table.add_column(col, whole=True, drop=drop)
    table.add_column("changed", drop=2)
    table.add_column("boot time", drop=3)
    for c in h.cells:
        latest = c.latest
        table.add_row(c.cell_id, _strip(h, c), latest.verdict if latest else "—", _since(h, c),
                      "—" if c.before is None else h.runs[c.before].run_id, _changes(c), _boot(c))
    parts: list = [table]
    for cid, why in h.missed():
        parts.append(Prose(literal(f"MISSED {cid}: {why}", style="bold red")))
    return Group(*parts)


# ---------------------------------------------------------------- markdown


def render_markdown(h: History) -> str:
    """Every value a code span (ids) or escaped text (verdicts, what changed: argv and env as recorded, warnings):
    harness.escape."""
    first, last = h.runs[0], h.runs[-1]
    lines = ["## History", "",
             f"{plural(len(h.runs), 'run')} from {md_code(first.run_id)} ({first.started_at:%Y-%m-%d}) to "
             f"{md_code(last.run_id)} ({last.started_at:%Y-%m-%d}), oldest first; {GAP} not run, **✗** missed its "
             "expectation.", ""]
    lines += ["| cell | nights | verdict | since | changed | boot time |", "|---|---|---|---|---|---|"]
    for c in h.cells:
        strip = "".join(GAP if e is None else BADGE.get(e.outcome, "?") + ("**✗**" if e.matched is False else "")
                        for e in c.entries)
        latest = c.latest
        lines.append("| " + " | ".join([md_code(c.cell_id, in_table=True), strip,
                                         md_text(latest.verdict if latest else "—"),
                                         md_code(_since(h, c), in_table=True), md_text(_changes(c)),
                                         md_text(_boot(c))]) + " |")
    lines.append("")
    told = [c for c in h.cells if c.before is not None or c.time_changes]
    if told:
        lines += ["### What changed", ""] + [f"- {md_text(h.line(c))}" for c in told] + [""]
    missed = h.missed()
    if missed:
        lines += ["### Missed in the latest run", ""] + [f"- {md_code(cid)}: {md_text(why)}" for cid, why in missed]
        lines.append("")
    if h.warnings:
        lines += ["### Not read as verdicts", ""] + [f"- {md_text(w)}" for w in h.warnings] + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------- HTML

_W, _H, _PAD, _LABEL = 170, 40, 4, 34
"""The sparkline's box (px): the curve's width is `_W - _LABEL`, its scale's labels to the left of it."""

OUTCOME_DOT: dict[str, str] = {Outcome.booted: "#2e7d32", Outcome.refused: "#b28704", Outcome.crashed: "#c62828",
                               Outcome.timeout: "#6a1b9a", Outcome.error: "#7f0000"}

CSS = """
table.history{border-collapse:collapse;margin:8px 0 16px;font-size:.9em}
table.history th,table.history td{border:1px solid #bdbdbd;padding:3px 6px;text-align:left;vertical-align:middle}
table.history thead th{background:#eceff1;font-weight:600}
table.history th.run{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:400;font-size:.8em}
div.scroll{overflow-x:auto;max-width:100%}
td.night{min-width:14px;text-align:center;font-size:.85em}
td.night.mismatched{outline:3px solid #d50000;outline-offset:-3px}
td.night.gap{background:#fafafa;color:#bdbdbd}
td.night.partial{opacity:.45}
svg.spark polyline{fill:none;stroke:#1565c0;stroke-width:1.5}
svg.spark line.axis{stroke:#9e9e9e;stroke-width:1}
svg.spark line.top{stroke:#e0e0e0;stroke-width:1}
svg.spark text{font-size:10px;fill:#555;font-family:system-ui,"DejaVu Sans",sans-serif}
svg.spark circle.cp{fill:none;stroke:#d50000;stroke-width:2}
td.changes{max-width:520px}
table.history tbody th code{white-space:nowrap}
td.boot .steps{font-size:.85em;color:#555;max-width:220px}
td .since{font-size:.85em;color:#555;margin-top:2px}
td.boot{min-width:174px}
"""

DOTS = 60
"""The most nights a sparkline draws a dot for each of."""

SCALE = "from 0 s to the row's own highest night (its figure at the left): a 5 % drift is 5 % of the height"


def spark_points(h: History, c: CellHistory) -> list[tuple[int, float, str]]:
    """(run index, total boot seconds, outcome) of every complete night the cell has a boot time on, whatever its
    verdict: a cell that flipped is drawn whole, each night in its outcome's colour."""
    return [(i, e.times[TOTAL], e.outcome) for i, (n, e) in enumerate(zip(h.runs, c.entries, strict=False))
            if e is not None and n.counts and TOTAL in e.times]


def _spark(h: History, c: CellHistory, at: dict[str, int] | None = None) -> str:
    """The total boot time night by night on a zero-based scale (SCALE), its top figure and 0 written beside it;
    change points circled. `at`: each run's index by id (made here when not given; a page's rows share one)."""
    points = spark_points(h, c)
    if not points:
        return ""
    hi = max(v for _, v, _ in points) or 1.0
    left, right = _LABEL, _W - _PAD
    xs = {i: left + (right - left) * (i / max(1, len(h.runs) - 1)) for i, _, _ in points}
    def y(v: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * (v / hi)

    line = " ".join(f"{xs[i]:.1f},{y(v):.1f}" for i, v, _ in points)
    # each night a dot in its outcome's colour; past DOTS nights (a year is 365) only the first and each night whose
    # outcome differs from the night before: where the line changes meaning
    r, shown = (2.5, points) if len(points) <= DOTS else (
        2.0, [p for k, p in enumerate(points) if k == 0 or p[2] != points[k - 1][2]])
    dots = "".join(f'<circle class="dot {escape(o)}" cx="{xs[i]:.1f}" cy="{y(v):.1f}" r="{r}" '
                   f'fill="{OUTCOME_DOT.get(o, "#555")}"><title>{escape(h.runs[i].run_id)}: {escape(o)}, '
                   f"{fmt_seconds(v)}</title></circle>" for i, v, o in shown)
    at = at if at is not None else {n.run_id: i for i, n in enumerate(h.runs)}
    value = {i: v for i, v, _ in points}
    marks = "".join(
        f'<circle class="cp" data-run="{escape(t.run)}" cx="{xs[at[t.run]]:.1f}" cy="{y(value[at[t.run]]):.1f}" '
        'r="4.5">'
        f"<title>{escape(t.describe())}</title></circle>"
        for t in c.time_changes if t.phase == TOTAL and at.get(t.run) in value)
    lo = min(v for _, v, _ in points)
    title = f"total boot time, {fmt_seconds(lo)} to {fmt_seconds(hi)} over {len(points)} nights; scale {SCALE}"
    axis = (f'<line class="axis" x1="{left - 2}" y1="{_H - _PAD}" x2="{right}" y2="{_H - _PAD}"/>'
            f'<line class="top" x1="{left - 2}" y1="{_PAD}" x2="{right}" y2="{_PAD}"/>'
            f'<text x="{left - 4}" y="{_PAD + 8}" text-anchor="end">{escape(fmt_seconds(hi))}</text>'
            f'<text x="{left - 4}" y="{_H - _PAD}" text-anchor="end">0</text>')
    return (f'<svg class="spark" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" '
            f'aria-label="{escape(title)}" data-max-s="{hi:g}"><title>{escape(title)}</title>{axis}'
            f'<polyline points="{line}"/>{dots}{marks}</svg>')


def _night_tds(n: Night) -> Callable[[Entry | None], str]:
    """`_night_td` for the nights of one run: a run's cells share a few verdicts, each cell written once per kind."""
    made: dict[tuple | None, str] = {}

    def td(e: Entry | None) -> str:
        key = None if e is None else (e.outcome, e.reason, e.matched, e.expected)
        got = made.get(key)
        if got is None:
            got = made[key] = _night_td(n, e)
        return got
    return td


def _night_td(n: Night, e: Entry | None) -> str:
    run = escape(n.run_id)
    partial = "" if n.counts else " partial"
    if e is None:
        return f'<td class="night gap{partial}" data-run="{run}" data-status="{escape(n.status)}">{GAP}</td>'
    title = f"{n.run_id}: {e.verdict}" + (f", expected {e.expected}" if e.expected else "") + \
        ("" if n.counts else f" (run {n.status})")
    return (f'<td class="night {escape(e.outcome)} {_expectation(e)}{partial}" data-run="{run}" '
            f'data-status="{escape(n.status)}" title="{escape(title)}">{SYMBOL.get(e.outcome, "?")}</td>')


def render_html(h: History) -> str:
    colours = "".join(f"td.night.{o}{{background:{bg};color:{fg}}}" for o, (bg, fg) in COLOURS.items())
    head = "".join(f'<th class="run" title="{escape(n.run_id)} ({escape(n.status)})">'
                   f"{n.started_at:%Y-%m-%d %H:%M}</th>" for n in h.runs)
    rows = []
    tds = [_night_tds(n) for n in h.runs]
    at = {n.run_id: i for i, n in enumerate(h.runs)}
    for c in h.cells:
        latest = c.latest
        since = "" if c.since is None else escape(h.runs[c.since].run_id)
        rows.append(f'<tr class="cell-history" id="history-{escape(c.cell_id)}" data-cell-id="{escape(c.cell_id)}" '
                    f'data-since="{since}"><th><code>{escape(c.cell_id)}</code></th>'
                    + "".join([td(e) for td, e in zip(tds, c.entries, strict=False)])
                    + f"<td>{escape(latest.verdict if latest else '—')}"
                    f"<div class=\"since\">since <code>{since or '—'}</code></div></td>"
                    f'<td class="changes">{escape(_changes(c))}</td><td class="boot">{_spark(h, c, at)}'
                    f'<div class="steps">{escape(_boot(c))}</div></td></tr>')
    legend = "".join(f'<span class="{o}">{SYMBOL[o]} {o}</span>' for o in Outcome)
    body = [f"<h1>boot-harness history: {plural(len(h.runs), 'run')}</h1>",
            f'<p class="meta">matrix <b>{escape(h.runs[0].matrix)}</b> · {escape(h.runs[0].run_id)} → '
            f"{escape(h.runs[-1].run_id)} · oldest first</p>",
            f'<p class="legend">{legend} <span>{GAP} not run</span> <span>red outline: missed its expectation'
            "</span> <span>faded: run not complete</span></p>",
            f'<div class="scroll"><table class="history"><thead><tr><th>cell</th>{head}<th>verdict, since</th>'
            "<th>changed</th>"
            f'<th title="{escape(SCALE)}">total boot time<br><small>0 to each row\'s max; its steps</small></th></tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table></div>",
            f'<p class="meta" id="spark-scale">Total boot time: each night a dot in its outcome\'s colour, every '
            f"complete night the cell has a boot time on, whatever its verdict; the scale runs {escape(SCALE)}; a "
            "circled dot is a step in the boot time.</p>"]
    told = [c for c in h.cells if c.before is not None or c.time_changes]
    if told:
        body.append('<h2>What changed</h2><ul id="changes">'
                    + "".join(f"<li>{escape(h.line(c))}</li>" for c in told) + "</ul>")
    missed = h.missed()
    if missed:
        body.append('<h2>Missed in the latest run</h2><ul id="missed">'
                    + "".join(f"<li><code>{escape(cid)}</code>: {escape(why)}</li>" for cid, why in missed) + "</ul>")
    if h.warnings:
        body.append('<h2>Not read as verdicts</h2><ul id="warnings">'
                    + "".join(f"<li>{escape(w)}</li>" for w in h.warnings) + "</ul>")
    return text_only("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                     f"<title>boot-harness history</title><style>{css()}{CSS}{colours}</style></head>"
                     f"<body>{''.join(body)}</body></html>\n")

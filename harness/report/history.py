"""`boot-harness history` rendered: a terminal table (a row per cell, its nights as a strip of outcome symbols, ids
whole through a pipe), markdown for the nightly job summary, and one offline HTML page — a row per cell, a column per
night coloured by outcome and outlined where it missed its expectation, a boot-time sparkline (inline SVG, no script)
with its change points marked.

Stable hooks for tools and tests: each row `<tr class="cell-history" id="history-CELL_ID" data-cell-id="CELL_ID"
data-since="RUN">`, each night `<td class="night OUTCOME matched|mismatched|unexpected|gap" data-run="RUN"
data-status="STATUS">`, each sparkline `<svg class="spark">` with a `<circle class="cp" data-run="RUN">` per change
point of the total boot time.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from rich.console import Group
from rich.text import Text

from harness.analysis.history import CellHistory, History
from harness.analysis.history_runs import TOTAL, Entry, Night
from harness.escape import md_code, md_text
from harness.report.html import COLOURS, _css
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
    return {True: "matched", False: "mismatched"}.get(e.matched, "unexpected")


def _strip(h: History, c: CellHistory) -> Text:
    """One symbol per night in the outcome's colour; a missed expectation bold and underlined, a night that is not
    complete dim. Nights in a row with one style are one span (a year is 365 symbols a row; rich's cost is per span)."""
    t = Text()
    run, style = "", None
    for n, e in zip(h.runs, c.entries):
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

_W, _H, _PAD = 160, 28, 3

CSS = """
table.history{border-collapse:collapse;margin:8px 0 16px;font-size:.9em}
table.history th,table.history td{border:1px solid #bdbdbd;padding:3px 6px;text-align:left;vertical-align:middle}
table.history thead th{background:#eceff1;font-weight:600}
table.history th.run{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:400;font-size:.8em}
td.night{min-width:14px;text-align:center;font-size:.85em}
td.night.mismatched{outline:3px solid #d50000;outline-offset:-3px}
td.night.gap{background:#fafafa;color:#bdbdbd}
td.night.partial{opacity:.45}
svg.spark polyline{fill:none;stroke:#1565c0;stroke-width:1.5}
svg.spark circle.cp{fill:#d50000}
td.changes{max-width:520px}
"""


def _spark(h: History, c: CellHistory, at: dict[str, int] | None = None) -> str:
    """`at`: each run's index by id (made here when not given; a page's rows share one)."""
    if not c.series:
        return ""
    xs = {i: _PAD + (_W - 2 * _PAD) * (i / max(1, len(h.runs) - 1)) for i, _ in c.series}
    lo, hi = min(v for _, v in c.series), max(v for _, v in c.series)
    y = lambda v: _H - _PAD - (_H - 2 * _PAD) * ((v - lo) / (hi - lo) if hi > lo else 0.5)  # noqa: E731
    points = " ".join(f"{xs[i]:.1f},{y(v):.1f}" for i, v in c.series)
    at = at if at is not None else {n.run_id: i for i, n in enumerate(h.runs)}
    value = dict(c.series)
    marks = "".join(
        f'<circle class="cp" data-run="{escape(t.run)}" cx="{xs[at[t.run]]:.1f}" cy="{y(value[at[t.run]]):.1f}" r="3">'
        f"<title>{escape(t.describe())}</title></circle>"
        for t in c.time_changes if t.phase == TOTAL and at.get(t.run) in value)
    title = f"total boot time, {fmt_seconds(lo)} to {fmt_seconds(hi)}"
    return (f'<svg class="spark" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title><polyline points="{points}"/>{marks}</svg>')


def _night_tds(n: Night) -> Callable[[Entry | None], str]:
    """`_night_td` for the nights of one run: a run's cells share a few verdicts, each cell written once per kind."""
    made: dict[tuple, str] = {}

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
                    + "".join([td(e) for td, e in zip(tds, c.entries)])
                    + f"<td>{escape(latest.verdict if latest else '—')}</td><td><code>{since or '—'}</code></td>"
                    f'<td class="changes">{escape(_changes(c))}</td><td>{_spark(h, c, at)}</td>'
                    f"<td>{escape(_boot(c))}</td></tr>")
    legend = "".join(f'<span class="{o}">{SYMBOL[o]} {o}</span>' for o in Outcome)
    body = [f"<h1>boot-harness history: {plural(len(h.runs), 'run')}</h1>",
            f'<p class="meta">matrix <b>{escape(h.runs[0].matrix)}</b> · {escape(h.runs[0].run_id)} → '
            f"{escape(h.runs[-1].run_id)} · oldest first</p>",
            f'<p class="legend">{legend} <span>{GAP} not run</span> <span>red outline: missed its expectation'
            "</span> <span>faded: run not complete</span></p>",
            f'<table class="history"><thead><tr><th>cell</th>{head}<th>verdict</th><th>since</th><th>changed</th>'
            f"<th>total boot time</th><th>steps</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"]
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
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>boot-harness history</title><style>{_css()}{CSS}{colours}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")

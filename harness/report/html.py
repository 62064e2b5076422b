"""The report as one self-contained HTML file: inline CSS, the plot as a base64 PNG, no script, no external asset,
so it opens offline and can be attached to a CI run as is.

Stable hooks for tools and tests: every grid cell is `<td class="cell OUTCOME matched|mismatched|unexpected"
id="cell-CELL_ID" data-cell-id="CELL_ID" data-outcome="OUTCOME" data-reason="REASON" data-matched="true|false|none">`,
each grid a `<table class="grid" data-split="AXIS=VALUE">`, the plot one `<img class="kv-plot" data-group="GROUP">` per
group, the first also `id="kv-plot"`; the memory curves'
hooks are listed in harness.report.memory (a run without curves draws no such section and no such CSS).
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from harness.analysis.fit import Analysis, no_cells
from harness.escape import terminal_line
from harness.report import memory, timeline
from harness.report.glyphs import text_only
from harness.report.grid import Grid, expectation_mark, inconsistent, key_numbers, numbers_legend, outcome_counts
from harness.report.style import SYMBOL
from harness.results.model import RunResult
from harness.units import fmt_bytes
from harness.verdict import Outcome, Reason

#: (background, text) colours, by outcome.
COLOURS: dict[Outcome, tuple[str, str]] = {
    Outcome.booted: ("#c8e6c9", "#1b5e20"), Outcome.refused: ("#fff3c4", "#7a5b00"),
    Outcome.crashed: ("#ffcdd2", "#b71c1c"), Outcome.timeout: ("#e1bee7", "#4a148c"),
    Outcome.error: ("#ef9a9a", "#7f0000")}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px;color:#1a1a1a;
background:#ffffff}
h1{font-size:1.4em;margin:0 0 4px}h2{font-size:1.15em;margin:28px 0 8px}h3{font-size:1em;margin:18px 0 6px}
.meta{color:#555;margin:0 0 12px}
table.grid{border-collapse:collapse;margin:8px 0 16px}
table.grid th,table.grid td{border:1px solid #9e9e9e;padding:6px 10px;vertical-align:top;text-align:left}
table.grid thead th{background:#eceff1;font-weight:600}
table.grid tbody th{background:#eceff1;text-align:right;font-variant-numeric:tabular-nums}
td.cell{min-width:150px}
td.cell .outcome{font-weight:700}
td.cell .kv{font-size:.85em;color:#333;font-variant-numeric:tabular-nums}
td.cell .hint{font-size:.85em;font-style:italic}
td.cell .mark{font-weight:700;margin-left:4px}
td.cell.mismatched{outline:3px solid #d50000;outline-offset:-3px}
td.cell.mismatched .mark{color:#d50000}
td.cell.matched .mark{color:#1b5e20}
td.cell.inconsistent .kv:first-of-type{color:#b71c1c;font-weight:700}
td.empty{background:#f5f5f5;color:#9e9e9e}
%OUTCOMES%
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #9e9e9e}
table.fit{border-collapse:collapse;margin:4px 0 10px;font-size:.9em}
table.fit th,table.fit td{border-bottom:1px solid #e0e0e0;padding:3px 10px;text-align:left}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px}
.finding.inconsistent{color:#b71c1c;font-weight:600}.finding.note{color:#666}
figure{margin:12px 0}figure img{max-width:100%;border:1px solid #e0e0e0}
figure.kv-plots .panels{display:flex;flex-wrap:wrap;gap:12px}figure.kv-plots img{height:auto}
"""


def css(run: RunResult | None = None) -> str:
    """The page's CSS; the memory curves' only for a run that has one (history's page shares the rest)."""
    rules = "".join(f"td.cell.{o}{{background:{bg}}}td.cell.{o} .outcome{{color:{fg}}}"
                    f".legend .{o}{{background:{bg};color:{fg}}}" for o, (bg, fg) in COLOURS.items())
    mem = memory.CSS if run is not None and memory.has_memory(run) else ""
    return CSS.replace("%OUTCOMES%", rules) + timeline.CSS + mem


def _cell_td(g: Grid, row: str, col: tuple[str, ...]) -> str:
    k = g.at(row, col)
    if k is None:
        return '<td class="empty">—</td>'
    c = k.cell
    state = {True: "matched", False: "mismatched", None: "unexpected"}[c.matched]
    cid = escape(c.cell_id, quote=True)
    reason = "" if not c.reason or c.reason == Reason.ready else f" <span class=\"reason\">({escape(c.reason)})</span>"
    mark = expectation_mark(c)
    mark_html = f'<span class="mark">{escape(mark)}</span>' if mark else ""
    kv = "".join(f'<div class="kv">{escape(line)}</div>' for line in key_numbers(k))
    if hint := c.cause_hint():
        kv += f'<div class="hint">→ {escape(terminal_line(hint))}</div>'  # a log's controls shown, not acted on
    title = escape(terminal_line(c.detail or c.cell_id), quote=True)
    if inconsistent(k):
        state += " inconsistent"
    return (f'<td class="cell {c.outcome} {state}" id="cell-{cid}" data-cell-id="{cid}" data-outcome="{c.outcome}" '
            f'data-reason="{escape(c.reason or "", quote=True)}" data-matched="{str(c.matched).lower()}" '
            f'title="{title}"><div><span class="outcome">{SYMBOL.get(c.outcome, "?")} {c.outcome}</span>{reason}'
            f'{mark_html}</div>{kv}</td>')


def _grid_html(g: Grid) -> str:
    split = f"{g.split_axis}={g.split_value}" if g.split_axis else ""
    head = "".join(f"<th>{escape(g.col_label(col))}</th>" for col in g.cols)
    body = "".join(f'<tr><th scope="row">{escape(row)}</th>{"".join(_cell_td(g, row, col) for col in g.cols)}</tr>'
                   for row in g.rows)
    return (f'<section class="grid-section"><h2>{escape(g.title)}</h2>'
            f'<table class="grid" data-split="{escape(split, quote=True)}"><thead><tr>'
            f'<th>{escape(g.row_axis or "")}</th>{head}</tr></thead><tbody>{body}</tbody></table></section>')


def _analysis_html(a: Analysis) -> str:
    parts = [f"<h2>KV analysis over {escape(a.length_axis)}</h2>"]
    for g in a.groups:
        parts.append(f'<section class="group" data-group="{escape(g.label, quote=True)}"><h3>{escape(g.label)}</h3>')
        parts.append('<table class="fit"><tr><th></th><th>fit</th><th>how</th><th>max |residual|</th></tr>')
        for name, line, why in g.lines():
            parts.append(f"<tr><th>{name}</th><td>{escape(line.describe() if line else '— ' + why)}</td>"
                         f"<td>{escape(line.method) if line else ''}</td>"
                         f"<td>{escape(fmt_bytes(line.max_residual)) if line else ''}</td></tr>")
        parts.append("</table>")
        parts.append(f'<p class="crossover">crossover: {escape(g.cross.text)}</p>')
        if g.floors:
            parts.append("<ul class=\"floors\">")
            for f in g.floors:
                est = f"vLLM's estimated max length {f.vllm_estimate:,}" if f.vllm_estimate else "no vLLM estimate"
                fit = f", fitted {f.fitted_max_len:,}" if f.fitted_max_len is not None else ""
                if f.floor_bytes is not None:
                    paste = " or ".join(f"<code>{escape(p)}</code>" for p in f.paste())
                    parts.append(f"<li data-floor-for=\"{escape(f.cell_id, quote=True)}\">floor for "
                                 f"<b>{escape(f.cell_id)}</b>: {escape(fmt_bytes(f.floor_bytes))} → {paste} "
                                 f"<small>({escape(f.basis)}; {escape(est + fit)})</small>")
                else:
                    parts.append(f"<li>floor for <b>{escape(f.cell_id)}</b>: unknown — {escape(f.basis)}")
                for n in f.notes:
                    parts.append(f"<br><small>note: {escape(n)}</small>")
                parts.append("</li>")
            parts.append("</ul>")
        for fd in g.findings:
            who = f"{escape(fd.cell_id)}: " if fd.cell_id else ""
            parts.append(f'<p class="finding {fd.severity}">{fd.severity}: {who}{escape(fd.text)}</p>')
        parts.append("</section>")
    return "".join(parts)


def _plots_html(plots: list[tuple[str, bytes]] | bytes | None) -> str:
    """The KV plot: one image per group, wrapping to the page's width, each at its own size (never scaled down past
    reading); the first is `#kv-plot`."""
    if not plots:
        return ""
    panels = [("", plots)] if isinstance(plots, bytes) else plots
    first = ' id="kv-plot"'
    imgs = "".join(
        f'<img{first if i == 0 else ""} class="kv-plot" data-group="{escape(label, quote=True)}" '
        f'alt="{escape(("KV need and cap against max_model_len: " + label).rstrip(": "), quote=True)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        for i, (label, png) in enumerate(panels))
    return (f'<figure class="kv-plots"><div class="panels">{imgs}</div><figcaption>KV need (red circles) and cap '
            "(blue squares) against the length: filled markers booted, open ones were refused; dashed lines are the "
            "fits to the logged numbers, the broad green band the need predicted from config.json, the dotted "
            "vertical line the crossover. Each panel's legend is below it.</figcaption></figure>")


def render_html(run: RunResult, grids: list[Grid], analysis: Analysis | None,
                plots: list[tuple[str, bytes]] | bytes | None, notes: list[str] | None = None) -> str:
    s = run.summary
    summary = (f"{s.get('cells', len(run.cells))} cells: {outcome_counts(s)} — {s.get('matched', 0)} matched, "
               f"{s.get('mismatched', 0)} mismatched, {s.get('unexpected', 0)} without expectation")
    legend = "".join(f'<span class="{o}">{SYMBOL[o]} {o}</span>' for o in COLOURS)
    body = [f"<h1>boot-harness report: {escape(run.run_id)}</h1>",
            f'<p class="meta">matrix <b>{escape(run.matrix.name)}</b> ({escape(run.matrix.path)}) · runtime '
            f"{escape(run.runtime)} · {escape(run.status)} · started {escape(run.started_at.isoformat())}</p>",
            f'<p class="summary" id="summary">{escape(summary)}</p>',
            f'<p class="legend">{legend} <span>✓ met its expectation</span> <span>✗ did not</span></p>']
    if (empty := no_cells(run)) is not None:
        body.append(f'<p class="finding note" id="no-cells">{escape(empty)}</p>')
    body += [_grid_html(g) for g in grids]
    if grids:
        body.append(f'<p class="meta" id="numbers-legend">{escape(numbers_legend(run))}</p>')
    body.append(_plots_html(plots))
    body.append(timeline.html(run))
    body.append(memory.html(run))
    if analysis is not None:
        body.append(_analysis_html(analysis))
    for n in notes or []:
        body.append(f'<p class="finding note">{escape(n)}</p>')
    page = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>boot-harness report {escape(run.run_id)}</title><style>{css(run)}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")
    return text_only(page)


def write_text(path: Path, text: str | bytes, flag: str | None = None) -> None:
    """A report file, written the one way files are (harness.files.write_atomic): through a symbolic link (the link
    kept), never over a device, FIFO or directory; a new file readable by others (a report is meant to be shared or
    served). What goes wrong is said of the path (`--html PATH: …`, exit 2): a report is no run to resume."""
    from harness.errors import FileRefused, UsageError
    from harness.files import write_atomic

    where = f"{flag} {path}" if flag else str(path)
    try:
        write_atomic(path, text, mode=0o644)
    except FileRefused as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot be written: {exc.strerror or exc}") from None

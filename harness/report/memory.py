"""How close each boot came to running out of memory, as the report shows it: a curve per cell drawn as inline SVG
(no script, no external asset) on the cell's own scale, its timeline phases shaded behind it, the limit and the
`gpu_memory_utilization` line across it, the peak marked, and what vLLM logged beside the step the curve took; a
peak/headroom line in each grid cell and a table per run for markdown and the terminal.

A cell without `memory` (an older record, sampling off, a server that never started) draws nothing and says so; a run
in which no cell has one adds nothing at all, so reports of such runs read as they always did.

Stable hooks: the section `<section id="memory">`, each cell `<div class="memory-cell" id="memory-cell-CELL_ID"
data-cell-id="CELL_ID">`, its `<svg class="memory-curve">` holding `rect.phase[data-phase]`, `line.limit`,
`line.utilization`, `polyline.curve` and `circle.peak` (each with a `<title>`), and `table.logged`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from harness.logfacts.timeline import Milestone
from harness.memory.model import MemoryCurve
from harness.report.timeline import NAME_COLOURS, TAIL_COLOUR
from harness.results.model import CellResult, RunResult
from harness.units import GIB, KIB, MIB, fmt_bytes, fmt_seconds

#: What the memory numbers mean, added to the grid's legend when a cell of the run has a curve.
MEMORY_LEGEND = ("mem peak: the most memory the server held at one sample while it booted; headroom: on a GPU, "
                 "total × gpu_memory_utilization less that peak (the least over the cell's GPUs), on a CPU the limit "
                 "less the peak (docs/memory.md)")

# The drawing's geometry (SVG user units = CSS pixels): the plot area sits inside the margins.
WIDTH, HEIGHT = 640, 210
LEFT, RIGHT, TOP, BOTTOM = 70, 14, 12, 28
#: A limit more than this many times the peak is drawn at the top edge, marked off scale, so that the curve keeps
#: its height (a process cell's limit is the host's whole memory).
OFF_SCALE = 4.0

CURVE_COLOUR = "#0d47a1"
PEAK_COLOUR = "#d50000"
LIMIT_COLOUR = "#b71c1c"
UTILIZATION_COLOUR = "#ef6c00"


def has_memory(run: RunResult) -> bool:
    return any(c.memory is not None for c in run.cells)


def why_none(run: RunResult) -> str | None:
    """Why a run with cells has no memory curve, in one line (a report never leaves a reader wondering whether the
    curves were lost); None when one has a curve, or the run has no cell."""
    if not run.cells or has_memory(run):
        return None
    return ("no memory curves: no cell of this run recorded one — its matrix set `memory_interval_s: null`, no "
            "server started, or the run was recorded before the harness sampled memory (docs/memory.md)")


def grid_line(c: CellResult) -> str | None:
    """The grid cell's line: `mem peak 1.52 GiB · headroom 12.4 GiB`; None without a curve."""
    m = c.memory
    if m is None:
        return None
    if m.peak_bytes is None:
        return "mem: no samples"
    return f"mem peak {fmt_bytes(m.peak_bytes)}" + (
        f" · headroom {fmt_bytes(m.headroom_bytes)}" if m.headroom_bytes is not None else "")


# ---------------------------------------------------------------- table (markdown, terminal)


def table_rows(run: RunResult) -> tuple[list[str], list[list[str]]]:
    """Header and one row per cell that has a curve: peak, when, in which phase, headroom, limit, source; a `curve
    stopped` column only when a curve stopped early."""
    curves = [(c, c.memory) for c in run.cells if c.memory is not None]
    stopped = any(m.stopped for _, m in curves)
    header = ["cell", "verdict", "peak", "at", "in phase", "headroom", "limit", "source",
              *(["curve stopped"] if stopped else [])]
    rows = []
    for c, m in curves:
        limit = fmt_bytes(m.limit_bytes) + (f" ({m.limit_kind})" if m.limit_kind and m.limit_bytes is not None else "")
        rows.append([c.cell_id, c.verdict(), fmt_bytes(m.peak_bytes), fmt_seconds(m.peak_at_s), m.peak_phase or "—",
                     fmt_bytes(m.headroom_bytes), limit, str(m.source), *([m.stopped or ""] if stopped else [])])
    return header, rows


def logged_rows(m: MemoryCurve) -> list[list[str]]:
    """What vLLM logged against the step the curve took: what, phase, logged, measured step, difference."""
    rows = []
    for lg in m.logged:
        diff = ""
        if lg.measured_bytes is not None:
            diff = fmt_bytes(lg.measured_bytes - lg.logged_bytes, signed=True)
            if lg.logged_bytes:
                diff += f" ({(lg.measured_bytes - lg.logged_bytes) / lg.logged_bytes:+.0%})"
        rows.append([lg.what, lg.phase, fmt_bytes(lg.logged_bytes), fmt_bytes(lg.measured_bytes), diff])
    return rows


LOGGED_HEADER = ["vLLM logged", "in phase", "logged", "measured step", "difference"]


def markdown(run: RunResult) -> list[str]:
    """`### Memory`: the table, then what vLLM logged beside the measured steps; without curves, why."""
    if not has_memory(run):
        why = why_none(run)
        if why is None:
            return []
        from harness.escape import md_text

        return ["### Memory", "", md_text(why), ""]
    from harness.escape import md_text as esc

    header, rows = table_rows(run)
    lines = ["### Memory", ""]
    lines.append("| " + " | ".join(esc(h) for h in header) + " |")
    lines.append("|:---|:---|---:|---:|:---|---:|---:|:---|" + (":---|" if len(header) > 8 else ""))
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    lines.append("")
    logged = [(c.cell_id, r) for c in run.cells if c.memory is not None for r in logged_rows(c.memory)]
    if logged:
        lines.append("| cell | " + " | ".join(LOGGED_HEADER) + " |")
        lines.append("|:---|:---|:---|---:|---:|---:|")
        lines += ["| " + " | ".join(esc(v) for v in [cid, *r]) + " |" for cid, r in logged]
        lines.append("")
    return lines


def renderable(run: RunResult):
    """The memory table for the terminal (a PlainTable: ids literal and whole through a pipe); without curves, the
    line that says why; None for a run without cells."""
    if not has_memory(run):
        from harness.report.text import literal

        why = why_none(run)
        return None if why is None else literal(why, style="dim")
    from harness.report.text import PlainTable

    header, rows = table_rows(run)
    t = PlainTable(title="memory", title_justify="left")
    # narrow, these are left out (the highest first): the cell, its verdict and its peak stay
    drops = {"source": 6, "curve stopped": 5, "limit": 4, "at": 3, "headroom": 2, "in phase": 1}
    for h in header:
        t.add_column(h, justify="right" if h in ("peak", "at", "headroom", "limit") else "left", id=h == "cell",
                     drop=drops.get(h))
    for row in rows:
        t.add_row(*row)
    return t


# ---------------------------------------------------------------- the curve (SVG)


@dataclass(frozen=True)
class Band:
    """A phase of the cell's timeline, in seconds since the cell started."""

    name: str
    start_s: float
    end_s: float
    colour: str
    unfinished: bool = False


def bands(c: CellResult) -> list[Band]:
    """The timeline's spans laid end to end from 0 (as the milestones fall), then the phase the verdict found the
    server in, up to the verdict (a refusal, a timeout)."""
    colour = NAME_COLOURS
    out, t = [], 0.0
    for s in c.timeline.spans():
        out.append(Band(s.name, t, t + s.seconds, colour.get(s.name, TAIL_COLOUR)))
        t += s.seconds
    phase = c.timeline.phase
    if phase is not None and phase.after is not Milestone.served and phase.for_s > 0:
        out.append(Band(phase.name, t, t + phase.for_s, TAIL_COLOUR, unfinished=True))
    return [b for b in out if b.end_s > b.start_s]


def _nice(raw: float) -> float:
    """The smallest of 1, 2, 5 × 10^k at least `raw`."""
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if raw <= m * mag * (1 + 1e-9))


def _ticks(top: float, step: float) -> list[float]:
    n = int(top / step + 1e-9)
    return [i * step for i in range(n + 1)]


def _byte_step(top: float) -> float:
    unit = GIB if top >= GIB else MIB if top >= MIB else KIB if top >= KIB else 1
    return _nice(top / unit / 5) * unit


def _f(v: float) -> str:
    return f"{v:.1f}"


@dataclass(frozen=True)
class Scale:
    """Seconds and bytes to the drawing's coordinates (y grows downwards)."""

    x_max: float
    y_max: float

    def x(self, t: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * min(max(t, 0.0), self.x_max) / self.x_max

    def y(self, b: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * min(max(b, 0.0), self.y_max) / self.y_max


def scale(c: CellResult) -> Scale:
    """x from 0 to the last sample, phase or verdict; y from 0 to the limit (or the utilization line), unless the
    limit is more than OFF_SCALE times the peak: then to the peak and a tenth (the limit drawn at the edge)."""
    m = c.memory
    assert m is not None
    ends = [t for t, _ in m.samples[-1:]] + [b.end_s for b in bands(c)[-1:]]
    if c.timings.verdict_s is not None:
        ends.append(c.timings.verdict_s)
    x_max = max(ends, default=0.0) or 1.0
    data = max([m.peak_bytes or 0, *(b for _, b in m.samples)]) or 1
    refs = [r for r in (m.limit_bytes, utilization_bytes(m)) if r]
    if refs and max(refs) <= OFF_SCALE * data:
        return Scale(x_max, max(data, *refs) * 1.05)
    return Scale(x_max, data * 1.1)


def utilization_bytes(m: MemoryCurve) -> int | None:
    """limit × gpu_memory_utilization: the most vLLM lets itself take of the device; None off a GPU."""
    if m.limit_bytes is None or m.gpu_memory_utilization is None:
        return None
    return int(m.limit_bytes * m.gpu_memory_utilization)


def _hline(cls: str, label: str, value: int, sc: Scale, colour: str, dash: str = "", left: bool = False) -> str:
    """A horizontal reference line across the plot, labelled at its right end above it (`left`: at its left end below
    it, so that two close lines keep their labels apart); one above the scale is drawn dotted at the top edge and
    says so."""
    off = value > sc.y_max
    y = sc.y(value)
    text = f"{label} {fmt_bytes(value)}" + (" (above the scale)" if off else "")  # `limit 80.0 GiB`
    dash = dash or ("2 3" if off else "")
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    x, anchor, ty = (LEFT + 4, "start", y + 11) if left or off else (WIDTH - RIGHT - 2, "end", y - 3)
    return (f'<line class="{cls}{" off-scale" if off else ""}" data-bytes="{value}" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
            f'y1="{_f(y)}" y2="{_f(y)}" stroke="{colour}" stroke-width="1.5"{dash_attr}><title>{escape(text)}</title>'
            f'</line><text class="ref-label" x="{x}" y="{_f(ty)}" text-anchor="{anchor}" fill="{colour}">'
            f"{escape(text)}</text>")


def svg(c: CellResult) -> str:
    """The cell's curve as one `<svg>` element (well-formed XML, so a test can parse it); '' without samples."""
    m = c.memory
    if m is None or not m.samples:
        return ""
    sc = scale(c)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    label = f"memory of {c.cell_id}: {m.describe()}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="memory-curve" id="memory-curve-'
             f'{escape(c.cell_id, quote=True)}" data-cell-id="{escape(c.cell_id, quote=True)}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{escape(label, quote=True)}" data-x-max="{sc.x_max:g}" data-y-max="{sc.y_max:.0f}">',
             f"<title>{escape(label)}</title>"]
    parts.append('<g class="phases">')
    for b in bands(c):
        name = b.name + (" (unfinished at the verdict)" if b.unfinished else "")
        bx0, bx1 = sc.x(b.start_s), sc.x(b.end_s)
        parts.append(f'<rect class="phase" data-phase="{escape(name, quote=True)}" x="{_f(bx0)}" y="{y0}" '
                     f'width="{_f(max(bx1 - bx0, 0.5))}" height="{y1 - y0}" fill="{b.colour}">'
                     f"<title>{escape(name)}: {escape(fmt_seconds(b.start_s))} – {escape(fmt_seconds(b.end_s))}"
                     "</title></rect>")
    parts.append("</g>")
    # axes: byte ticks on the left, second ticks below, faint grid lines across the plot
    parts.append('<g class="axes">')
    step = _byte_step(sc.y_max)
    for v in _ticks(sc.y_max, step):
        y = _f(sc.y(v))
        parts.append(f'<line class="grid-line" x1="{x0}" x2="{x1}" y1="{y}" y2="{y}"/><text class="axis-label" '
                     f'x="{x0 - 4}" y="{_f(float(y) + 3)}" text-anchor="end">{escape(fmt_bytes(v))}</text>')
    tstep = _nice(sc.x_max / 6)
    for t in _ticks(sc.x_max, tstep):
        x = _f(sc.x(t))
        parts.append(f'<line class="tick" x1="{x}" x2="{x}" y1="{y1}" y2="{y1 + 4}"/>'
                     f'<text class="axis-label" x="{x}" y="{y1 + 15}" text-anchor="middle">{t:g} s</text>')
    parts.append(f'<rect class="frame" x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none"/>')
    parts.append("</g>")
    if m.limit_bytes is not None:
        parts.append(_hline("limit", "limit", m.limit_bytes, sc, LIMIT_COLOUR))
    if (u := utilization_bytes(m)) is not None:
        parts.append(_hline("utilization", f"gpu_memory_utilization {m.gpu_memory_utilization:g}:", u, sc,
                            UTILIZATION_COLOUR, "6 3", left=True))
    points = " ".join(f"{_f(sc.x(t))},{_f(sc.y(b))}" for t, b in m.samples)
    parts.append(f'<polyline class="curve" points="{points}" fill="none" stroke="{CURVE_COLOUR}" stroke-width="2" '
                 f'stroke-linejoin="round"><title>the server\'s memory, {m.taken or len(m.samples):,} samples'
                 "</title></polyline>")
    if m.peak_bytes is not None and m.peak_at_s is not None:
        parts.append(f'<circle class="peak" cx="{_f(sc.x(m.peak_at_s))}" cy="{_f(sc.y(m.peak_bytes))}" r="4" '
                     f'fill="{PEAK_COLOUR}" data-bytes="{m.peak_bytes}" data-at-s="{m.peak_at_s:g}">'
                     f"<title>{escape(m.describe())}</title></circle>")
    if m.stopped:
        t_end, b_end = m.samples[-1]
        parts.append(f'<text class="stopped" x="{_f(sc.x(t_end) - 4)}" y="{_f(sc.y(b_end) + 14)}" text-anchor="end" '
                     f'fill="{PEAK_COLOUR}">✖ curve stops<title>{escape(m.stopped)}</title></text>')
    parts.append("</svg>")
    return "".join(parts)


def _logged_html(m: MemoryCurve) -> str:
    rows = logged_rows(m)
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in LOGGED_HEADER)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="logged"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _devices_html(m: MemoryCurve) -> str:
    if not m.devices:
        return ""
    items = []
    for d in m.devices:
        text = (f"GPU {d.index}: the server's peak {fmt_bytes(d.peak_server_bytes)} of {fmt_bytes(d.total_bytes)}, "
                f"everyone's {fmt_bytes(d.peak_used_bytes)}")
        if d.peak_others_bytes:
            text += f" (others {fmt_bytes(d.peak_others_bytes)})"
        if d.headroom_bytes is not None:
            text += f", headroom {fmt_bytes(d.headroom_bytes)}"
        items.append(f"<li>{escape(text)}</li>")
    return f'<ul class="devices">{"".join(items)}</ul>'


def _cell_html(c: CellResult) -> str:
    cid = escape(c.cell_id, quote=True)
    head = f'<h3>{escape(c.cell_id)} <small>{escape(c.verdict())}</small></h3>'
    m = c.memory
    if m is None:
        return (f'<div class="memory-cell none" id="memory-cell-{cid}" data-cell-id="{cid}">{head}'
                '<p class="meta">no memory curve</p></div>')
    how = [str(m.source)]
    if m.limit_bytes is not None:
        how.append(f"limit {fmt_bytes(m.limit_bytes)}" + (f" ({m.limit_kind})" if m.limit_kind else ""))
    how.append(f"every {m.interval_s:g} s, {m.taken:,} samples" + (
        f" ({len(m.samples):,} kept)" if m.taken > len(m.samples) else ""))
    meta = f"{m.describe()} · {' · '.join(how)}"
    stopped = f'<p class="finding inconsistent">the curve stops early: {escape(m.stopped)}</p>' if m.stopped else ""
    side = _logged_html(m) + _devices_html(m)
    return (f'<div class="memory-cell" id="memory-cell-{cid}" data-cell-id="{cid}">{head}'
            f'<p class="meta">{escape(meta)}</p>{stopped}<div class="memory-body">{svg(c)}'
            f'<div class="memory-side">{side}</div></div></div>')


CSS = """
.memory-cell{margin:10px 0 18px}
.memory-cell h3 small{font-weight:400;color:#555}
.memory-body{display:flex;flex-wrap:wrap;align-items:flex-start;gap:16px}
svg.memory-curve{border:1px solid #e0e0e0;background:#ffffff;font-size:10px;font-family:inherit;flex:none}
svg.memory-curve .grid-line{stroke:#000000;stroke-opacity:.08}
svg.memory-curve .tick,svg.memory-curve .frame{stroke:#9e9e9e}
svg.memory-curve .axis-label{fill:#333333}
table.logged{border-collapse:collapse;font-size:.85em}
table.logged th,table.logged td{border-bottom:1px solid #e0e0e0;padding:3px 8px;text-align:left;
font-variant-numeric:tabular-nums}
ul.devices{font-size:.85em;margin:6px 0;padding-left:18px}
.memory-legend span{display:inline-block;margin:2px 10px 2px 0;font-size:.85em}
.memory-legend i{display:inline-block;width:22px;height:0;vertical-align:middle;margin-right:4px;border-top:2px solid}
.memory-legend i.dot{width:8px;height:8px;border:none;border-radius:50%}
"""


def _legend(run: RunResult) -> str:
    keys = [(f'<i style="border-color:{CURVE_COLOUR}"></i>', "the server's memory"),
            (f'<i class="dot" style="background:{PEAK_COLOUR}"></i>', "its peak"),
            (f'<i style="border-color:{LIMIT_COLOUR}"></i>', "the limit (device total, container limit or host "
                                                              "total)")]
    if any(c.memory is not None and utilization_bytes(c.memory) is not None for c in run.cells):
        keys.append((f'<i style="border-top-style:dashed;border-color:{UTILIZATION_COLOUR}"></i>',
                     "limit × gpu_memory_utilization"))
    legend = "".join(f"<span>{mark}{escape(text)}</span>" for mark, text in keys)
    colour = NAME_COLOURS
    seen = {b.name: b.unfinished for c in run.cells if c.memory is not None for b in bands(c)}
    phases = "".join(f'<span style="background:{colour[n]}">{escape(n)}</span>'
                     for n in NAME_COLOURS if n in seen)
    if any(seen.values()):
        phases += f'<span style="background:{TAIL_COLOUR}">unfinished at the verdict</span>'
    return (f'<p class="memory-legend" id="memory-legend">{legend}</p>'
            + (f'<p class="phase-legend">{phases}</p>' if phases else ""))


def html(run: RunResult) -> str:
    """The section: a curve per cell, each on its own scale; without curves, why (`#no-memory`)."""
    if not has_memory(run):
        why = why_none(run)
        return "" if why is None else (f'<section id="memory"><h2>Memory</h2><p class="meta" id="no-memory">'
                                       f"{escape(why)}</p></section>")
    intro = ("Each cell on its own scale: x is seconds since the cell started (the timeline's clock), y the bytes the "
             "server held; its boot phases shaded behind the curve. A limit far above the peak is drawn at the top "
             "edge, marked above the scale.")
    return (f'<section id="memory"><h2>Memory</h2><p class="meta">{escape(intro)}</p>{_legend(run)}'
            + "".join(_cell_html(c) for c in run.cells) + "</section>")

"""KV need and cap against max_model_len, per group, with the fitted lines and the crossover: PNGs (matplotlib's Agg
backend, no display), one per group for the HTML page (they wrap to the page's width: one a row at 800 px, two at
1400 px) or all groups in one figure for `report --plot`. matplotlib is the `analysis` extra: without it both return
None and the report says why.

Read at a glance, at 800 px as at 1400 px: the legend sits below the axes, so it covers no marker and no line; the
crossover is named in the legend and on a white label at the top of its line, so no fitted line strikes through it;
the need fitted to the logged cells (red dashes) and the need predicted from config.json (a broad green band under
it) stay apart where they coincide, and the legend says when they do."""

from __future__ import annotations

import io
from typing import Any

from harness.analysis.fit import Analysis, GroupAnalysis, Line
from harness.analysis.kv import MIB
from harness.units import GIB
from harness.verdict import Outcome

MISSING = "matplotlib is not installed: pip install -e '.[analysis]' (in the checkout) for the plot"

NEED, CAP, PREDICTED, CROSS = "#c62828", "#1565c0", "#2e7d32", "#424242"
#: one panel, in inches at 100 dpi: 560 × 500 px, shown at its own size on an 800 px page
PANEL = (5.6, 5.0)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _unit(g: GroupAnalysis) -> tuple[float, str]:
    values = [q.bytes for c in g.cells for q in (c.cap, c.need) if q is not None]
    return (GIB, "GiB") if not values or max(values) >= 0.1 * GIB else (MIB, "MiB")


def plottable(g: GroupAnalysis) -> bool:
    return any(c.length is not None and (c.cap is not None or c.need is not None) for c in g.cells)


def _same_line(a: Line | None, b: Line | None, xs: list[float]) -> bool:
    """Two lines that draw as one over the plotted range (within 1 % of the larger value)."""
    if a is None or b is None:
        return False
    return all(abs(a.at(x) - b.at(x)) <= 0.01 * max(abs(a.at(x)), abs(b.at(x)), 1.0) for x in xs)


def _draw(ax: Any, g: GroupAnalysis, length_axis: str) -> None:
    """One group's panel: markers (filled booted, open refused), the need and cap fits, the prediction, the
    crossover; its legend below the axes."""
    from matplotlib.transforms import blended_transform_factory

    scale, unit = _unit(g)
    lengths = [c.length for c in g.cells if c.length is not None]
    x_max = max(lengths) * 1.15
    if g.cross.length is not None and 0 < g.cross.length <= 4 * max(lengths):
        x_max = max(x_max, g.cross.length * 1.15)
    xs = [0.0, x_max]
    if g.predicted_line is not None:  # under the fit: a broad band that the fit's dashes stay visible inside
        same = _same_line(g.predicted_line, g.need_line, xs)
        ax.plot(xs, [g.predicted_line.at(x) / scale for x in xs], color=PREDICTED, linewidth=6, alpha=0.35,
                solid_capstyle="butt", zorder=1,
                label=f"predicted need (config.json){' = the need fit' if same else ''}: "
                      f"{g.predicted_line.describe()}")
    for what, colour, marker, dashes in (("need", NEED, "o", (5, 3)), ("cap", CAP, "s", (8, 3, 2, 3))):
        booted = [(c.length, getattr(c, what).bytes / scale) for c in g.cells
                  if c.length is not None and getattr(c, what) is not None and c.outcome == Outcome.booted]
        other = [(c.length, getattr(c, what).bytes / scale) for c in g.cells
                 if c.length is not None and getattr(c, what) is not None and c.outcome != Outcome.booted]
        if booted:
            ax.scatter(*zip(*booted, strict=False), color=colour, marker=marker, s=42, zorder=4,
                       label=f"{what}, booted cells")
        if other:
            ax.scatter(*zip(*other, strict=False), facecolors="white", edgecolors=colour, marker=marker, s=42, zorder=4,
                       linewidths=1.6, label=f"{what}, refused cells")
        line = g.need_line if what == "need" else g.cap_line
        if line is not None:
            ax.plot(xs, [line.at(x) / scale for x in xs], color=colour, dashes=dashes, linewidth=1.4, zorder=2,
                    label=f"{what} fit: {line.describe()}")
    if g.cross.length is not None and g.cross.length <= x_max:
        ax.axvline(g.cross.length, color=CROSS, linestyle=":", linewidth=1.2, zorder=2,
                   label=f"crossover ≈{g.cross.length:,.0f} tokens")
        ax.text(g.cross.length, 0.98, f"≈{g.cross.length:,.0f}", transform=blended_transform_factory(
            ax.transData, ax.transAxes), ha="center", va="top", fontsize=8.5, color=CROSS, zorder=6,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": CROSS, "linewidth": 0.6})
    ax.set_xlim(0, x_max)
    tops = [q.bytes / scale for c in g.cells for q in (c.cap, c.need) if q is not None]
    tops += [line.at(x_max) / scale for line in (g.need_line, g.cap_line, g.predicted_line) if line is not None]
    ax.set_ylim(0, max(tops, default=1.0) * 1.15 or 1.0)
    ax.set_title(g.label, fontsize=11)
    ax.set_xlabel(f"{length_axis} (tokens)", fontsize=10)
    ax.set_ylabel(f"KV ({unit})", fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(0.0, -0.16), borderaxespad=0.0, frameon=False)


def _figure(panels: int, dpi: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    ncols = min(3, panels)
    nrows = -(-panels // ncols)
    fig = Figure(figsize=(PANEL[0] * ncols, PANEL[1] * nrows), dpi=dpi, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, axes


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def plot_png(analysis: Analysis, dpi: int = 100) -> bytes | None:
    """Every group in one figure as PNG bytes (`report --plot`); None when matplotlib is missing or no group has a
    number to plot."""
    if not available():
        return None
    groups = [g for g in analysis.groups if plottable(g)]
    if not groups:
        return None
    fig, axes = _figure(len(groups), dpi)
    for ax, g in zip(axes.flat, groups, strict=False):
        _draw(ax, g, analysis.length_axis)
    return _png(fig)


def plot_pngs(analysis: Analysis, dpi: int = 100) -> list[tuple[str, bytes]]:
    """(group label, PNG bytes) per group with a number to plot: the HTML page's panels, each shown at its own
    size; empty when matplotlib is missing."""
    if not available():
        return []
    out = []
    for g in analysis.groups:
        if plottable(g):
            fig, axes = _figure(1, dpi)
            _draw(axes[0][0], g, analysis.length_axis)
            out.append((g.label, _png(fig)))
    return out

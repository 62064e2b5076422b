"""KV need and cap against max_model_len, per group, with the fitted lines and the crossover: one PNG (matplotlib's
Agg backend, no display). matplotlib is the `analysis` extra: without it `plot_png` returns None and says why."""

from __future__ import annotations

import io

from harness.analysis.fit import Analysis, GroupAnalysis
from harness.analysis.kv import GIB, MIB
from harness.verdict import Outcome

MISSING = "matplotlib is not installed: pip install -e '.[analysis]' (in the checkout) for the plot"


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _unit(g: GroupAnalysis) -> tuple[float, str]:
    values = [q.bytes for c in g.cells for q in (c.cap, c.need) if q is not None]
    return (GIB, "GiB") if not values or max(values) >= 0.1 * GIB else (MIB, "MiB")


def plottable(g: GroupAnalysis) -> bool:
    return any(c.length is not None and (c.cap is not None or c.need is not None) for c in g.cells)


def plot_png(analysis: Analysis, dpi: int = 100) -> bytes | None:
    """The figure as PNG bytes; None when matplotlib is missing or no group has a number to plot."""
    if not available():
        return None
    groups = [g for g in analysis.groups if plottable(g)]
    if not groups:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    ncols = min(3, len(groups))
    nrows = -(-len(groups) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.8 * nrows), dpi=dpi, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, g in zip(axes.flat, groups):
        scale, unit = _unit(g)
        lengths = [c.length for c in g.cells if c.length is not None]
        x_max = max(lengths) * 1.15
        if g.cross.length is not None and 0 < g.cross.length <= 4 * max(lengths):
            x_max = max(x_max, g.cross.length * 1.15)
        xs = [0.0, x_max]
        for what, colour, marker in (("need", "#c62828", "o"), ("cap", "#1565c0", "s")):
            booted = [(c.length, getattr(c, what).bytes / scale) for c in g.cells
                      if c.length is not None and getattr(c, what) is not None and c.outcome == Outcome.booted]
            other = [(c.length, getattr(c, what).bytes / scale) for c in g.cells
                     if c.length is not None and getattr(c, what) is not None and c.outcome != Outcome.booted]
            if booted:
                ax.scatter(*zip(*booted), color=colour, marker=marker, zorder=3,
                           label=f"{what} (booted cells)")
            if other:
                ax.scatter(*zip(*other), facecolors="none", edgecolors=colour, marker=marker, zorder=3, linewidths=1.5,
                           label=f"{what} (refused cells)")
            line = g.need_line if what == "need" else g.cap_line
            if line is not None:
                ax.plot(xs, [line.at(x) / scale for x in xs], color=colour, linestyle="--", linewidth=1.2,
                        label=f"{what} fit: {line.describe()}")
        if g.predicted_line is not None:
            ax.plot(xs, [g.predicted_line.at(x) / scale for x in xs], color="#2ca02c", linestyle=":", linewidth=1.5,
                    label=f"predicted need: {g.predicted_line.describe()}")
        if g.cross.length is not None and g.cross.length <= x_max:
            ax.axvline(g.cross.length, color="#555555", linestyle=":", linewidth=1)
            ax.annotate(f"crossover ≈{g.cross.length:,.0f}", (g.cross.length, 0), xytext=(4, 6),
                        textcoords="offset points", fontsize=8, color="#333333", rotation=90, va="bottom")
        ax.set_xlim(0, x_max)
        tops = [q.bytes / scale for c in g.cells for q in (c.cap, c.need) if q is not None]
        tops += [line.at(x_max) / scale for line in (g.need_line, g.cap_line, g.predicted_line) if line is not None]
        ax.set_ylim(0, max(tops, default=1.0) * 1.15 or 1.0)
        ax.set_title(g.label, fontsize=10)
        ax.set_xlabel(f"{analysis.length_axis} (tokens)")
        ax.set_ylabel(f"KV ({unit})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()

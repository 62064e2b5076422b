"""The HTML pages read at 800 px as at 1400 px (issue 42, 7): the KV plot one panel per group at its own size, its
legend below the axes (covering no marker or line), the crossover named on a white label no fitted line strikes,
the need fit and the prediction told apart; history's sparklines on a stated zero-based scale with their range
written, a cell whose verdict flipped drawn night by night whole; no emoji left for a page without an emoji font.
The screenshots at both widths: tests/integration/test_report_browser.py; what they showed is in the commit."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.analysis.fit import analyze_run
from harness.report.build import build_report
from harness.report.glyphs import FALLBACK, text_only
from harness.report.history import render_html as history_html
from harness.report.plot import available as plot_available
from harness.results.store import load_run
from tests.helpers.env import require
from tests.helpers.nights import by_id, cell, history, night
from tests.synthetic import cpu_example_run

SVG = "{http://www.w3.org/2000/svg}"
NIGHT = Path(__file__).resolve().parents[2] / "examples" / "runs" / "cpu-tiny-night1"


# ---------------------------------------------------------------- the KV plot


@pytest.fixture(scope="module")
def drawn():
    """A shipped night of the CPU example (booted for real: its cells carry the prediction) drawn once, group by
    group, as the page draws it (layout done)."""
    require("matplotlib", plot_available(), "pip install -e '.[analysis]'")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from harness.report.plot import PANEL, _draw, plottable

    a = analyze_run(load_run(NIGHT)[0])
    out = []
    for g in (g for g in a.groups if plottable(g)):
        fig = Figure(figsize=PANEL, dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        _draw(ax, g, a.length_axis)
        fig.canvas.draw()
        out.append((g, fig, ax))
    return out


def test_each_legend_lies_below_its_axes_and_names_every_line_and_the_crossover(drawn):
    for g, fig, ax in drawn:
        r = fig.canvas.get_renderer()
        legend, box = ax.get_legend().get_window_extent(r), ax.get_window_extent(r)
        assert legend.y1 <= box.y0, f"{g.label}: the legend overlaps the axes (a marker or a label under it)"
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("need fit") for t in labels) and any(t.startswith("cap fit") for t in labels)
        if g.cross.length is not None:
            assert any(t.startswith("crossover ≈") for t in labels), labels


def test_the_crossover_label_sits_on_white_above_every_line(drawn):
    crossed = [(g, ax) for g, _, ax in drawn if g.cross.length is not None]
    assert crossed, "the example has a crossover to label"
    for _g, ax in crossed:
        [label] = [t for t in ax.texts if t.get_text().startswith("≈")]
        patch = label.get_bbox_patch()
        assert patch is not None and patch.get_facecolor()[:3] == (1.0, 1.0, 1.0)
        assert label.get_zorder() > max(line.get_zorder() for line in ax.lines), "a line would strike it"


def test_the_need_fit_and_the_prediction_are_told_apart_where_they_coincide(drawn):
    g, _, ax = next((g, f, ax) for g, f, ax in drawn if g.predicted_line is not None and g.need_line is not None)
    lines = {ln.get_label().split(":")[0]: ln for ln in ax.lines}
    fit, pred = lines["need fit"], next(ln for k, ln in lines.items() if k.startswith("predicted need"))
    assert pred.get_linewidth() >= 3 * fit.get_linewidth() and pred.get_zorder() < fit.get_zorder(), \
        "the prediction a band under the fit's dashes: both seen where they coincide"
    assert fit.get_linestyle() != pred.get_linestyle() and fit.get_color() != pred.get_color()
    assert "= the need fit" in pred.get_label(), "the legend says they coincide (the tiny model is predicted exactly)"


def test_the_page_shows_one_plot_per_group_at_its_own_size():
    require("matplotlib", plot_available(), "pip install -e '.[analysis]'")
    rep = build_report(cpu_example_run())
    html = rep.html()
    imgs = re.findall(r'<img[^>]*class="kv-plot"[^>]*>', html)
    groups = [label for label, _ in rep.pngs]
    assert len(imgs) == len(groups) >= 2 and html.count('id="kv-plot"') == 1
    assert [re.search(r'data-group="([^"]*)"', i).group(1) for i in imgs] == groups
    assert "flex-wrap:wrap" in html


# ---------------------------------------------------------------- history's sparklines


def _sparks(page: str) -> dict[str, ET.Element]:
    rows = re.findall(r'<tr class="cell-history"[^>]*data-cell-id="([^"]+)".*?(<svg class="spark".*?</svg>)', page)
    return {cid: ET.fromstring(svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))
            for cid, svg in rows}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Six nights: c_a drifts 5 % (40 → 42 s); c_b boots four nights, then is refused in 9 s twice."""
    root = tmp_path_factory.mktemp("history")
    for i in range(6):
        flipped = i >= 4
        night(root, i, [cell(boot_s=40.0 + (2.0 if i >= 3 else 0.0)),
                        cell("c_b", "refused" if flipped else "booted", boot_s=9.0 if flipped else 30.0)])
    h = history([root])
    return h, history_html(h)


def _ys(svg: ET.Element) -> list[float]:
    (line,) = svg.iter(f"{SVG}polyline")
    return [float(p.split(",")[1]) for p in line.get("points").split()]


def test_a_five_percent_drift_is_drawn_five_percent_high_with_its_scale_written(page):
    _, html = page
    svg = _sparks(html)["c_a"]
    height = float(svg.get("height"))
    ys = _ys(svg)
    assert max(ys) - min(ys) <= 0.06 * height, f"a 5 % drift drawn over {max(ys) - min(ys):.1f} of {height} px"
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert labels == ["42.0 s", "0"], labels
    assert 'id="spark-scale"' in html and "from 0 s to the row" in html


def test_a_cell_whose_verdict_flipped_is_drawn_whole_each_night_in_its_colour(page):
    h, html = page
    assert by_id(h, "c_b").since == 4 and len(by_id(h, "c_b").series) == 2, "the steps are found in the streak"
    svg = _sparks(html)["c_b"]
    assert len(_ys(svg)) == 6, "every night drawn, not the streak's two-point stub"
    dots = [c.get("class") for c in svg.iter(f"{SVG}circle") if "dot" in (c.get("class") or "")]
    assert dots == ["dot booted"] * 4 + ["dot refused"] * 2


# ---------------------------------------------------------------- emoji


def test_no_page_keeps_an_emoji_an_emoji_less_machine_cannot_draw(page):
    report = build_report(load_run(NIGHT)[0], plot=False).html()
    for html in (report, page[1]):
        assert not any(e in html for e in FALLBACK if not FALLBACK[e].startswith(e)), "an emoji left"
        assert "\ufe0f" not in html
    assert re.search(r"time \d+(\.\d)? s", report), "the boot time still said, in words"
    assert text_only("⏱ 3 s ⚠️ x ⚠ y") == "time 3 s ⚠\ufe0e x ⚠\ufe0e y"

"""How the report and compare read a memory curve: the HTML draws it as inline SVG on the cell's own scale (phases
shaded as the timeline names them, the limit and the gpu_memory_utilization line across it, the peak marked, vLLM's
logged sizes beside the measured steps); the grid and the markdown gain peak and headroom only where a cell has a
curve; compare calls a peak that grew beyond both tolerances a regression (exit 1)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.tolerance import DEFAULT_MEMORY_TOLERANCE, Tolerance
from harness.cli.tolerances import parse_memory_tolerance
from harness.errors import UsageError
from harness.logfacts.timeline import Milestone, span_name
from harness.report import memory
from harness.report.build import build_report
from harness.report.grid import NUMBERS_LEGEND, grid_text
from tests.cli import in_process as cli
from tests.helpers.memory_cells import MILESTONES, SAMPLES, cpu_refused_cell, gpu_cell
from tests.synthetic import cpu_example_run, make_cell, make_run, with_memory, write_run

GIB, MIB = 1 << 30, 1 << 20
SVG = "{http://www.w3.org/2000/svg}"
ODD_ID = "mml2048-a|b-[bold]-<x>&y"


def parse(svg: str) -> ET.Element:
    assert svg, "an SVG was drawn"
    return ET.fromstring(svg)


def points(root: ET.Element) -> list[tuple[float, float]]:
    (line,) = root.iter(f"{SVG}polyline")
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


# ---------------------------------------------------------------- the SVG


def test_the_curve_stays_inside_the_plot_and_keeps_every_sample_in_time_order():
    c = gpu_cell()
    root = parse(memory.svg(c))
    assert root.get("class") == "memory-curve" and root.get("data-cell-id") == c.cell_id
    pts = points(root)
    assert len(pts) == len(SAMPLES)
    for x, y in pts:
        assert memory.LEFT <= x <= memory.WIDTH - memory.RIGHT
        assert memory.TOP <= y <= memory.HEIGHT - memory.BOTTOM
    assert [x for x, _ in pts] == sorted(x for x, _ in pts)
    assert pts[0] == (memory.LEFT, memory.HEIGHT - memory.BOTTOM), "0 bytes at 0 s is the plot's bottom-left corner"


def test_the_limit_and_the_utilization_line_sit_at_their_bytes_and_the_peak_is_marked_on_the_curve():
    c = gpu_cell()
    root = parse(memory.svg(c))
    sc = memory.scale(c)
    lines = {ln.get("class"): ln for ln in root.iter(f"{SVG}line") if ln.get("class") in ("limit", "utilization")}
    assert float(lines["limit"].get("y1")) == pytest.approx(sc.y(8 * GIB), abs=0.06)
    assert float(lines["utilization"].get("y1")) == pytest.approx(sc.y(0.9 * 8 * GIB), abs=0.06)
    assert int(lines["utilization"].get("data-bytes")) == int(8 * GIB * 0.9)
    top_of_curve = min(y for _, y in points(root))
    assert float(lines["limit"].get("y1")) < float(lines["utilization"].get("y1")) < top_of_curve, \
        "limit above utilization above the peak (the page's y grows downwards)"
    (peak,) = root.iter(f"{SVG}circle")
    assert peak.get("class") == "peak" and int(peak.get("data-bytes")) == int(7.0 * GIB)
    assert float(peak.get("cy")) == pytest.approx(top_of_curve, abs=0.06)
    assert "peak 7.00 GiB at 14.0 s (CUDA-graph capture), headroom 0.20 GiB" in peak.find(f"{SVG}title").text


def test_each_phase_of_the_timeline_is_a_band_titled_by_its_name_in_boot_order():
    c = gpu_cell()
    root = parse(memory.svg(c))
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "phase"]
    # a record without loading_started (before it was read): its weights span holds the workers' start too
    want = [span_name(Milestone(a) if a else None, Milestone(m))
            for a, m in zip([None, *MILESTONES], MILESTONES, strict=False)]
    assert [r.get("data-phase") for r in rects] == want
    assert all(r.find(f"{SVG}title").text.startswith(r.get("data-phase") + ": ") for r in rects)
    xs = [(float(r.get("x")), float(r.get("x")) + float(r.get("width"))) for r in rects]
    assert all(a[1] == pytest.approx(b[0], abs=0.2) for a, b in zip(xs, xs[1:], strict=False)), "bands laid end to end"
    sc = memory.scale(c)
    weights = rects[want.index("start-up and weight loading")]
    assert float(weights.get("x")) == pytest.approx(sc.x(2.0), abs=0.06)
    assert float(weights.get("x")) + float(weights.get("width")) == pytest.approx(sc.x(6.0), abs=0.1)


def test_a_refusal_shades_the_phase_it_died_in_and_a_far_limit_is_drawn_above_the_scale():
    c = cpu_refused_cell()
    root = parse(memory.svg(c))
    phases = [r.get("data-phase") for r in root.iter(f"{SVG}rect") if r.get("class") == "phase"]
    assert phases[-1] == "torch.compile (unfinished at the verdict)"
    (limit,) = [ln for ln in root.iter(f"{SVG}line") if "limit" in (ln.get("class") or "").split()]
    assert "off-scale" in limit.get("class").split() and float(limit.get("y1")) == memory.TOP
    assert not [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "utilization"], "no GPU, no such line"
    plot_h = memory.HEIGHT - memory.TOP - memory.BOTTOM
    assert min(y for _, y in points(root)) < memory.TOP + 0.2 * plot_h, "the curve keeps its height"
    assert any("curve stops" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_no_curve_draws_no_svg_and_an_empty_curve_says_why():
    assert memory.svg(make_cell("x", {"a": "1"}, "booted")) == ""
    empty = with_memory(make_cell("x", {"a": "1"}, "crashed"), [], stopped="NVML: no permission")
    assert memory.svg(empty) == ""
    assert memory.grid_line(empty) == "mem: no samples"
    assert "no memory samples (NVML: no permission)" in memory.html(make_run("r", [empty]))


# ---------------------------------------------------------------- the HTML page


def odd_run():
    return make_run("mem", [gpu_cell(ODD_ID), cpu_refused_cell(), make_cell("mml8192-old", {"max_model_len": "8192",
                                                                                           "gpu": "h100"}, "booted")])


def test_the_page_holds_a_well_formed_curve_per_cell_a_legend_and_the_logged_sizes():
    html = build_report(odd_run(), plot=False).html()
    assert '<section id="memory">' in html and 'id="memory-legend"' in html
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) == 2
    assert {ET.fromstring(s).get("data-cell-id") for s in svgs} == {ODD_ID, "mml4096-cpu"}
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    section = html[html.index('<section id="memory">'):]
    assert 'id="memory-cell-mml8192-old"' in section and "no memory curve" in section, "an older record says so"
    logged = re.search(r'<table class="logged">.*?</table>', section, flags=re.S).group(0)
    assert "<td>weights</td><td>weight loading</td><td>2.00 GiB</td><td>2.30 GiB</td><td>+0.30 GiB (+15%)</td>" \
        in logged
    assert "<td>kv_cache</td><td>CUDA-graph capture</td><td>4.00 GiB</td><td>—</td><td></td>" in logged
    assert "the curve stops early: the server process 4242 is gone" in section
    assert "mem peak 7.00 GiB · headroom 0.20 GiB" in html, "the grid cell's line"


def test_a_run_without_memory_says_why_and_shows_no_curve():
    run = cpu_example_run()
    rep = build_report(run, plot=False)
    html, md, text = rep.html(), rep.markdown(), grid_text(run, width=200)
    assert 'id="memory-' not in html and "svg" not in html and 'id="no-memory"' in html
    for out in (html, md, text):
        assert "mem peak" not in out and "headroom" not in out
        assert "no memory curves: no cell of this run recorded one" in " ".join(out.split()), out[-600:]
        assert "memory_interval_s: null" in out and "docs/memory.md" in out
    assert f"<sub>{NUMBERS_LEGEND}</sub>" in md
    assert memory.why_none(make_run("empty", [])) is None, "a run without cells says so once, elsewhere"


# ---------------------------------------------------------------- grid and markdown


def test_the_markdown_has_peak_and_headroom_columns_and_the_logged_sizes_with_ids_escaped():
    md = build_report(odd_run(), plot=False).markdown()
    assert "| cell | verdict | peak | at | in phase | headroom | limit | source | curve stopped |" in md
    esc = "mml2048-a\\|b-\\[bold\\]-&lt;x>&amp;y"  # as markdown shows it: no cell break, link or tag (issue 39)
    assert (f"| {esc} | booted (ready) | 7.00 GiB | 14.0 s | CUDA-graph capture | 0.20 GiB | 8.00 GiB (device_total) "
            "| nvml |  |") in md
    assert ("| mml4096-cpu | refused (kv_cache_too_small) | 3.00 GiB | 4.0 s | torch.compile | 125.00 GiB | "
            "128.00 GiB (host_total) | process | the server process 4242 is gone |") in md
    assert f"| {esc} | weights | weight loading | 2.00 GiB | 2.30 GiB | +0.30 GiB (+15%) |" in md
    assert "mem peak 7.00 GiB · headroom 0.20 GiB" in md and memory.MEMORY_LEGEND in md
    assert "mml8192-old |" not in md.split("### Memory")[1].split("###")[0], "no row for a cell without a curve"


def test_the_terminal_grid_shows_the_memory_line_and_table_and_a_pipe_keeps_long_ids_whole(tmp_path, capsys,
                                                                                              monkeypatch):
    long_id = "mml2048-" + "x" * 140
    run = make_run("mem", [gpu_cell(long_id), cpu_refused_cell()])
    text = grid_text(run, width=240)
    assert "mem peak 3.00 GiB · headroom 125.00 GiB" in text
    # through a pipe at 120 columns (COLUMNS unset) the id is whole and the columns that cannot fit beside it are
    # left out, said so (issue 42); at COLUMNS=400 the row is whole
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli("report", str(write_run(run, tmp_path))) == 0
    out = capsys.readouterr().out
    assert any(long_id in ln for ln in out.splitlines()) and "left out at 120 columns:" in out
    monkeypatch.setenv("COLUMNS", "400")
    assert cli("report", str(write_run(run, tmp_path))) == 0
    out = capsys.readouterr().out
    (row,) = [ln for ln in out.splitlines() if long_id in ln and "nvml" in ln]
    assert re.search(r"7\.00 GiB\s.*14\.0 s\s.*CUDA-graph capture\s.*0\.20 GiB\s.*8\.00 GiB", row)
    assert memory.MEMORY_LEGEND.split(";")[0] in out.replace("\n", " ")


# ---------------------------------------------------------------- compare


def nights(scale_b: float, *, b_outcome: str = "booted"):
    a = make_run("night-1", [gpu_cell(), make_cell("old", {"max_model_len": "4096", "gpu": "h100"}, "booted")])
    cb = gpu_cell(peak_scale=scale_b)
    if b_outcome != "booted":
        cb = cb.model_copy(update={"outcome": b_outcome, "reason": "cuda_oom_unknown"})
    b = make_run("night-2", [cb, make_cell("old", {"max_model_len": "4096", "gpu": "h100"}, "booted")])
    return a, b


def test_a_peak_grown_beyond_both_tolerances_is_a_memory_regression_and_the_reverse_is_listed():
    d = compare_runs(*nights(1.2))
    assert d.memory_compared == 1, "the cell without a curve is not compared"
    (grew,) = d.bigger
    assert (grew.a_bytes, grew.b_bytes) == (int(7.0 * GIB), int(int(7.0 * GIB) * 1.2))
    assert grew.rel == pytest.approx(0.2, abs=1e-6) and grew.b_phase == "CUDA-graph capture"
    assert d.has_regression and not d.regressions and not d.slower
    back = compare_runs(*reversed(nights(1.2)))
    assert not back.bigger and [m.cell_id for m in back.smaller] == ["mml2048-gpu"] and not back.has_regression


@pytest.mark.parametrize(("scale_b", "tol", "grew"), [
    (1.05, DEFAULT_MEMORY_TOLERANCE, False),  # +355 MiB but 5 %: within the relative tolerance
    (1.2, Tolerance.of_bytes(0.10, 2 * GIB), False),  # +20 % but 1.4 GiB: within the absolute one
    (1.2, Tolerance.of_bytes(0.10, 1 * GIB), True),
])
def test_both_tolerances_must_be_exceeded(scale_b, tol, grew):
    assert bool(compare_runs(*nights(scale_b), memory_tolerance=tol).bigger) is grew


def test_cells_without_a_curve_on_either_side_or_with_another_verdict_are_not_compared():
    a, b = nights(2.0, b_outcome="refused")
    d = compare_runs(a, b)
    assert d.memory_compared == 0 and not d.bigger and [c.cell_id for c in d.regressions] == ["mml2048-gpu"]
    plain = cpu_example_run("a")
    d = compare_runs(plain, make_run("b", [gpu_cell(c.cell_id) for c in plain.cells]))
    assert d.memory_compared == 0 and not d.bigger and not d.has_regression
    from harness.report.compare import render_diff
    from harness.report.text import plain_console

    console = plain_console()
    with console.capture() as cap:
        console.print(render_diff(compare_runs(plain, plain)))
    assert "memory" not in cap.get().lower(), "older records read as they always did"


@pytest.mark.parametrize(("text", "rel", "size"), [
    ("10%,256MiB", 0.10, 256 * MIB), ("256MiB,10%", 0.10, 256 * MIB), ("20%", 0.20, 256 * MIB),
    ("1.5GiB", 0.10, int(1.5 * GIB)), ("5 % , 512 kib", 0.05, 512 * 1024), ("0%,0B", 0.0, 0)])
def test_the_memory_tolerance_takes_a_percentage_and_a_size_in_either_order(text, rel, size):
    t = parse_memory_tolerance(text)
    assert (t.rel, t.absolute) == (pytest.approx(rel), size)


@pytest.mark.parametrize("text", ["", "lots", "10", "10%,20%", "1GiB,2GiB", "10%,1GB", "9" * 400 + "%", "1,2,3",
                                  "-5%"])
def test_a_bad_memory_tolerance_is_one_usage_error(text):
    with pytest.raises(UsageError, match="--memory-tolerance"):
        parse_memory_tolerance(text)


def test_the_command_exits_1_on_a_grown_peak_says_it_in_json_and_text_and_takes_the_flag(tmp_path, capsys):
    a, b = nights(1.2)
    da, db = write_run(a, tmp_path), write_run(b, tmp_path)
    assert cli("compare", str(da), str(db), "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["has_regression"] and not doc["regressions"] and not doc["time_regressions"]
    assert doc["memory_tolerance"] == {"relative": 0.1, "bytes": 256 * MIB} and doc["memory_compared"] == 1
    (reg,) = doc["memory_regressions"]
    assert reg["cell_id"] == "mml2048-gpu" and reg["delta_bytes"] == reg["b_bytes"] - reg["a_bytes"] > 0
    assert cli("compare", str(da), str(db)) == 1
    out = capsys.readouterr().out
    assert "1 memory peak(s) grown beyond 10% and 256 MiB" in " ".join(out.split())  # wraps at spaces
    assert "MEMORY REGRESSIONS: peaks grown beyond 10% and 256 MiB" in out
    (row,) = [ln for ln in out.splitlines() if ln.startswith("mml2048-gpu")]
    assert "7.00 GiB" in row and "8.40 GiB" in row and "+20%" in row and "CUDA-graph capture" in row
    assert cli("compare", str(da), str(db), "--memory-tolerance", "25%") == 0
    capsys.readouterr()
    assert cli("compare", str(db), str(da)) == 0, "a smaller peak is no regression"
    capsys.readouterr()
    assert cli("compare", str(da), str(db), "--memory-tolerance", "lots") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-tolerance lots" in err[0]

"""The HTML report in a real headless browser (Debian's `chromium`): it renders offline, the grid's cells are in the
DOM with their hooks, and the screenshot shows the outcome colours and the plot — not a blank page.

Needs `apt-get install -y chromium` (and matplotlib, the `analysis` extra, which brings Pillow). Under CI=true a
missing browser fails the test instead of skipping it."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers.boots import harness_cli
from tests.helpers.browser import BOOTED_BG, REFUSED_BG, browse, chromium, has_pil, near
from tests.helpers.env import require
from tests.synthetic import cpu_example_run, seed_run, write_run

NEED_RED, CAP_BLUE = (0xC6, 0x28, 0x28), (0x15, 0x65, 0xC0)  # harness/report/plot.py


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells: dict[str, dict[str, str]] = {}
        self.imgs: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "td" and "data-cell-id" in a:
            self.cells[a["data-cell-id"]] = a
        if tag == "img":
            self.imgs.append(a)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """`boot-harness report RUN --html FILE` on the CPU example's calibrated run (through the CLI's entry)."""
    tmp = tmp_path_factory.mktemp("report")
    run_dir = write_run(cpu_example_run(), tmp / "results")
    page = tmp / "report.html"
    from tests.cli import in_process as cli

    assert cli("report", str(run_dir), "--html", str(page)) == 0
    return page


def test_the_report_renders_in_a_headless_browser_with_colours_and_the_plot(report, tmp_path):
    require("Pillow (with matplotlib)", has_pil(), "pip install -e '.[analysis]'")
    from PIL import Image

    exe = chromium()
    shot = tmp_path / "shot.png"
    proc = browse(exe, report, tmp_path, f"--screenshot={shot}", "--window-size=1700,1500")
    assert shot.is_file() and shot.stat().st_size > 0, proc.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1700, 1500)
    colours = {c for _, c in img.getcolors(maxcolors=1 << 24)}
    assert len(colours) > 200, f"a near-blank screenshot: {len(colours)} colours"
    assert near(colours, BOOTED_BG) and near(colours, REFUSED_BG), "the grid's outcome colours are painted"
    assert near(colours, NEED_RED, 30) and near(colours, CAP_BLUE, 30), "the embedded plot is drawn"


def test_the_grid_cells_are_in_the_browsers_dom_with_their_hooks(report, tmp_path):
    exe = chromium()
    proc = browse(exe, report, tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Dom()
    dom.feed(proc.stdout)
    run = cpu_example_run()
    assert set(dom.cells) == {c.cell_id for c in run.cells}
    for c in run.cells:
        td = dom.cells[c.cell_id]
        assert td["id"] == f"cell-{c.cell_id}" and td["data-outcome"] == c.outcome
        assert c.outcome in td["class"].split() and "matched" in td["class"].split()
    [plot] = [i for i in dom.imgs if i.get("id") == "kv-plot"]
    assert plot["src"].startswith("data:image/png;base64,")


def test_the_seed_report_marks_the_contradicting_boot_in_the_browser(tmp_path):
    exe = chromium()
    run_dir = write_run(seed_run(), tmp_path / "results")
    page = tmp_path / "seed.html"
    proc = harness_cli_report(run_dir, page)
    assert proc.returncode == 0, proc.stderr
    dom = Dom()
    dom.feed(browse(exe, page, tmp_path, "--dump-dom").stdout)
    assert "inconsistent" in dom.cells["mml131072-mtp_off-floor_none"]["class"].split()


def harness_cli_report(run_dir: Path, page: Path) -> subprocess.CompletedProcess:
    return harness_cli("report", str(run_dir), "--html", str(page), timeout=120)


def test_the_boot_timeline_draws_a_bar_per_cell_on_one_scale_in_the_browser(tmp_path):
    """A run of scripted boots (FakeRuntime: every phase line, one slower cell, one that stalls until its deadline):
    the report's bars are in the DOM with their phases, the slowest cell's bar spans the track, and the phase colours
    are painted."""
    require("Pillow (with matplotlib)", has_pil(), "pip install -e '.[analysis]'")
    from PIL import Image

    from harness.boot.session import RunOptions, RunSession
    from harness.logfacts.timeline import Milestone
    from harness.matrix.load import load_matrix
    from harness.report.timeline import PHASE_COLOURS
    from harness.runtime.fake import FakeRuntime, Script
    from tests.builders import write_matrix

    doc = {"name": "timeline", "command": ["fake-vllm"], "model": "m", "timeout_s": 1.5, "linger_s": 0.1,
           "axes": {"c": {"fast": {}, "slow": {}, "stalls": {}}}}
    loaded = load_matrix(write_matrix(tmp_path / "m.yaml", doc))
    runtime = FakeRuntime({"c_fast": Script.full_boot(0.02), "c_slow": Script.full_boot(0.1),
                           "c_stalls": Script.full_boot(0.02, until="graphs_captured")})
    session = RunSession.open(loaded, list(loaded.cells), RunOptions(results_dir=tmp_path / "r"),
                              runtime=runtime)
    session.run()
    session.finish()
    page = tmp_path / "timeline.html"
    assert harness_cli_report(session.run_dir, page).returncode == 0
    exe = chromium()
    dom = browse(exe, page, tmp_path, "--dump-dom").stdout
    for cid in ("c_fast", "c_slow", "c_stalls"):
        assert f'id="timeline-{cid}"' in dom
    assert 'data-phase="CUDA-graph capture (unfinished at the verdict)"' in dom, "the stalled cell's tail"
    shot = tmp_path / "timeline.png"
    browse(exe, page, tmp_path, f"--screenshot={shot}", "--window-size=1400,1800")
    colours = {c for _, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24)}
    for m in (Milestone.weights_loaded, Milestone.compiled, Milestone.graphs_captured):
        hex_ = PHASE_COLOURS[m].lstrip("#")
        assert near(colours, tuple(int(hex_[i:i + 2], 16) for i in (0, 2, 4))), f"{m.value}'s colour is painted"


def test_a_memory_curve_draws_in_the_browser_with_its_phases_limit_and_peak(tmp_path):
    """A run whose cells carry memory curves (a GPU boot with its phases, a CPU refusal whose limit is far above its
    peak, an older record without one): the report's SVG curves are in the DOM with their hooks, and the screenshot
    paints the curve, the peak, the limit and the phase bands in their colours."""
    require("Pillow (with matplotlib)", has_pil(), "pip install -e '.[analysis]'")
    from PIL import Image

    from harness.logfacts.timeline import Milestone
    from harness.report import memory
    from harness.report.timeline import PHASE_COLOURS
    from tests.helpers.memory_cells import cpu_refused_cell, gpu_cell
    from tests.synthetic import make_cell, make_run

    run = make_run("memory", [gpu_cell(), cpu_refused_cell(),
                              make_cell("mml8192-old", {"max_model_len": "8192", "gpu": "h100"}, "booted")])
    run_dir = write_run(run, tmp_path / "results")
    page = tmp_path / "memory.html"
    assert harness_cli_report(run_dir, page).returncode == 0
    exe = chromium()
    dom = browse(exe, page, tmp_path, "--dump-dom").stdout
    for cid in ("mml2048-gpu", "mml4096-cpu"):
        assert f'id="memory-curve-{cid}"' in dom, f"{cid}'s curve is in the DOM"
    assert dom.count("<polyline") == 2 and dom.count('class="peak"') == 2
    assert 'data-phase="CUDA-graph capture"' in dom and 'data-phase="torch.compile (unfinished at the verdict)"' in dom
    assert 'class="limit off-scale"' in dom, "the host's memory, far above the CPU cell's peak"
    assert 'id="memory-cell-mml8192-old"' in dom and "no memory curve" in dom
    shot = tmp_path / "memory.png"
    browse(exe, page, tmp_path, f"--screenshot={shot}", "--window-size=1400,2600")
    colours = {c for _, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24)}

    def rgb(hex_: str) -> tuple[int, int, int]:
        hex_ = hex_.lstrip("#")
        return tuple(int(hex_[i:i + 2], 16) for i in (0, 2, 4))  # type: ignore[return-value]  # three items

    for what, colour, tol in (("the curve", memory.CURVE_COLOUR, 30), ("the peak", memory.PEAK_COLOUR, 30),
                              ("the limit", memory.LIMIT_COLOUR, 40),
                              ("the weight-loading band", PHASE_COLOURS[Milestone.weights_loaded], 10),
                              ("the graph-capture band", PHASE_COLOURS[Milestone.graphs_captured], 10)):
        assert near(colours, rgb(colour), tol), f"{what} is painted"

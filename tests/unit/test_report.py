"""How `report` draws a run: the grid (rows max_model_len, columns the other axes, one grid per image or chosen
axis), its markdown for CI job summaries, the single-file HTML with stable hooks and the plot embedded, and the text
the pytest plugin prints."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from harness.report.build import build_report, session_summary
from harness.report.grid import build_grids, grid_text
from harness.report.plot import available as plot_available
from tests.cli import in_process as cli
from tests.helpers.compare_runs import image_run
from tests.helpers.env import require
from tests.synthetic import cpu_example_run, make_cell, make_run, seed_run, write_run


class Cells(HTMLParser):
    """Collects the grid cells' attributes and every URL the page would load."""

    def __init__(self):
        super().__init__()
        self.cells: dict[str, dict[str, str]] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "td" and "data-cell-id" in a:
            self.cells[a["data-cell-id"]] = a
        for key in ("src", "href"):
            if a.get(key):
                self.urls.append(a[key])


def test_the_grid_has_lengths_as_rows_and_the_other_axes_as_columns():
    [g] = build_grids(cpu_example_run())
    assert g.split_axis is None and g.row_axis == "max_model_len" and g.rows == ["2048", "4096"]
    assert g.col_axes == ["spec", "kv"]
    assert g.cols == [("off", "tight"), ("draft", "tight"), ("draft", "raised")], "the matrix's value order"
    assert g.at("4096", ("draft", "tight")).cell.outcome == "refused"


def test_there_is_one_grid_per_image_by_default_or_per_any_axis_chosen():
    grids = build_grids(image_run())
    assert [(g.split_axis, g.split_value) for g in grids] == [("image", "old"), ("image", "new")]
    assert [len(g.cols) for g in grids] == [1, 1]
    assert [g.split_value for g in build_grids(cpu_example_run(), split="kv")] == ["tight", "raised"]


def test_the_terminal_grid_shows_outcome_reason_kv_numbers_and_expectation():
    text = grid_text(cpu_example_run(), width=160)
    for needle in ("max_model_len", "spec=draft", "refused", "(kv_cache_too_small)", "need ≈4.00 MiB > cap 3.00 MiB",
                   "est. max 1,408", "3,072 tok · 1.50x", "✓", "6 cells: 3 booted, 3 refused"):
        assert needle in text, needle


def test_a_mismatch_shows_what_was_expected():
    run = cpu_example_run()
    run.cells[1] = run.cells[1].model_copy(update={"matched": False})
    run.cells[1].expected.outcome = "booted"
    assert "✗ expected booted" in grid_text(run, width=200)


def test_the_markdown_suits_a_job_summary():
    md = build_report(cpu_example_run(), plot=False).markdown()
    assert md.startswith("## boot-harness report: `cpu-tiny-calibrated`")
    assert "| max_model_len | spec=off, kv=tight | spec=draft, kv=tight | spec=draft, kv=raised |" in md
    assert "| **2048** | 🟢 **booted** ✓<br>cap 3.00 MiB<br>3,072 tok · 1.50x |" in md
    assert "`--kv-cache-memory-bytes 4456448`" in md and "2,048 B/token" in md
    assert "data:" not in md


def test_the_seeds_contradiction_is_marked_in_the_grid_and_the_analysis():
    rep = build_report(seed_run(), plot=False)
    md = rep.markdown()
    assert "⚠ need ≈1.86 GiB > cap 1.74 GiB, yet booted" in md and "⚠️ inconsistent" in md
    assert "cap overtakes need at ≈440," in md


def test_the_html_is_one_offline_file_with_a_stable_hook_on_every_cell():
    require("matplotlib", plot_available(), "pip install -e '.[analysis]'")
    html = build_report(seed_run()).html()
    page = Cells()
    page.feed(html)
    assert set(page.cells) == {c.cell_id for c in seed_run().cells}
    booted = page.cells["mml131072-mtp_off-floor_none"]
    assert booted["id"] == "cell-mml131072-mtp_off-floor_none"
    assert booted["class"].split() == ["cell", "booted", "matched", "inconsistent"]
    assert page.cells["mml262144-mtp4-floor_none"]["data-reason"] == "kv_cache_too_small"
    assert all(u.startswith("data:image/png;base64,") for u in page.urls), page.urls
    assert "script" not in page.tags and "link" not in page.tags
    png = base64.b64decode(page.urls[0].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_without_a_length_axis_the_grid_still_draws_and_says_why_there_is_no_analysis():
    run = make_run("flat", [make_cell(f"img_{i}", {"image": i}, "booted") for i in ("a", "b")])
    rep = build_report(run)
    assert rep.analysis is None and "no max_model_len axis" in rep.notes[0]
    assert "img_a" in rep.html() and "booted" in rep.markdown()


def test_the_command_writes_html_markdown_and_png(tmp_path, capsys):
    require("matplotlib", plot_available(), "pip install -e '.[analysis]'")
    run_dir = write_run(cpu_example_run(), tmp_path)
    out = tmp_path / "out"
    rc = cli("report", str(run_dir), "--html", str(out / "r.html"), "--markdown", str(out / "r.md"),
             "--plot", str(out / "kv.png"))
    assert rc == 0
    assert "spec=draft" in capsys.readouterr().out, "the grid on the terminal too"
    assert (out / "r.html").read_text().count("data-cell-id=") == 6
    assert "![KV need and cap against max_model_len](kv.png)" in (out / "r.md").read_text()
    assert (out / "kv.png").read_bytes()[:4] == b"\x89PNG"
    assert cli("report", str(run_dir), "--markdown", "-") == 0
    assert capsys.readouterr().out.startswith("## boot-harness report"), "markdown alone on stdout, for a pipe"
    assert cli("report", str(run_dir), "--axis", "max_model_len") == 2


def test_the_pytest_plugin_summary_is_the_grid_as_text(tmp_path):
    run_dir = write_run(cpu_example_run(), tmp_path)
    text = session_summary(run_dir, width=140)
    assert "spec=off" in text and "refused" in text and not re.search(r"\x1b\[", text)
    assert re.search(r"\x1b\[", session_summary(run_dir, width=140, color=True))


@pytest.mark.parametrize("split", [None, "spec"])
def test_every_cell_appears_exactly_once_across_the_grids(split):
    run = cpu_example_run()
    seen = [g.at(r, c).cell_id for g in build_grids(run, split) for r in g.rows for c in g.cols if g.at(r, c)]
    assert sorted(seen) == sorted(c.cell_id for c in run.cells)

"""`boot-harness history` over twelve nights booted for real through the process runtime, by the fake vLLM server
(tests/fakes/fake_vllm.py) scripted per night through the matrix's `${VAR}`s: a vLLM version bump and a refusal from
night 8, a larger KV from night 4, a slower weight load from night 6, a cell added on night 5, and nights 3 and 7
booted as two shards merged by `boot-harness merge` (the shard runs lie beside the merged one, as artifacts do).
The nights are booted once for the module; every test reads them. Real vLLM and Chromium: test_history_real.py."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.builders import fake_matrix
from tests.cli import BOOT_HARNESS, boot_harness
from tests.helpers.env import ROOT
from tests.helpers.page import read_page

NIGHTS = 12
SLOW_FROM, FLIP_FROM, KV_FROM, NEW_FROM, MERGED = 6, 8, 4, 5, (3, 7)
# a step well above what a loaded CI machine adds to a night by itself (3 s was once found a night early)
WEIGHTS_S, SLOW_WEIGHTS_S = "0.05", "5.0"


def night_env(i: int) -> dict[str, str]:
    return {"NIGHT_VLLM": "0.33.1" if i >= FLIP_FROM else "0.33.0",
            "NIGHT_FLIP": "refuse" if i >= FLIP_FROM else "boot",
            "NIGHT_KV_GIB": "0.75" if i >= KV_FROM else "0.5",
            "NIGHT_WEIGHTS_S": SLOW_WEIGHTS_S if i >= SLOW_FROM else WEIGHTS_S}


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> tuple[Path, list[Path]]:
    base = tmp_path_factory.mktemp("history")
    common = {"FAKE_VLLM_VERSION": "${NIGHT_VLLM}", "FAKE_VLLM_KV_GIB": "${NIGHT_KV_GIB}",
              "FAKE_VLLM_WEIGHTS_S": "${NIGHT_WEIGHTS_S}", "FAKE_VLLM_DELAY": "0.1"}
    matrix = fake_matrix(base / "nightly.yaml", {"steady": {}, "flip": {"FAKE_VLLM_SCENARIO": "${NIGHT_FLIP}"},
                                                 "new": {}}, axis="case", env=common,
                    expect=[{"outcome": "booted"}])
    artifacts = base / "artifacts"
    merged: list[Path] = []
    for i in range(NIGHTS):
        select = [] if i >= NEW_FROM else ["--select", "case=steady|flip"]
        run = ["run", "--matrix", matrix, "--parallel", "3", *select]
        if i in MERGED:
            shards = []
            for s in (1, 2):
                out = artifacts / f"night{i:02d}-shard{s}"
                proc = boot_harness(*run, "--shard", f"{s}/2", "--results-dir", out, env=night_env(i))
                assert proc.returncode in (0, 1), proc.stderr
                [shard] = [p for p in out.iterdir() if (p / "results.json").exists()]
                shards.append(shard)
            proc = boot_harness("merge", *shards, "--out", artifacts / f"night{i:02d}-merged" / f"merged-{i:02d}",
                                env=night_env(i))
            assert proc.returncode == 0, proc.stderr
            merged.append(artifacts / f"night{i:02d}-merged" / f"merged-{i:02d}")
        else:
            proc = boot_harness(*run, "--results-dir", artifacts / f"night{i:02d}", env=night_env(i))
            assert proc.returncode in (0, 1), proc.stderr
    return artifacts, merged


@pytest.fixture(scope="module")
def told(nights, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    artifacts, _ = nights
    out = tmp_path_factory.mktemp("told")
    # the nights given in reverse: the order is when they started, never the arguments'
    dirs = sorted((p for p in artifacts.iterdir()), reverse=True)
    proc = boot_harness("history", *dirs, "--json", "--html", out / "history.html", "--markdown", out / "history.md")
    return proc, json.loads(proc.stdout or "{}"), out


def cell(doc: dict, cid: str) -> dict:
    return next(c for c in doc["cells"] if c["id"] == cid)


def test_every_night_is_read_in_the_order_it_started_and_merged_shards_count_once(told, nights):
    proc, doc, _ = told
    assert proc.returncode == 1, "case_flip missed its expectation in the latest night: " + proc.stderr
    ids = [r["id"] for r in doc["runs"]]
    assert len(ids) == NIGHTS and [ids[i] for i in MERGED] == [f"merged-{i:02d}" for i in MERGED]
    starts = [r["started_at"] for r in doc["runs"]]
    assert starts == sorted(starts)
    assert proc.stderr.count("is part of merged run merged-") == 4, proc.stderr


def test_since_and_what_changed_across_it(told):
    _, doc, _ = told
    flip = cell(doc, "case_flip")
    assert flip["outcomes"] == ["booted"] * FLIP_FROM + ["refused"] * (NIGHTS - FLIP_FROM)
    assert flip["since"] == doc["runs"][FLIP_FROM]["id"] and flip["before"] == doc["runs"][FLIP_FROM - 1]["id"]
    assert set(flip["changes"]) == {"vllm_version", "env"}, "the port each boot picks is no change"
    assert "vLLM 0.33.0 → 0.33.1" in flip["line"] and "FAKE_VLLM_SCENARIO=boot → refuse" in flip["line"]
    steady = cell(doc, "case_steady")
    assert steady["since"] == doc["runs"][0]["id"] and steady["changes"] == [], "a version bump is no verdict change"
    new = cell(doc, "case_new")
    assert new["outcomes"][:NEW_FROM] == [None] * NEW_FROM and new["since"] == doc["runs"][NEW_FROM]["id"]
    assert [m["id"] for m in doc["missed"]] == ["case_flip"]


def test_the_slower_weight_load_is_a_change_point_in_total_and_in_its_phase(told):
    _, doc, _ = told
    steps = {t["phase"]: t for t in cell(doc, "case_steady")["time_changes"]}
    assert set(steps) == {"total", "weight loading"}, steps
    for t in steps.values():
        assert t["run"] == doc["runs"][SLOW_FROM]["id"]
        assert t["after_s"] - t["before_s"] > 2.0
    assert cell(doc, "case_flip")["too_few"] == {"needed": 6, "got": NIGHTS - FLIP_FROM}, "4 refusals: too few"


def test_the_markdown_and_html_tell_the_same_nights(told):
    _, doc, out = told
    md = (out / "history.md").read_text()
    assert "`case_flip`" in md and "since " + doc["runs"][SLOW_FROM]["id"] in md
    html = (out / "history.html").read_text()
    assert html.count('class="night ') == 3 * NIGHTS and html.count('class="cp"') == 1
    assert 'class="night refused mismatched"' in html


def test_the_terminal_table_keeps_whole_ids_through_a_pipe(nights):
    artifacts, _ = nights
    # COLUMNS wide enough for every column: the since-run's id is read here too
    proc = subprocess.run(f"COLUMNS=400 {shlex.join(BOOT_HARNESS)} history {artifacts} --select case=flip | cat",
                          shell=True, capture_output=True, text=True, cwd=ROOT)
    assert "case_flip" in proc.stdout and "merged-07" in proc.stdout and "Traceback" not in proc.stderr
    assert proc.stdout.count("case_steady") == 0


def test_the_html_renders_in_chromium_with_a_row_per_cell_a_column_per_night_and_the_step(told, tmp_path):
    from tests.helpers.browser import REFUSED_BG, browse, chromium, has_pil, near
    from tests.helpers.env import require

    require("Pillow (with matplotlib)", has_pil(), "pip install -e '.[analysis]'")

    _, doc, out = told
    exe = chromium()
    proc = browse(exe, out / "history.html", tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = read_page(proc.stdout)
    assert set(page.rows) == {"case_steady", "case_flip", "case_new"}
    assert page.rows["case_flip"]["data-since"] == doc["runs"][FLIP_FROM]["id"]
    assert len(page.nights) == 3 * NIGHTS
    missed = [n for n in page.nights if "mismatched" in n["class"].split()]
    assert len(missed) == NIGHTS - FLIP_FROM and all("refused" in n["class"].split() for n in missed)
    assert [c["data-run"] for c in page.change_points] == [doc["runs"][SLOW_FROM]["id"]]
    shot = tmp_path / "shot.png"
    browse(exe, out / "history.html", tmp_path, f"--screenshot={shot}", "--window-size=1500,700")
    from PIL import Image

    colours = {c for _, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24)}
    assert near(colours, REFUSED_BG) and near(colours, (0xD5, 0x00, 0x00), 20), "outcome colours and the missed mark"

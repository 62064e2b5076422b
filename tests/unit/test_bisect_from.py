"""`bisect --from RUN`: the ends read from the nights that recorded them, on the FakeRuntime standing for an engine
whose images are builds `fork:v00`..`fork:v15` (each its own digest; from v09 on the cell refuses) and whose
`fork:nightly` tag moves night by night. Two real `run`s record the nights; boots are counted, never timed."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from harness.bisect.known import FromRuns, Wanted, unfit
from harness.bisect.runner import read_plan
from harness.cli import main
from harness.results.model import RunStatus
from harness.results.store import load_run
from harness.runtime.fake import FakeRuntime, Script
from harness.runtime.records import ContainerInfo
from harness.verdict import Outcome
from tests.builders import write_matrix

TAGS = [f"fork:v{i:02d}" for i in range(16)]
CELL = "c_a"
FIRST_BAD = 9


class ImageBuilds(FakeRuntime):
    """An engine of sixteen builds: a reference's digest is its build's; `nightly` is the build `fork:nightly` names."""

    def __init__(self, nightly: int = 0, **kw):
        super().__init__(**kw)
        self.nightly = nightly

    def build(self, ref: str) -> int:
        return self.nightly if ref == "fork:nightly" else TAGS.index(ref)

    def image_digest(self, ref: str) -> str | None:
        return f"sha256:{self.build(ref):02d}" + "ab" * 31

    def script_for(self, cell):
        with self._lock:
            self.started.append(cell.id)
        return Script.refused_kv() if self.build(cell.image) >= FIRST_BAD else Script.booted()

    def start(self, cell, ctx, on_line):
        server = super().start(cell, ctx, on_line)
        info = ContainerInfo(engine="fake", image=cell.image, image_digest=self.image_digest(cell.image))
        server.container_info = lambda: info  # type: ignore[method-assign]  # the fake server reports this image
        return server


def matrix(tmp: Path, **more) -> Path:
    return write_matrix(tmp / "m.yaml", {"name": "fk", "runtime": "docker", "image": "fork:nightly", "model": "m",
                                         "timeout_s": 10, "linger_s": 0.2, "axes": {"c": {"a": {}}},
                                         "expect": [{"outcome": "booted"}], **more})


def night(tmp: Path, build: int) -> None:
    assert main(["run", "--matrix", str(tmp / "m.yaml"), "--results-dir", str(tmp / "nights")],
                runtimes=lambda loaded: ImageBuilds(build)) in (0, 1)


def bisect(tmp: Path, runtime: FakeRuntime, *extra: str) -> tuple[int, dict]:
    out = io.StringIO()
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "stdout", out)
    try:
        code = main(["bisect", "--matrix", str(tmp / "m.yaml"), CELL, "--good", TAGS[0], "--bad", TAGS[-1],
                     "--refs", *TAGS, "--results-dir", str(tmp / "r"), "--json", *extra],
                    runtimes=lambda loaded: runtime)
    finally:
        mp.undo()
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else {}


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Two nights of the matrix: the last good one (fork:nightly was v00) and the first bad (v15)."""
    tmp = tmp_path_factory.mktemp("nights")
    matrix(tmp)
    night(tmp, 0)
    night(tmp, 15)
    return tmp


def test_ends_a_night_recorded_are_read_not_booted_and_the_answer_is_the_same(nights, capsys):
    runtime = ImageBuilds()
    code, a = bisect(nights, runtime, "--from", str(nights / "nights"))
    err = capsys.readouterr().err
    assert code == 0 and (a["first_bad"]["ref"], a["last_good"]["ref"]) == (TAGS[FIRST_BAD], TAGS[FIRST_BAD - 1])
    # 16 candidates: the ends from the nights, then ⌈log2 15⌉ = 4 boots of the middle, exactly these
    assert runtime.started == [f"{CELL}-b{i:02d}_v{i:02d}" for i in (7, 11, 9, 8)]
    assert (a["boots"], a["boots_recorded"]) == (4, 2)
    said = " ".join(err.split())
    assert "(good end): booted (ready) (meets the cell's expectation), recorded in" in said
    assert "(bad end): refused (kv_cache_too_small) (misses the cell's expectation), recorded in" in said
    d = Path(a["run_dir"])
    steps = read_plan(d)[1]["steps"]
    assert [s["read_from"][0] is not None for s in steps[:2]] == [True, True]
    assert all(s["read_from"] == [None] for s in steps[2:])
    # the run holds what it booted, and is any run to its readers
    assert sorted(p.stem for p in (d / "cells").glob("*.json")) == sorted(runtime.started)
    assert main(["check", str(d)]) == 0


def test_a_resumed_bisect_reads_the_ends_from_the_same_nights(nights, capsys):
    runtime = ImageBuilds()
    runtime.script_for = _stop_at(runtime, 2)
    code, _ = bisect(nights, runtime, "--from", str(nights / "nights"))
    assert code == 130
    [d] = [p for p in (nights / "r").iterdir() if read_plan(p)[1]["status"] == "interrupted"]
    again = ImageBuilds()
    code = main(["bisect", "--resume", str(d), "--json"], runtimes=lambda loaded: again)
    a = json.loads(capsys.readouterr().out)
    assert code == 0 and a["first_bad"]["ref"] == TAGS[FIRST_BAD]
    assert again.started == [f"{CELL}-b{i:02d}_v{i:02d}" for i in (11, 9, 8)]  # v07 was recorded before the stop
    assert (a["boots"], a["boots_recorded"]) == (3, 3)


def _stop_at(runtime: ImageBuilds, n: int):
    inner = runtime.script_for

    def script_for(cell):
        if len(runtime.started) + 1 == n:
            raise KeyboardInterrupt
        return inner(cell)
    return script_for


def test_a_record_stands_for_an_end_only_when_it_is_provably_the_same_boot(nights):
    runs = FromRuns([nights / "nights"], CELL)
    [bad, good] = runs.records  # newest first
    run, _ = load_run(good.run_dir)
    want = Wanted(CELL, run.matrix.sha256, run.harness_version, good.cell.container.image_digest)
    assert unfit(good, want) is None and unfit(bad, want) == "another image digest"

    def moved(r, run=None, cell=None):
        return type(r)(r.run_dir, r.run.model_copy(update=run or {}), r.cell.model_copy(update=cell or {}))

    assert unfit(moved(good, run={"status": RunStatus.interrupted}), want) == "its run is interrupted"
    assert unfit(moved(good, run={"harness_version": "0.0.1"}), want) == "another boot-harness (0.0.1)"
    assert unfit(moved(good, cell={"outcome": Outcome.error}), want).startswith("an error")
    assert unfit(moved(good, cell={"container": None}), want) == "no image digest"
    other = Wanted(CELL, "0" * 64, run.harness_version, want.digest)
    assert unfit(good, other) == "another matrix file (its sha256 differs)"
    fit, why = runs.find(Wanted(CELL, run.matrix.sha256, run.harness_version, "sha256:zz"), 1)
    assert fit == [] and why == "2 record(s) of c_a, none of this build: 2 of another image digest"


def test_an_end_no_night_booted_is_booted_and_the_line_says_why(tmp_path, capsys):
    matrix(tmp_path)
    night(tmp_path, 15)  # only the bad night: the good end is booted
    runtime = ImageBuilds()
    code, a = bisect(tmp_path, runtime, "--from", str(tmp_path / "nights"))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0 and a["first_bad"]["ref"] == TAGS[FIRST_BAD]
    assert runtime.started[0] == f"{CELL}-b00_v00" and len(runtime.started) == 5
    assert "--from: fork:v00: 1 record(s) of c_a, none of this build: another image digest; booting it" in err


@pytest.mark.parametrize("case,words", [
    ("process", "--from: a process build has no image digest"),
    ("time", "--from reads verdicts; --on time compares the boots of one bisect run"),
    ("empty", "holds no run (no results.json at or under it)"),
])
def test_from_where_it_cannot_prove_a_boot_is_one_line_exit_2(tmp_path, capsys, case, words):
    (tmp_path / "nights").mkdir()
    if case == "process":
        write_matrix(tmp_path / "m.yaml", {"name": "fk", "command": ["fake-vllm"], "model": "m",
                                           "axes": {"c": {"a": {}}}})
        refs = ["cmd:/opt/a/vllm serve", "cmd:/opt/b/vllm serve"]
    else:
        matrix(tmp_path)
        refs = TAGS[:2]
    extra = ["--on", "time"] if case == "time" else []
    code = main(["bisect", "--matrix", str(tmp_path / "m.yaml"), CELL, "--good", refs[0], "--bad", refs[1],
                 "--from", str(tmp_path / "nights"), "--results-dir", str(tmp_path / "r"), *extra],
                runtimes=lambda loaded: ImageBuilds())
    err = capsys.readouterr().err
    assert code == 2 and words in " ".join(err.split()) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()  # refused before any run directory was made

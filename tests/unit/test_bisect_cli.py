"""`boot-harness bisect` end to end, in-process on the FakeRuntime: sixteen process "builds" (`cmd:/opt/build-NN/vllm
serve`) whose verdict the fake decides by the build's number. Boots are counted (the fake's `started`), never timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bisect.candidates import BuildKind, ordered
from harness.bisect.oracle import On, Oracle
from harness.bisect.runner import BisectRunner, Plan, read_plan
from harness.cli import main
from harness.cli.tolerances import parse_time_tolerance
from harness.clock import FakeClock
from harness.errors import PatchMismatch, RuntimeUnavailable
from harness.runtime.fake import BOOT_LINES, FakeRuntime, Script
from tests.builders import write_matrix

REFS = [f"cmd:/opt/build-{i:02d}/vllm serve" for i in range(16)]
CELL = "c_a"


def build_of(cell) -> int:
    return int(Path(cell.command[0]).parent.name.split("-")[1])


class ByBuild(FakeRuntime):
    """Builds from `first_bad` on refuse; `gone` cannot be had; `unpatched` do not take the cell's patch;
    `stop_at`: the n-th start is a Ctrl-C."""

    def __init__(self, first_bad: int = 9, gone=(), unpatched=(), stop_at: int | None = None, **kw):
        super().__init__(**kw)
        self.first_bad, self.gone, self.unpatched, self.stop_at = first_bad, set(gone), set(unpatched), stop_at

    def preflight(self, cells, gpu_checks=True):
        super().preflight(cells, gpu_checks)
        for c in cells:
            if c.command and build_of(c) in self.gone:
                raise RuntimeUnavailable(f"command: {c.command[0]} is not an executable file")
            if c.command and build_of(c) in self.unpatched:
                raise PatchMismatch("m.yaml: patches: gpu_worker.py: the image's file has sha256 9f…, the matrix "
                                    "expects base_sha256 1c…")

    def script_for(self, cell):
        with self._lock:
            self.started.append(cell.id)
            if self.stop_at is not None and len(self.started) == self.stop_at:
                raise KeyboardInterrupt
        return Script.refused_kv() if build_of(cell) >= self.first_bad else Script.booted()


def matrix(tmp_path: Path) -> Path:
    return write_matrix(tmp_path / "m.yaml", {"name": "fk", "command": ["fake-vllm"], "model": "m", "timeout_s": 10,
                                              "linger_s": 0.2, "axes": {"c": {"a": {}}},
                                              "expect": [{"outcome": "booted"}]})


def bisect(tmp_path: Path, runtime: FakeRuntime, *extra: str, refs=REFS, good=REFS[0], bad=REFS[-1]) -> int:
    return main(["bisect", "--matrix", str(matrix(tmp_path)), CELL, "--good", good, "--bad", bad, "--refs", *refs,
                 "--results-dir", str(tmp_path / "r"), *extra], runtimes=lambda loaded: runtime)


def run_dir(tmp_path: Path) -> Path:
    [d] = [p for p in (tmp_path / "r").iterdir() if (p / "results.json").exists()]
    return d


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """One bisect shared by the cases that read it: first bad build-09, the answer as JSON."""
    tmp = tmp_path_factory.mktemp("bisect")
    runtime = ByBuild(9)
    capture = pytest.MonkeyPatch()
    import io
    import sys

    out = io.StringIO()
    capture.setattr(sys, "stdout", out)
    try:
        code = bisect(tmp, runtime, "--json")
    finally:
        capture.undo()
    return code, json.loads(out.getvalue()), runtime, run_dir(tmp)


def test_the_first_bad_build_is_found_in_four_boots_after_the_ends(found):
    code, a, runtime, _ = found
    assert code == 0 and a["status"] == "found"
    assert (a["first_bad"]["ref"], a["last_good"]["ref"]) == (REFS[9], REFS[8])
    assert (a["first_bad"]["verdict"], a["last_good"]["verdict"]) == ("refused (kv_cache_too_small)", "booted (ready)")
    assert len(runtime.started) == a["boots"] == 6 and runtime.started[:2] == [f"{CELL}-b00_build_00",
                                                                               f"{CELL}-b15_build_15"]
    changed = {c["what"]: (c["good"], c["bad"]) for c in a["changed"]}
    assert changed["command"] == (["/opt/build-08/vllm", "serve"], ["/opt/build-09/vllm", "serve"])
    assert changed["estimated max model len"] == (None, 3072)


def test_the_answer_is_valid_against_the_bisect_schema_in_json_and_in_bisect_json(found):
    """harness/schemas/bisect.output.schema.json describes what --json printed and bisect.json keeps."""
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "harness" / "schemas" / "bisect.output.schema.json")
                        .read_text(encoding="utf-8"))
    _, a, _, d = found
    kept = json.loads((d / "bisect.json").read_text())["answer"]
    assert kept == a
    assert [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(a)] == []
    assert not jsonschema.Draft202012Validator(schema).is_valid({**a, "status": "maybe"})


def test_every_boot_is_a_cell_record_of_one_run_that_report_history_check_and_facts_read(found, capsys):
    _, a, runtime, d = found
    run = json.loads((d / "results.json").read_text())
    assert run["status"] == "complete" and [c["cell_id"] for c in run["cells"]] == runtime.started
    rec = json.loads((d / "cells" / f"{CELL}-b09_build_09.json").read_text())
    assert rec["axes"] == {"c": "a", "candidate": "09_build_09"} and rec["reason"] == "kv_cache_too_small"
    plan, doc = read_plan(d)
    assert doc["status"] == "found" and doc["answer"]["first_bad"]["ref"] == REFS[9] and len(plan.candidates) == 16
    capsys.readouterr()
    assert main(["report", str(d)]) == 0
    assert f"{CELL}-b09_build_09" in capsys.readouterr().out
    assert main(["history", str(d), "--json"]) in (0, 1)
    assert f"{CELL}-b09_build_09" in capsys.readouterr().out
    assert main(["check", str(d)]) == 0  # candidates carry no expectation: measurements
    capsys.readouterr()
    assert main(["facts", str(d / "logs" / f"{CELL}-b09_build_09.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["refusal"]["kind"] == "kv_cache_too_small"


def test_an_interrupted_bisect_resumes_to_the_same_answer_booting_only_what_it_lacks(tmp_path, capsys):
    assert bisect(tmp_path, ByBuild(9, stop_at=4)) == 130  # Ctrl-C at the fourth boot
    d = run_dir(tmp_path)
    assert read_plan(d)[1]["status"] == "interrupted"
    assert len(list((d / "cells").glob("*.json"))) == 3
    assert "--resume" in capsys.readouterr().err
    again = ByBuild(9)
    assert main(["bisect", "--resume", str(d), "--json"], runtimes=lambda loaded: again) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["first_bad"]["ref"] == REFS[9] and (a["boots"], a["boots_recorded"]) == (3, 3)
    assert len(again.started) == 3


def test_a_resume_that_asks_another_question_is_one_line(tmp_path, capsys):
    assert bisect(tmp_path, ByBuild(9, stop_at=2)) == 130
    capsys.readouterr()
    code = main(["bisect", "--resume", str(run_dir(tmp_path)), "--on", "time"], runtimes=lambda loaded: ByBuild())
    err = capsys.readouterr().err
    assert code == 2 and "bisected another question (on \"verdict\" then, \"time\" now)" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("first_bad, words", [(0, "the good end cmd:/opt/build-00/vllm serve is not good: it gave "
                                                   "refused (kv_cache_too_small) (misses the cell's expectation)"),
                                              (16, "the bad end cmd:/opt/build-15/vllm serve is not bad: it gave "
                                                   "booted (ready) (meets the cell's expectation)")])
def test_ends_that_disagree_are_exit_2_with_what_each_gave(tmp_path, capsys, first_bad, words):
    runtime = ByBuild(first_bad)
    assert bisect(tmp_path, runtime) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("the ends disagree: ") and words in err[-1], err
    assert len(runtime.started) <= 2


def test_a_candidate_that_cannot_be_had_is_skipped_and_named(tmp_path, capsys):
    runtime = ByBuild(9, gone={7})
    assert bisect(tmp_path, runtime) == 0
    out = " ".join(capsys.readouterr().out.split())  # the answer's lines wrap at the width, at spaces
    assert f"first bad: {REFS[9]}" in out
    assert f"left out: {REFS[7]} — cannot be had: command: /opt/build-07/vllm is not an executable file" in out
    assert not any("b07" in c for c in runtime.started)


def test_skips_at_the_boundary_leave_a_range_and_exit_1(tmp_path, capsys):
    assert bisect(tmp_path, ByBuild(9, gone={8}), "--markdown", "-") == 1
    out = capsys.readouterr().out
    assert "**First bad:** one of `cmd:/opt/build-08/vllm serve`, `cmd:/opt/build-09/vllm serve`" in out
    assert "**Last good:** `cmd:/opt/build-07/vllm serve`" in out


@pytest.mark.parametrize("flag, code, words", [
    ("skip", 1, "first bad: one of cmd:/opt/build-05/vllm serve, cmd:/opt/build-06/vllm serve"),
    ("bad", 0, "first bad: cmd:/opt/build-05/vllm serve — the cell's patch does not fit it"),
    ("stop", 1, "the cell's patch does not fit it: m.yaml: patches: gpu_worker.py: the image's file has sha256"),
])
def test_a_patch_that_stops_fitting_is_its_own_finding(tmp_path, capsys, flag, code, words):
    runtime = ByBuild(9, unpatched=set(range(5, 15)))
    assert bisect(tmp_path, runtime, "--on-patch-fail", flag) == code
    got = capsys.readouterr()
    out = " ".join(got.out.split())  # the answer's lines wrap at the width, at spaces
    assert words in (got.err if flag == "stop" else out)
    if flag == "skip":  # builds 5 to 14 left out: the first bad is known only as the range they leave
        assert "left out: cmd:/opt/build-05/vllm serve — the cell's patch does not fit it" in out


def test_on_time_finds_a_three_second_step(tmp_path):
    """On one FakeClock: a build's scripted boot logs its 8 lines 0.1 s apart, from build 6 on 0.5 s apart (3.2 s
    more); the tolerance 25%,2s takes the step and not the watch's own polls."""
    clock = FakeClock()

    class Slower(FakeRuntime):
        def script_for(self, cell):
            with self._lock:
                self.started.append(cell.id)
            return Script.full_boot(line_delay_s=0.5 if build_of(cell) >= 6 else 0.1)

    from harness.matrix.load import load_matrix

    loaded = load_matrix(matrix(tmp_path))
    runtime = Slower(clock=clock)
    cands = ordered(REFS[:10], REFS[0], REFS[9], BuildKind.command)
    plan = Plan(str(loaded.path), CELL, cands, On.time, time_tolerance="25%,2s")
    oracle = Oracle(On.time, time_tolerance=parse_time_tolerance("25%,2s"))
    runner = BisectRunner(loaded, loaded.cells[0], plan, oracle, results_dir=tmp_path / "r", runtime=runtime,
                          say=lambda line: None, clock=clock)
    found = runner.run()
    assert (found.lo, found.hi, found.exact) == (5, 6, True)
    assert len(runtime.started) <= 2 + 4
    assert len(BOOT_LINES) == 9

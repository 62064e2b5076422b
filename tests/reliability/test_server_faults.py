"""Servers that misbehave, through `boot-harness run`: each fault gets its outcome and reason (the matrix expects
them, so the run exits 0 only if every one is right), is decided within its deadline, and leaves nothing running.

What tests/integration/test_process_runtime.py already shows cell by cell (crash shapes, refusal then hang, SIGTERM-deaf
at the deadline, garbage, a foreign server on the port) is run here again only as part of one nightly-like run per
runtime, where the point is the run: deadlines, teardown, exit code and no leftovers. New shapes: a server that dies
after its first /health 200, a refusal written in pieces whose last line has no newline, a deaf engine child at the
deadline, and log floods with the harness's RSS measured.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.reliability import (
    DOCKER_LOCK,
    background_result,
    cli,
    containers,
    fake_matrix,
    figure,
    in_background,
    kill_pids,
    live,
    marks,
    only_run,
    read_json,
    remove_containers,
    server_pids,
)
from tests.reliability.flood import flood_run

DEAF_ENGINE = {"FAKE_VLLM_IGNORE_TERM": "1", "FAKE_VLLM_CHILD": "1"}


@dataclass(frozen=True)
class Fault:
    case: str
    what: str
    env: dict
    outcome: str
    reason: str
    deaf: bool = False  # ignores SIGTERM: teardown waits out the runtime's grace, then SIGKILLs
    stopped: bool = False  # does not exit on its own: the harness ends it (a `term` mark shows it sent SIGTERM)
    decided_at_deadline: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def expect(self) -> dict:
        return {"where": {"case": self.case}, "outcome": self.outcome, "reason": self.reason}


FAULTS = [
    Fault("dies_after_health", "answers /health 200 once, then 503 and HTTP 500, and exits",
          {"FAKE_VLLM_SCENARIO": "dead_after_health"}, "crashed", "probe_failed"),
    Fault("probe_fails", "answers /health 200 but the one-token completion fails",
          {"FAKE_VLLM_SCENARIO": "probe_fail"}, "crashed", "probe_failed", stopped=True),
    Fault("refusal_then_hang", "prints the KV refusal, then hangs instead of exiting",
          {"FAKE_VLLM_SCENARIO": "refuse_hang"}, "refused", "kv_cache_too_small", stopped=True),
    Fault("refusal_then_hang_deaf", "prints the refusal, then hangs ignoring SIGTERM (engine child too)",
          {"FAKE_VLLM_SCENARIO": "refuse_hang", **DEAF_ENGINE}, "refused", "kv_cache_too_small", deaf=True,
          stopped=True),
    Fault("garbage", "writes NUL, invalid UTF-8 and ANSI junk, then boots", {"FAKE_VLLM_SCENARIO": "garbage"},
          "booted", "ready", stopped=True),
    Fault("partial_lines", "writes its refusal in pieces, the last line without a newline, and exits 1",
          {"FAKE_VLLM_SCENARIO": "partial"}, "refused", "kv_cache_too_small"),
    Fault("exit0_before_ready", "exits 0 before it is ready", {"FAKE_VLLM_SCENARIO": "exit0"}, "crashed",
          "exited_before_ready"),
    Fault("never_binds", "never binds its port", {"FAKE_VLLM_SCENARIO": "never_bind"}, "timeout", "deadline",
          decided_at_deadline=True, stopped=True),
    Fault("never_binds_deaf", "never binds, and ignores SIGTERM (vLLM mid-start-up, engine child too)",
          {"FAKE_VLLM_SCENARIO": "never_bind", **DEAF_ENGINE}, "timeout", "deadline", deaf=True,
          decided_at_deadline=True, stopped=True),
]
FAST = [f for f in FAULTS if not f.decided_at_deadline]
SLOW = [f for f in FAULTS if f.decided_at_deadline]
TIMEOUT_FAST_S, TIMEOUT_SLOW_S, LINGER_S = 10.0, 4.0, 2.0
DOCKER_FAULTS = ["dies_after_health", "refusal_then_hang", "garbage", "exit0_before_ready", "never_binds_deaf"]
#: Docker loses a last line without its newline in ~90 % of runs, not all (a race inside the engine): three such cells,
#: with no expectation in the run (its exit code is about the others), and one test over the three.
PARTIAL_IN_DOCKER = ["partial_lines", "partial_lines_2", "partial_lines_3"]


def _fault_run(base: Path, faults: list[Fault], timeout_s: float, runtime: str = "process") -> dict:
    marks = base / "marks"
    cases = {}
    for f in faults:
        (marks / f.case).mkdir(parents=True)
        mark_dir = str(marks / f.case) if runtime == "process" else f"/marks/{f.case}"
        cases[f.case] = {**f.env, "FAKE_VLLM_MARKS": mark_dir, "FAKE_VLLM_DELAY": "0.2"}
    extra = [] if runtime == "process" else [{"source": str(marks), "target": "/marks", "read_only": False}]
    matrix = fake_matrix(base / "m.yaml", cases, runtime=runtime, extra_mounts=extra, timeout_s=timeout_s,
                         linger_s=LINGER_S,
                         expect=[f.expect for f in faults
                                 if not (runtime != "process" and f.case in PARTIAL_IN_DOCKER)])
    proc = cli("run", "--matrix", str(matrix), "--results-dir", str(base / "r"), timeout=300)
    run_dir = only_run(base / "r")
    pids = set()
    for f in faults:
        pids |= server_pids(marks / f.case)
    left = sorted(p for p in pids if live(p)) if runtime == "process" else containers(label="boot-harness.run",
                                                                                         value=run_dir.name)
    kill_pids(pids) if runtime == "process" else remove_containers(left)
    run = read_json(run_dir / "results.json")
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "left": left, "run_dir": run_dir, "marks": marks,
            "cells": {c["axes"]["case"]: c for c in run["cells"]}, "timeout_s": timeout_s}


@pytest.fixture(scope="module")
def process_faults(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("faults")
    with ThreadPoolExecutor(2) as pool:
        fast = pool.submit(_fault_run, base / "fast", FAST, TIMEOUT_FAST_S)
        slow = pool.submit(_fault_run, base / "slow", SLOW, TIMEOUT_SLOW_S)
        return {"fast": fast.result(), "slow": slow.result()}


@in_background("docker_faults", "test_server_faults.py", needs_docker=True)
def _docker_faults(tmp_path_factory) -> dict:
    with DOCKER_LOCK:
        return _fault_run(tmp_path_factory.mktemp("faults-docker"),
                          [f for f in FAULTS if f.case in DOCKER_FAULTS] + _partials(), 5.0, runtime="docker")


@pytest.fixture(scope="module")
def docker_faults(docker_image, tmp_path_factory) -> dict:
    return background_result("docker_faults", tmp_path_factory)


def _partials() -> list[Fault]:
    (partial,) = [f for f in FAULTS if f.case == "partial_lines"]
    return [dataclasses.replace(partial, case=case) for case in PARTIAL_IN_DOCKER]


def _check_fault(f: Fault, run: dict, runtime: str) -> None:
    cell = run["cells"][f.case]
    t = cell["timings"]
    assert (cell["outcome"], cell["reason"]) == (f.outcome, f.reason), cell["detail"]
    # Which event decided is asserted (the reason names it), not how fast this (loaded, shared) machine got there: the
    # deadline decides only at or after itself. How the teardown ended the server is read from what the server got,
    # not from its time (a figure, below and in docs/reliability.md; a hung teardown is the run's 300 s guard's):
    # SIGTERM first, and a deaf server SIGKILLed after the grace, not waited for.
    if f.decided_at_deadline:
        assert run["timeout_s"] <= t["verdict_s"], t
    # The record says how the stop ended the server (harness.runtime.records.ServerStop); the fake server's `term`
    # marks stay the witness that SIGTERM reached it.
    stop = cell["stop"]
    termed = marks(run["marks"] / f.case, "term")
    if f.stopped:
        assert termed, f"{f.case}: the harness never sent its server SIGTERM"
        want = ("killed", -9 if runtime == "process" else 137) if f.deaf else \
            ("terminated", -15 if runtime == "process" else 143)
        assert (stop["how"], stop["exit_code"]) == want, f"{f.case}: {stop}"
        assert stop["gone_s"] is not None and (not f.deaf or stop["gone_s"] >= stop["grace_s"]), stop
    else:  # it exits on its own, mostly before the stop; if the stop came first, SIGTERM reached it
        assert stop["how"] == ("terminated" if termed else "exited"), f"{f.case}: {stop}, SIGTERM got: {termed}"
    assert stop["left"] == 0 and stop["note"] is None, stop
    if f.deaf and runtime == "process":  # a container's init passes SIGTERM on to its server only
        assert len(termed) == 2, f"{f.case}: SIGTERM reached {termed}, not the server and its engine child"
    if f.stopped and runtime == "process":
        assert cell["exit_code"] == stop["exit_code"], cell["exit_code"]
    figure(f"fault '{f.case}' ({runtime}): outcome, verdict_s, total_s",
           f"{cell['outcome']}/{cell['reason']} {t['verdict_s']:.2f} {t['total_s']:.2f}")


@pytest.mark.parametrize("f", FAULTS, ids=[f.case for f in FAULTS])
def test_process_fault_outcome_and_deadline(f: Fault, process_faults):
    _check_fault(f, process_faults["slow" if f.decided_at_deadline else "fast"], "process")


def test_process_fault_runs_exit_0_and_leave_nothing(process_faults):
    for run in process_faults.values():
        assert run["rc"] == 0, run["out"][-3000:]
        assert run["left"] == [], "a server outlived its run"
        assert not list(run["run_dir"].glob("active/*.json")) and not list(run["run_dir"].glob("work/*"))


@pytest.mark.docker
@pytest.mark.parametrize("f", [f for f in FAULTS if f.case in DOCKER_FAULTS], ids=DOCKER_FAULTS)
def test_container_fault_outcome_and_deadline(f: Fault, docker_faults):
    _check_fault(f, docker_faults, "docker")


@pytest.mark.docker
def test_container_partial_last_lines_are_refused_like_the_process_runtimes(docker_faults):
    got = {case: (docker_faults["cells"][case]["outcome"], docker_faults["cells"][case]["reason"])
           for case in PARTIAL_IN_DOCKER}
    assert set(got.values()) == {("refused", "kv_cache_too_small")}, got
    for f in _partials():
        _check_fault(f, docker_faults, "docker")


@pytest.mark.docker
def test_container_fault_run_exits_0_and_leaves_nothing(docker_faults):
    assert docker_faults["rc"] == 0, docker_faults["out"][-3000:]
    assert docker_faults["left"] == []


def test_a_server_that_exits_right_after_its_first_200_is_a_crash_not_a_stale_server(tmp_path):
    matrix = fake_matrix(tmp_path / "m.yaml", {"exits": {"FAKE_VLLM_SCENARIO": "exit_after_health"}},
                         expect=[{"where": {"case": "exits"}, "outcome": "crashed", "reason": "exited"}])
    proc = cli("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"))
    cell = read_json(only_run(tmp_path / "r") / "results.json")["cells"][0]
    assert (cell["outcome"], cell["reason"]) == ("crashed", "exited"), cell["detail"]
    assert proc.returncode == 0


# ---------------------------------------------------------------------------------------------------- log floods

FLOOD_MB = 200
RSS_LIMIT_MB = 150
#: Before 5e29d06 the reader's queue was unbounded and the growth depended on how much CPU the watch loop got (2-63 MB
#: seen); bounded at 4096 lines it is ~5 MB for these mostly short lines, and 16 Mi characters with the fix (~25 MB).
RSS_GROWTH_MB = 100


@pytest.fixture(scope="module")
def rss_baseline(tmp_path_factory) -> dict:
    return flood_run(0, "boot", 0, "process", tmp_path_factory.mktemp("flood-baseline"), 60)


def test_a_200_mb_log_flood_while_booting_keeps_the_harness_memory_flat(rss_baseline, tmp_path):
    got = flood_run(FLOOD_MB, "boot", 0, "process", tmp_path, 300)
    growth = got["peak_rss_mb"] - rss_baseline["peak_rss_mb"]
    figure(f"peak RSS, {FLOOD_MB} MB flood while booting (baseline {rss_baseline['peak_rss_mb']:.0f} MB), MB",
           round(got["peak_rss_mb"], 1))
    figure("log recorded during a flood, MB/s", round(got["written_mb"] / got["wall_s"], 1))
    assert got["outcome"] == "booted/ready" and got["rc"] == 0
    assert got["written_mb"] >= FLOOD_MB, "every line went through the harness"
    assert got["log_mb"] <= 64.01, "the saved log is held to its cap (log_max_mb: 64 by default)"
    assert got["peak_rss_mb"] <= RSS_LIMIT_MB and growth <= RSS_GROWTH_MB, got


def test_a_log_flood_while_the_harness_is_in_the_probe_keeps_its_memory_flat(rss_baseline, tmp_path):
    got = flood_run(100, "ready", 3, "process", tmp_path, 300)
    figure("peak RSS, 100 MB flood during a 3 s probe, MB", round(got["peak_rss_mb"], 1))
    assert got["outcome"] == "booted/ready"
    assert got["peak_rss_mb"] <= RSS_LIMIT_MB, got
    assert got["peak_rss_mb"] - rss_baseline["peak_rss_mb"] <= RSS_GROWTH_MB, got


def test_a_flood_of_long_lines_while_the_harness_is_in_the_probe_keeps_its_memory_flat(rss_baseline, tmp_path):
    got = flood_run(200, "ready", 3, "process", tmp_path, 300, FAKE_VLLM_FLOOD_LINE_KB="60")
    figure("peak RSS, 200 MB of 60 KiB lines during a 3 s probe, MB", round(got["peak_rss_mb"], 1))
    assert got["outcome"] == "booted/ready"
    assert got["peak_rss_mb"] <= RSS_LIMIT_MB, got


def test_a_server_that_logs_while_it_answers_the_probe_is_booted(tmp_path):
    got = flood_run(50, "ready", 1, "process", tmp_path, 6, FAKE_VLLM_LOG_REQUESTS="1")
    assert got["outcome"] == "booted/ready", got["detail"]

"""Killing the harness mid-boot, on fake servers: every signal × every phase × a server that does or does not ignore
SIGTERM, through the real command line.

Each scenario is a three-cell run: `a` boots, `b` refuses, then `victim` (a server with an engine-core child in its
process group, like vLLM) is caught in one phase and the harness gets the signal (with `--parallel 2`, two victims at
once, owned by the scheduler's worker threads):

- `spawned`:  the server process exists, it has not printed or bound anything yet;
- `starting`: it is "loading the engine" (its child runs), nothing bound;
- `ready`:    /health said 200 and the harness is in the one-token probe (the completion takes 60 s).

SIGINT/SIGTERM: within 5 s no server of ours is alive, the harness exits 130 (it may trail while a zombie waits to be
reaped: bug 2 in docs/reliability.md; both times are figures there), and the run directory is valid, marked
`interrupted`, and holds every finished cell (`a` and `b`; `a` alone in docker). SIGKILL: what the kernel leaves (the
process runtime's PDEATHSIG kills the server's leader but not its children; a container keeps running) is removed by
`boot-harness gc` or by the next `run`, and `--resume` boots only the victims, leaving the finished cells untouched.

The real-vLLM versions of this (one SIGTERM and one SIGKILL → gc → --resume per runtime) are in test_kills_real.py.
What tests/integration already covers, and this does not repeat: SIGINT of a real vLLM process mid-start-up
(test_vllm_cpu.py::test_ctrl_c_of_a_running_harness_leaves_no_process_and_a_valid_run) and SIGINT of a real container
run (test_containers.py::test_ctrl_c_of_a_container_run_leaves_no_container).
"""

from __future__ import annotations

import signal
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.reliability import (
    DOCKER_LOCK,
    Harness,
    background_result,
    check_run_dir,
    cli,
    containers,
    fake_matrix,
    figure,
    group_members,
    in_background,
    kill_pids,
    live,
    marks,
    read_json,
    remove_containers,
    run_dirs,
    wait_for,
)

#: A guard against a hung teardown, not a speed claim (the victims' deadline, 120 s, is a verdict the run would show).
HUNG_AFTER_S = 300
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "SIGKILL": signal.SIGKILL}


@dataclass(frozen=True)
class Kill:
    runtime: str  # process | docker
    sig: str
    phase: str
    deaf: bool  # the server (and its child) ignore SIGTERM
    clean_by: str = "gc"  # after SIGKILL: `gc`, or the next `run` (the --resume itself)
    parallel: int = 1  # `run --parallel N`: N victims caught in the phase at once, by the scheduler's workers

    @property
    def id(self) -> str:
        return (f"{self.runtime}-{self.sig}-{self.phase}-{'deaf' if self.deaf else 'plain'}"
                + (f"-{self.clean_by}" if self.sig == "SIGKILL" else "")
                + (f"-parallel{self.parallel}" if self.parallel > 1 else ""))

    @property
    def victims(self) -> list[str]:
        return ["victim"] + [f"victim{i}" for i in range(2, self.parallel + 1)]


def _cases(k: Kill, mark_root: str) -> dict[str, dict[str, str]]:
    def env(case: str, **more: str) -> dict[str, str]:
        return {"FAKE_VLLM_MARKS": f"{mark_root}/{case}", "FAKE_VLLM_DELAY": "0.1", **more}

    before = {"a": env("a", FAKE_VLLM_SCENARIO="boot")}
    if k.runtime == "process":  # a container costs a second or two more: one finished cell is enough there
        before["b"] = env("b", FAKE_VLLM_SCENARIO="refuse")
    # ${...}: the resume must use the same matrix bytes, but the victims must not hang the second time
    victims = {v: env(v, FAKE_VLLM_SCENARIO="boot", FAKE_VLLM_CHILD="1", FAKE_VLLM_IGNORE_TERM="1" if k.deaf else "0",
                      FAKE_VLLM_DELAY="${VICTIM_DELAY:-0.1}", FAKE_VLLM_PROBE_DELAY="${VICTIM_PROBE_DELAY:-0}")
               for v in k.victims}
    return {**before, **victims}


class Leftovers:
    """What of a run's servers is still alive: host processes (process runtime) or containers (docker)."""

    def __init__(self, k: Kill, base: Path, harness_pid: int):
        self.k, self.base, self.harness_pid = k, base, harness_pid
        self.pids: set[int] = set()

    def note_pids(self, results: Path) -> None:
        if self.k.runtime != "process":
            return
        for d in (self.base / "marks").iterdir():
            self.pids |= set(marks(d, "*"))
        for rec in results.glob("*/active/*.json"):
            try:
                self.pids |= set(group_members(read_json(rec)["pgid"]))
            except (OSError, ValueError, KeyError):
                pass

    def alive(self) -> list:
        if self.k.runtime == "process":
            return sorted(p for p in self.pids if live(p))
        return containers(value=str(self.harness_pid))

    def reap(self) -> None:
        if self.k.runtime == "process":
            kill_pids(self.pids)
        else:
            remove_containers(containers(value=str(self.harness_pid)))


PHASE_WITHIN_S = 120  # generous: a phase missed here is a stuck harness (its stacks go into the error), not a slow one


def _wait_phase(k: Kill, h: Harness, results: Path, mark_root: Path) -> None:
    def running() -> bool:
        assert h.proc.poll() is None, f"the harness exited early:\n{h.output[-3000:]}"
        return True

    for victim in k.victims:
        if k.phase == "spawned":
            if k.runtime == "process":
                wait_for("the victim's process record", lambda victim=victim: running() and list(
                    results.glob(f"*/active/case_{victim}.json")), PHASE_WITHIN_S, every=0.005)
            else:
                wait_for("the victim's container", lambda victim=victim: running() and any(
                    n.endswith(f"case_{victim}") for n in containers(value=str(h.pid))), PHASE_WITHIN_S, every=0.05)
        elif k.phase == "starting":
            wait_for("the victim's engine child",
                     lambda victim=victim: running() and marks(mark_root / victim, "child"),
                     PHASE_WITHIN_S)
        else:
            wait_for("the victim's probe", lambda victim=victim: running() and marks(mark_root / victim, "probe"),
                     PHASE_WITHIN_S)


def _scratch(run_dir: Path) -> list[str]:
    """The cells' work dirs in the run directory, and the TMPDIRs their `tmp` links point to, that exist."""
    found = []
    for work in sorted(run_dir.glob("work/*")):
        found.append(str(work))
        if (work / "tmp").is_symlink() and (work / "tmp").resolve().exists():
            found.append(str((work / "tmp").resolve()))
    return found


def run_kill(k: Kill, base: Path) -> dict:
    """One scenario, start to finish; returns what was observed (the tests below assert on it)."""
    obs: dict = {"id": k.id}
    base.mkdir(parents=True, exist_ok=True)
    results = base / "results"
    for case in ("a", "b", *k.victims):
        (base / "marks" / case).mkdir(parents=True)
    parallel = ["--parallel", str(k.parallel)] if k.parallel > 1 else []
    if k.runtime == "process":
        matrix = fake_matrix(base / "m.yaml", _cases(k, str(base / "marks")), timeout_s=120, linger_s=1)
    else:
        matrix = fake_matrix(base / "m.yaml", _cases(k, "/marks"), runtime=k.runtime, timeout_s=120, linger_s=1,
                             extra_mounts=[{"source": str(base / "marks"), "target": "/marks", "read_only": False}])
    slow = {"VICTIM_DELAY": "60" if k.phase in ("spawned", "starting") else "0.1",
            "VICTIM_PROBE_DELAY": "60" if k.phase == "ready" else "0"}
    h = Harness("run", "--matrix", str(matrix), "--results-dir", str(results), *parallel, env=slow,
                log=base / "run1.out")
    left = Leftovers(k, base, h.pid)
    try:
        _wait_phase(k, h, results, base / "marks")
        if k.sig == "SIGKILL" and k.phase != "spawned":
            # the log reaches its file at the loop's next quiet slice (0.1 s): then a SIGKILL loses none
            time.sleep(0.5)
        left.note_pids(results)
        t0 = h.signal(SIGNALS[k.sig])
        if k.sig != "SIGKILL":
            # Two figures: until no server of ours is alive (what holds a GPU), and until the harness has exited.
            # Not bounds: that the servers were stopped, not waited for, is in the run (no verdict for a victim,
            # whose deadline is 120 s away) and the victims' `term` marks; 300 s is only a guard against a hang.
            servers_s = exit_s = None
            while servers_s is None or exit_s is None:
                assert time.monotonic() - t0 < HUNG_AFTER_S, f"hung: still not clean {HUNG_AFTER_S} s after {k.sig}"
                left.note_pids(results)
                if servers_s is None and not left.alive():
                    servers_s = time.monotonic() - t0
                if exit_s is None and h.proc.poll() is not None:
                    exit_s = time.monotonic() - t0
                time.sleep(0.01)
            obs["servers_gone_s"], obs["exit_s"] = servers_s, exit_s
        rc = h.wait(60)
        obs["rc"] = rc
        obs["output"] = h.output[-6000:]
        (run_dir,) = run_dirs(results)
        obs["run_dir"] = run_dir
        if k.sig != "SIGKILL":
            obs["run"] = check_run_dir(run_dir)
            obs["active"] = [p.name for p in run_dir.glob("active/*.json")]
            obs["work"] = [p.name for p in run_dir.glob("work/*")]
            obs["termed"] = {v: marks(base / "marks" / v, "term") for v in k.victims}
        else:
            time.sleep(0.5)  # the kernel's PDEATHSIG, and the leader's exit, are not instantaneous
            left.note_pids(results)
            obs["left_after_kill"] = left.alive()
            obs["run"] = check_run_dir(run_dir, killed=True)
            obs["active"] = [p.name for p in run_dir.glob("active/*.json")]
            obs["scratch_after_kill"] = _scratch(run_dir)
            obs["victim_logs"] = {v: (run_dir / "logs" / f"case_{v}.log").read_text(errors="replace")
                                  for v in k.victims if (run_dir / "logs" / f"case_{v}.log").exists()}
            if k.clean_by == "gc":
                # the process runtime's gc: process groups only (--engine podman: not this host's docker
                # containers, whose dead owners' leftovers a concurrent container test is counting)
                gc = cli("gc", "--results-dir", str(results), "--engine",
                         k.runtime if k.runtime != "process" else "podman")
                obs["gc"] = gc.stdout + gc.stderr
                obs["gc_rc"] = gc.returncode
                obs["left_after_gc"] = left.alive()
                obs["scratch_after_gc"] = _scratch(run_dir)
        if k.sig == "SIGKILL":  # (--resume after an interrupt is the same code path, and tests/unit covers it)
            before = {p.name: p.read_text() for p in (run_dir / "cells").glob("*.json")}
            resume = cli("run", "--matrix", str(matrix), "--resume", str(run_dir), *parallel,
                         env={"VICTIM_DELAY": "0.1", "VICTIM_PROBE_DELAY": "0"}, timeout=120)
            obs["resume_rc"], obs["resume_out"] = resume.returncode, (resume.stdout + resume.stderr)[-3000:]
            obs["resumed"] = check_run_dir(run_dir)
            obs["scratch_after_resume"] = _scratch(run_dir)
            obs["kept_unchanged"] = all((run_dir / "cells" / n).read_text() == t for n, t in before.items())
        wait_for("nothing of ours alive at the end", lambda: not left.alive(), 15)
        obs["left_at_end"] = left.alive()
    except BaseException as exc:  # noqa: BLE001 - reported by the test of this scenario
        output = h.output[-6000:]
        stacks = h.stacks()  # a harness still running when the scenario gave up: what is it waiting for?
        obs["error"] = (f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()
                        + "\n--- harness output ---\n" + output
                        + (f"\n--- the harness's threads (SIGUSR2) ---\n{stacks}" if stacks else ""))
    finally:
        h.kill()
        left.reap()
    return obs


# The process runtime: every signal in every phase, each with a server that does, and one that does not, ignore
# SIGTERM — less the pairs that are the same scenario (a server just spawned has not had time to turn SIGTERM off, and
# a SIGINT and a SIGTERM take one path through the harness, so each deaf/plain pair is split between them).
PROCESS = [
    Kill("process", "SIGINT", "spawned", False), Kill("process", "SIGTERM", "spawned", False),
    Kill("process", "SIGINT", "starting", False), Kill("process", "SIGTERM", "starting", True),
    Kill("process", "SIGINT", "ready", True), Kill("process", "SIGTERM", "ready", False),
    Kill("process", "SIGKILL", "spawned", False, "gc"),
    Kill("process", "SIGKILL", "starting", False, "gc"), Kill("process", "SIGKILL", "starting", True, "run"),
    Kill("process", "SIGKILL", "ready", False, "run"), Kill("process", "SIGKILL", "ready", True, "gc"),
    # `run --parallel 2`: the scheduler's main thread stops the servers its workers own.
    Kill("process", "SIGINT", "starting", True, parallel=2), Kill("process", "SIGTERM", "ready", False, parallel=2),
    Kill("process", "SIGKILL", "starting", False, "run", parallel=2),
    # SIGHUP: the ssh session or the CI step that started the run is cut off — the same stop as SIGTERM, exit 130
    Kill("process", "SIGHUP", "starting", True), Kill("process", "SIGHUP", "ready", False),
]
# Containers: each start costs a second more, and every `run` of a container matrix sweeps dead owners' containers
# host-wide, so the SIGKILL scenarios (which count what a dead owner left) go one at a time, under DOCKER_LOCK.
DOCKER_TERM = [Kill("docker", "SIGINT", "starting", False), Kill("docker", "SIGTERM", "starting", True),
               Kill("docker", "SIGINT", "ready", True), Kill("docker", "SIGTERM", "spawned", False)]
DOCKER_KILL = [Kill("docker", "SIGKILL", "starting", True, "gc"), Kill("docker", "SIGKILL", "ready", False, "run")]


def _docker_param(k: Kill):
    return pytest.param(k, id=k.id)


@pytest.fixture(scope="module")
def process_kills(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("kills-process")
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda k: run_kill(k, base / k.id), PROCESS))
    return {o["id"]: o for o in got}


@in_background("docker_kills", "test_kills.py", needs_docker=True)
def _docker_kills(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("kills-docker")
    with DOCKER_LOCK:
        with ThreadPoolExecutor(max_workers=2) as pool:
            got = list(pool.map(lambda k: run_kill(k, base / k.id), DOCKER_TERM))
        got += [run_kill(k, base / k.id) for k in DOCKER_KILL]
    return {o["id"]: o for o in got}


@pytest.fixture(scope="module")
def docker_kills(docker_image, tmp_path_factory) -> dict[str, dict]:
    return background_result("docker_kills", tmp_path_factory)


def check(k: Kill, obs: dict) -> None:
    assert "error" not in obs, obs["error"]
    run = obs["run"]
    finished = ["case_a", "case_b"] if k.runtime == "process" else ["case_a"]
    figure(f"finished cells lost to a {k.sig} ({k.runtime})", len(finished) - len(run["cells"]))
    assert [c["cell_id"] for c in run["cells"]] == finished, "the finished cells are kept"
    assert [c["outcome"] for c in run["cells"]] == ["booted", "refused"][: len(finished)]
    if k.sig == "SIGKILL":
        assert obs["rc"] == -signal.SIGKILL
        assert run["status"] == "running"
        figure(f"leftovers after SIGKILL ({k.runtime})", len(obs["left_after_kill"]))
        if k.phase != "spawned":  # what a server said before the harness died is in its log, not lost in a buffer
            for v in k.victims:
                assert "engine core pid=" in obs["victim_logs"].get(v, ""), obs["victim_logs"]
        # what the teardown that SIGKILL skips would have removed: the victims' scratch (and, process, its TMPDIR)
        assert obs["scratch_after_kill"], "SIGKILL left the victims' work dirs"
        if k.clean_by == "gc":
            assert obs["gc_rc"] == 0, obs["gc"]
            assert obs["left_after_gc"] == [], f"gc left {obs['left_after_gc']}: {obs['gc']}"
            assert obs["scratch_after_gc"] == [], f"gc left {obs['scratch_after_gc']}: {obs['gc']}"
            # the victims' scratch, and the run's compile cache beside it (harness.runtime.compile_cache)
            assert f"{len(k.victims) + 1} work dir(s) removed" in obs["gc"], obs["gc"]
            assert "removed the run's compile cache" in obs["gc"] and "compile-cache" in obs["gc"], obs["gc"]
        if obs["left_after_kill"] and k.clean_by == "run":
            assert "gc: removed" in obs["resume_out"], obs["resume_out"]
    else:
        assert obs["rc"] == 130, obs["output"]
        assert run["status"] == "interrupted"
        assert obs["active"] == [] and obs["work"] == [], "process records and work dirs are removed"
        what = f"{k.sig} ({k.runtime}{', deaf server' if k.deaf else ''}{', --parallel 2' if k.parallel > 1 else ''})"
        figure(f"servers gone after {what}, s", round(obs["servers_gone_s"], 3))
        figure(f"harness exited after {what}, s", round(obs["exit_s"], 3))
        # Stopped, not waited for: no victim has a verdict (above: only the finished cells), and each victim past its
        # first instant (its SIGTERM handler set) got the harness's SIGTERM, its engine child too; a deaf one is gone
        # all the same (the servers_gone figure exists), so it was SIGKILLed after the grace.
        if k.runtime == "process" and k.phase != "spawned":
            for v, termed in obs["termed"].items():
                assert len(termed) == 2, f"{v}: SIGTERM reached {termed}, not the server and its engine child"
    assert obs["left_at_end"] == []
    if k.sig == "SIGKILL":
        resumed = obs["resumed"]
        assert obs["resume_rc"] == 0, obs["resume_out"]
        assert resumed["status"] == "complete"
        assert [c["cell_id"] for c in resumed["cells"]] == [*finished, *(f"case_{v}" for v in k.victims)]
        assert all(c["outcome"] == "booted" for c in resumed["cells"][len(finished):]), resumed["cells"]
        assert obs["kept_unchanged"], "--resume rewrote a cell it had already"
        assert obs["scratch_after_resume"] == [], "the dead run's scratch outlived the resumed run"


@pytest.mark.parametrize("k", PROCESS, ids=[k.id for k in PROCESS])
def test_process_runtime_survives_a_kill(k: Kill, process_kills):
    check(k, process_kills[k.id])


@pytest.mark.docker
@pytest.mark.parametrize("k", [_docker_param(k) for k in DOCKER_TERM + DOCKER_KILL])
def test_container_runtime_survives_a_kill(k: Kill, docker_kills):
    check(k, docker_kills[k.id])

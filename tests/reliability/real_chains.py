"""The real-vLLM kill chains of test_kills_real.py. They run in the background from the start of the reliability
suite (conftest.py), while the fake-server tests use the other core, and the tests at its end check what they saw.

One chain of three harness runs per runtime shares the boots:

1. `run` until vLLM's engine core is up, then SIGKILL the harness. What the kernel leaves: the process runtime's
   PDEATHSIG kills the API server, not necessarily its engine core; a container keeps running.
2. The leftovers are removed by their records: `boot-harness gc` (process runtime) or the next run's own sweep
   (container runtime, through step 3's `run --resume`).
3. `run --resume` until the engine core is up again, then SIGTERM: exit 130 with nothing left, timed.
4. `run --resume` again: the cell boots, the run is `complete`.

SIGINT of a real server mid-start-up is already covered by tests/integration (test_vllm_cpu.py, test_containers.py).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.helpers.env import ROOT, docker_env, vllm_cpu_env
from tests.helpers.reliability import (
    Harness,
    check_run_dir,
    cli,
    containers,
    group_members,
    kill_pids,
    only_run,
    read_json,
    remove_containers,
    wait_for,
)

CPU_EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
CONTAINER_EXAMPLE = ROOT / "examples" / "cpu-container.yaml"
PROCESS_CELL = "mml2048-spec_off-kv_tight"
CONTAINER_CELL = "image_unpatched-spec_off-floor_none"


class ProcessChain:
    runtime = "process"
    matrix, cell = CPU_EXAMPLE, PROCESS_CELL

    def __init__(self, results: Path):
        self.results = results
        self.pgids: set[int] = set()

    def wait_engine(self, h: Harness) -> None:
        """The engine core is a second process in the server's group."""
        def up():
            assert h.proc.poll() is None, h.output[-3000:]
            for rec in self.results.glob(f"*/active/{self.cell}.json"):
                pgid = read_json(rec)["pgid"]
                self.pgids.add(pgid)
                if len(group_members(pgid)) >= 2:
                    return True
            return False

        wait_for("vLLM's engine core", up, 180, every=0.1)

    def alive(self, owner: int | None = None) -> list:
        return sorted(p for g in self.pgids for p in group_members(g))

    def reap(self) -> None:
        kill_pids(self.alive())


class ContainerChain:
    runtime = "docker"
    matrix, cell = CONTAINER_EXAMPLE, CONTAINER_CELL

    def __init__(self, results: Path):
        self.results = results

    def wait_engine(self, h: Harness) -> None:
        import docker

        client = docker.from_env()

        def up():
            assert h.proc.poll() is None, h.output[-3000:]
            for name in containers(value=str(h.pid)):
                try:
                    procs = client.containers.get(name).top().get("Processes") or []
                except Exception:  # noqa: BLE001 - not started yet, or gone
                    continue
                if len(procs) >= 3:  # docker-init, the API server, the engine core
                    return True
            return False

        wait_for("vLLM's engine core in the container", up, 180, every=0.25)

    def _run_ids(self) -> list[str]:
        if not self.results.exists():
            return []
        return [p.name for p in self.results.glob("*") if (p / "results.json").exists()]

    def alive(self, owner: int | None = None) -> list:
        """This chain's containers (its run's label; other people's runs of the same example are not ours)."""
        if owner is not None:
            return containers(value=str(owner))
        return [n for run_id in self._run_ids() for n in containers(label="boot-harness.run", value=run_id)]

    def reap(self) -> None:
        remove_containers(self.alive())


def run_chain(chain, tmp: Path, env: dict) -> dict:
    obs: dict = {}
    results = chain.results
    select = ["--select", chain.cell]
    # 1. SIGKILL while the engine starts
    h = Harness("run", "--matrix", str(chain.matrix), "--results-dir", str(results), *select, env=env,
                log=tmp / "run1.out")
    try:
        chain.wait_engine(h)
        h.signal(signal.SIGKILL)
        obs["kill_rc"] = h.wait(30)
        time.sleep(1.0)
        obs["left_after_kill"] = chain.alive(h.pid)
        run_dir = only_run(results)
        obs["after_kill"] = check_run_dir(run_dir, killed=True)
        obs["active_after_kill"] = [p.name for p in run_dir.glob("active/*.json")]
    finally:
        h.kill()
    # 2. gc (the process runtime); the container runtime's leftovers are for step 3's own sweep
    if chain.runtime == "process":
        # --engine podman: process groups only; sweeping docker here would take a concurrent container test's
        # leftovers before it counts them (podman, where it is installed, has none of ours)
        gc = cli("gc", "--results-dir", str(results), "--engine", "podman", env=env, timeout=120)
        obs["gc_rc"], obs["gc_out"] = gc.returncode, gc.stdout + gc.stderr
        wait_for("the leftovers to go", lambda: not chain.alive(), 10)
        obs["left_after_gc"] = chain.alive()
    killed_owner = h.pid
    # 3. --resume, SIGTERM while the engine starts
    h = Harness("run", "--matrix", str(chain.matrix), "--resume", str(run_dir), *select, env=env,
                log=tmp / "run2.out")
    try:
        chain.wait_engine(h)
        obs["left_of_the_killed_run"] = chain.alive(killed_owner) if chain.runtime != "process" else []
        t0 = h.signal(signal.SIGTERM)
        servers_s = exit_s = None
        while servers_s is None or exit_s is None:
            assert time.monotonic() - t0 < 300, "hung: not clean 300 s after SIGTERM"  # a guard; the times are figures
            if servers_s is None and not chain.alive(h.pid):
                servers_s = time.monotonic() - t0
            if exit_s is None and h.proc.poll() is not None:
                exit_s = time.monotonic() - t0
            time.sleep(0.02)
        obs["servers_gone_s"], obs["exit_s"] = servers_s, exit_s
        obs["term_rc"] = h.wait(30)
        obs["term_out"] = h.output[-3000:]
        obs["after_term"] = check_run_dir(run_dir)
        obs["active_after_term"] = [p.name for p in run_dir.glob("active/*.json")]
        obs["ready_after_term"] = [p.name for p in run_dir.glob("logs/*.log")
                                   if "Application startup complete" in p.read_text(errors="replace")]
    finally:
        h.kill()
    # 4. --resume to the end
    done = cli("run", "--matrix", str(chain.matrix), "--resume", str(run_dir), *select, env=env, timeout=600)
    obs["resume_rc"], obs["resume_out"] = done.returncode, (done.stdout + done.stderr)[-3000:]
    obs["final"] = check_run_dir(run_dir)
    obs["left_at_end"] = chain.alive()
    return obs


def chain_in_background(runtime: str, tmp: Path) -> dict:
    """One whole chain; what it saw, or the exception it ended with (re-raised by the test)."""
    chain = ProcessChain(tmp / "r") if runtime == "process" else ContainerChain(tmp / "r")
    env = vllm_cpu_env() if runtime == "process" else docker_env()
    try:
        return run_chain(chain, tmp, env or {})
    finally:
        chain.reap()

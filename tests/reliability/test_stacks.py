"""A harness that looks stuck can be asked what it is doing: SIGUSR2 prints every thread's stack and the run goes on
(the kill scenarios use it when they give up on a run, so a rare hang explains itself in CI's log)."""

from __future__ import annotations

import signal

from tests.helpers.reliability import fake_matrix, wait_for


def test_sigusr2_prints_every_threads_stack_and_the_run_goes_on(tmp_path, harnesses):
    matrix = fake_matrix(tmp_path / "m.yaml", {"slow": {"FAKE_VLLM_SCENARIO": "hang"}}, timeout_s=60)
    h = harnesses("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"), log=tmp_path / "out")
    wait_for("the server's first lines in its log", lambda: any(
        "api_server.py:2" in p.read_text() for p in (tmp_path / "r").glob("*/logs/*.log")), 30)
    stacks = h.stacks()
    assert stacks.count("(most recent call first)") >= 3, f"the main thread and the helper threads:\n{stacks}"
    assert "harness/watch/loop.py" in stacks and "harness/runtime/reader.py" in stacks, stacks
    assert h.proc.poll() is None, "SIGUSR2 does not stop the run"
    h.signal(signal.SIGINT)
    assert h.wait(30) == 130, h.output

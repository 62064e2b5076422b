"""A GPU lost during the night, through the nightly workflow's own boot job (.github/workflows/nightly-gpu.yml, run by
tests/rehearsal/actions.py): the shard fails, and the line the harness stopped with is in the job's summary, not
only somewhere in a twelve-hour log. The fault itself (the cell voided, no more cells on the GPU, exit 130) is
tests/reliability/test_runner_faults.py; here the scripted server stands in for vLLM and the stand-in NVML for the
driver, which starts saying "GPU is lost" while the first cell boots."""

from __future__ import annotations

import threading

from tests import builders
from tests.helpers.env import ROOT, STANDIN_NVML
from tests.helpers.reliability import wait_for
from tests.rehearsal.actions import Runner

WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gpu.yml"


def test_a_gpu_lost_fails_the_shard_with_the_harness_last_line_in_its_summary(tmp_path):
    lost = tmp_path / "lost"
    matrix = builders.fake_matrix(tmp_path / "m.yaml",
                                  {"a_boot": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "3"},
                                   "b_boot": {"FAKE_VLLM_SCENARIO": "boot"}},
                                  axis="case", gpus_per_cell=1, expect=[{"outcome": "booted"}])
    github = {"run_id": 7, "run_attempt": 1, "repository": "example/boot-harness", "ref": "refs/heads/main",
              "token": "ghs_not_a_real_token", "event_name": "schedule"}
    env = {**STANDIN_NVML, "STANDIN_NVML_HOLD_S": "0", "STANDIN_NVML_LOST_FILE": str(lost)}
    runner = Runner(WORKFLOW, ROOT, tmp_path / "night", github, {"matrix": str(matrix), "shards": "1"}, env,
                    ROOT / ".venv" / "bin")
    plan = runner.run_job("plan")
    done: dict = {}
    job = threading.Thread(target=lambda: done.update(boot=runner.run_job("boot", needs={"plan": plan},
                                                                          matrix={"shard": 1}, label="boot-1")))
    job.start()
    ws = tmp_path / "night" / "ws" / "boot-1"
    try:
        wait_for("the first cell's server logging", lambda: any(
            "args:" in f.read_text(errors="replace") for f in ws.glob("boot-results/*/logs/case_a_boot.log")), 120)
    finally:
        lost.touch()
        job.join(180)
    boot = done["boot"]
    step = boot.step("boot the shard")
    assert (boot.result, step.outcome, step.outputs.get("rc")) == ("failure", "failure", "130"), boot.log()
    assert "## Shard 1/1 stopped (exit 130)" in boot.summary, boot.summary
    (line,) = [x for x in boot.summary.splitlines() if "is lost" in x]
    assert line.startswith("GPU 0 (GPU-") and "no more cells start on it" in line, boot.summary
    assert "is lost" in step.stdout, "the line is in the job's log too"
    assert boot.step("upload the run directory").outcome == "success", "the stopped shard's run is still kept"

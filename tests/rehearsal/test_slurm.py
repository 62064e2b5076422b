"""Slurm for real: a one-node cluster of Debian's slurm-wlm (munge, slurmctld, slurmd) started by the project's own
script (scripts/slurm-cluster.sh, installed by scripts/setup-slurm.sh) with two stand-in GPUs in gres.conf, and stopped
after. The shipped deploy/slurm/submit.sh submits deploy/slurm/boot-array.sbatch over the GPU rehearsal's matrix
(matrix.yaml as shipped, the stand-in fork image, stub GPU hooks, the stand-in NVML: as tests/rehearsal/ does), two
array tasks, each `run --shard auto` on the GPU Slurm gave it; the dependent merge job (afterany) merges, checks and
reports. One array task is cancelled with `scancel`: the merged run names the missing shard by its Slurm job id, its
check is red, and `run --resume` on the merged run boots what that shard would have, after which check is green.

Two cells (one per shard), so the whole story costs two boots and the resume's one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, require

CLUSTER = ROOT / "scripts" / "slurm-cluster.sh"
#: One cell in each of the two shards: the seed's story at 131072 (boots without MTP, refused with it).
SELECT = "max_model_len=131072,floor=none"
CELLS = {"mml131072-mtp_off-floor_none-image_unpatched": ("booted", "ready"),
         "mml131072-mtp4-floor_none-image_unpatched": ("refused", "kv_insufficient")}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    require("Slurm (slurmctld, slurmd, sbatch, munged)", all(shutil.which(t) for t in ("sbatch", "slurmctld", "munged")),
            "run scripts/setup-slurm.sh (scripts/test.sh does)")
    state = tmp_path_factory.mktemp("slurm")
    up = subprocess.run(["bash", str(CLUSTER), "start", str(state), "2"], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        yield {"SLURM_CONF": up.stdout.strip().splitlines()[-1]}
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], capture_output=True, timeout=120)
        left = subprocess.run(["pgrep", "-f", f"{state}/slurm.conf"], capture_output=True, text=True).stdout.split()
        assert not left, f"a Slurm daemon of ours outlived the test: {left}"


#: Why a pending job may wait; any other reason (PartitionConfig, BadConstraints, …) means it never runs.
WAITING = {"None", "Dependency", "Resources", "Priority", "BeginTime"}


def wait_idle(env: dict, limit_s: float = 900) -> None:
    """Until the queue is empty (`sbatch --wait` polls slowly; squeue answers at once); a job Slurm will never run
    fails the test at once, with Slurm's reason."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h", "-o", "%i %t %r"], env=env, capture_output=True, text=True).stdout
        if not queue.strip():
            return
        stuck = [line for line in queue.splitlines() if line.split()[1] == "PD" and line.split()[2] not in WAITING]
        assert not stuck, f"Slurm will not run: {stuck}"
        time.sleep(1)
    pytest.fail("the Slurm jobs did not end in time")


def test_a_night_on_slurm_with_a_cancelled_task_merges_names_the_shard_and_resumes_green(slurm, standin, tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, **standin, **slurm,
           "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
           "STANDIN_NVML_GPUS": "2",  # the GPUs Slurm hands out: CUDA_VISIBLE_DEVICES=0 or 1
           "BOOT_HARNESS_RESULTS": str(results), "SHARDS": "2", "SELECT": SELECT,
           # logs beside the results, not in the checkout; one CPU a task (the file asks 8 of a real GPU node)
           "SBATCH_ARGS": f"--output={tmp_path}/%x-%A_%a.out --cpus-per-task=1"}
    submitted = subprocess.run(["bash", "deploy/slurm/submit.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    array = submitted.stdout.split("array job ")[1].split()[0]
    # shard 2/2 is array task 1: cancelled before it boots anything
    subprocess.run(["scancel", f"{array}_1"], env=env, check=True, timeout=30)
    wait_idle(env)
    night = results / f"array-{array}"
    merged = night / "merged"
    run = json.loads((merged / "results.json").read_text())
    assert run["status"] == "interrupted" and [c["cell_id"] for c in run["cells"]] == [
        "mml131072-mtp_off-floor_none-image_unpatched"]
    (shard,) = run["merged_from"]
    assert shard["shard"] == "1/2" and shard["scheduler"]["kind"] == "slurm", shard
    merge_log = next(tmp_path.glob("boot-harness-merge-*.out")).read_text()
    assert f"missing shard(s) 2/2 (Slurm job {array}_1)" in merge_log, merge_log[-3000:]
    assert "night array-" in merge_log and ": red;" in merge_log
    assert not (night / "green").exists()
    # the engineer's next step: finish the night where the cancelled task left it
    resumed = subprocess.run([str(ROOT / ".venv" / "bin" / "boot-harness"), "run", "--matrix", "matrix.yaml",
                              "--select", SELECT, "--resume", str(merged)], cwd=ROOT, env={k: v for k, v in env.items()
                                                                       if not k.startswith("SLURM_")},
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    check = subprocess.run([str(ROOT / ".venv" / "bin" / "boot-harness"), "check", str(merged)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    cells = {c["cell_id"]: (c["outcome"], c["reason"]) for c in json.loads((merged / "results.json").read_text())["cells"]}
    assert cells == CELLS, "the resume booted the missing shard's cell, and no other"

"""Slurm for real: a one-node cluster of Debian's slurm-wlm (munge, slurmctld, slurmd) started by the project's own
script (scripts/slurm-cluster.sh, installed by scripts/setup-slurm.sh) with two stand-in GPUs in gres.conf, and stopped
after. The shipped deploy/slurm/submit.sh submits deploy/slurm/boot-array.sbatch over the GPU rehearsal's matrix
(matrix.yaml as shipped, the stand-in fork image, stub GPU hooks, the stand-in NVML: as tests/rehearsal/ does), two
array tasks, each `run --shard auto` on the GPU Slurm gave it; the dependent merge job (afterany) merges, checks and
reports: a green night. The next night an array task is cancelled with `scancel` while its server boots: the harness
gets Slurm's SIGTERM, stops the server (no container of the night is left) and marks its shard interrupted; the merged
run is interrupted, the night is red, and `run --resume` on the merged run boots what that shard would have,
after which check is green.

The first night holds two cells (one per shard, booted at once), the second one (in the cancelled task's shard): the
whole story costs two boots, the cancelled one's start and the resume's one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.env import ROOT, require

CLUSTER = ROOT / "scripts" / "slurm-cluster.sh"
#: One cell in each of the two shards: the seed's story at 131072 (boots without MTP, refused with it).
SELECT = "max_model_len=131072,floor=none"
CELLS = {"mml131072-mtp_off-floor_none-image_unpatched": ("booted", "ready"),
         "mml131072-mtp4-floor_none-image_unpatched": ("refused", "kv_cache_too_small")}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    require("Slurm (slurmctld, slurmd, sbatch, munged)",
            all(shutil.which(t) for t in ("sbatch", "slurmctld", "munged")),
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


def wait_for(ready, env: dict, limit_s: float = 300):
    """`ready()`'s first truthy answer, polled until the queue is empty or `limit_s` has passed (then None)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        if not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
            return None
        time.sleep(0.2)
    return None


def run_containers(shard: Path) -> list[str]:
    """The containers of the run in `shard` (the one run its task makes there), by the label the harness gives them."""
    runs = [d.name for d in shard.glob("*") if d.is_dir()]
    if not runs:
        return []
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=boot-harness.run={runs[0]}"], capture_output=True,
                          text=True, timeout=60).stdout.split()


def submit(env: dict, select: str) -> str:
    """deploy/slurm/submit.sh as a user runs it, from the folder that holds the matrix; the array's job id."""
    done = subprocess.run(["bash", "deploy/slurm/submit.sh"], cwd=ROOT, env={**env, "SELECT": select},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("array job ")[1].split()[0]


def merge_log(tmp_path: Path, array: str) -> str:
    (log,) = [p for p in tmp_path.glob("boot-harness-merge-*.out") if f"array-{array}" in p.read_text()]
    return log.read_text()


@pytest.fixture
def night_env(slurm, standin, tmp_path) -> dict:
    return {**os.environ, **standin, **slurm,
            "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
            "STANDIN_NVML_GPUS": "2",  # the GPUs Slurm hands out: CUDA_VISIBLE_DEVICES=0 or 1
            "BOOT_HARNESS_RESULTS": str(tmp_path / "results"), "SHARDS": "2",
            # logs beside the results, not in the checkout; one CPU a task (the file asks 8 of a real GPU node)
            "SBATCH_ARGS": f"--output={tmp_path}/%x-%A_%a.out --cpus-per-task=1", "MEM_PER_TASK": "1G"}


def test_two_nights_on_slurm_green_then_a_cancelled_task_named_and_resumed(night_env, tmp_path):
    env, results = night_env, Path(night_env["BOOT_HARNESS_RESULTS"])
    # night 1: both array tasks boot their shard on the GPU Slurm gave them; the merge job merges, checks: green
    first = submit(env, SELECT)
    wait_idle(env)
    merged = results / f"array-{first}" / "merged"
    run = json.loads((merged / "results.json").read_text())
    assert run["status"] == "complete", merge_log(tmp_path, first)[-3000:]
    assert {c["cell_id"]: (c["outcome"], c["reason"]) for c in run["cells"]} == CELLS
    assert sorted((m["shard"], m["scheduler"]["kind"], m["scheduler"]["job_id"]) for m in run["merged_from"]) == [
        ("1/2", "slurm", f"{first}_0"), ("2/2", "slurm", f"{first}_1")]
    assert (results / f"array-{first}" / "green").exists(), merge_log(tmp_path, first)[-3000:]
    # night 2, one cell (shard 2/2, array task 1): that task is cancelled while its server boots
    only = "mml131072-mtp4-floor_none-image_unpatched"
    second = submit(env, SELECT + ",mtp=mtp4")
    shard = results / f"array-{second}" / "shards" / "shard-1"
    booting = wait_for(lambda: next(shard.glob("*/logs/*.log"), None) and run_containers(shard), env)
    subprocess.run(["scancel", f"{second}_1"], env=env, check=True, timeout=30)
    wait_idle(env)
    assert booting, "the task never started its server"
    assert not run_containers(shard), "a cancelled task left its server running"
    (task_run,) = shard.glob("*/results.json")
    assert json.loads(task_run.read_text())["status"] == "interrupted"
    merged = results / f"array-{second}" / "merged"
    run = json.loads((merged / "results.json").read_text())
    assert run["status"] == "interrupted" and run["cells"] == []
    log = merge_log(tmp_path, second)
    assert "is interrupted: the merged run is marked interrupted" in log, log[-3000:]
    assert f"night array-{second}: red" in log and not (results / f"array-{second}" / "green").exists()
    # the engineer's next step: finish the night where the cancelled task left it
    bh = str(ROOT / ".venv" / "bin" / "boot-harness")
    by_hand = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    resumed = subprocess.run([bh, "run", "--matrix", "matrix.yaml", "--select", SELECT + ",mtp=mtp4", "--resume",
                              str(merged)], cwd=ROOT, env=by_hand, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    check = subprocess.run([bh, "check", str(merged)], env=by_hand, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    run = json.loads((merged / "results.json").read_text())
    assert [(c["cell_id"], c["outcome"]) for c in run["cells"]] == [(only, "refused")]

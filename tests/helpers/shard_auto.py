"""The schedulers' shard variables and a fake-server matrix to shard by them."""

from __future__ import annotations

from pathlib import Path

from harness.matrix.scheduler import K8S_COUNT
from tests import builders

#: Buildkite, `parallelism: 4`, the second job (BUILDKITE_PARALLEL_JOB counts from 0).
BUILDKITE = {"BUILDKITE": "true", "BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4",
             "BUILDKITE_JOB_ID": "0190b6f4-5c1e-4d8a-9a53-2f0c6f0e8a11",
             "BUILDKITE_BUILD_ID": "0190b6f3-0a2b-4c2d-8e1f-7d6c5b4a3f21", "BUILDKITE_STEP_KEY": "boot"}


#: A Kubernetes Indexed Job `boot-nightly` with completions: 3; the pod of index 2 (hostname `<job>-<index>`).
KUBERNETES = {"JOB_COMPLETION_INDEX": "2", K8S_COUNT: "3", "HOSTNAME": "boot-nightly-2",
              "KUBERNETES_SERVICE_HOST": "10.96.0.1"}


#: `sbatch --array=0-3 --gres=gpu:1`, task 1, as slurm-one-node.md saw it.
SLURM = {"SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4",
         "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_JOB_ID": "4243",
         "CUDA_VISIBLE_DEVICES": "1", "SLURM_JOB_GPUS": "1"}


SCHEDULER_VARIABLES = sorted({*BUILDKITE, *KUBERNETES, *SLURM, "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX"}
                             - {"HOSTNAME", "CUDA_VISIBLE_DEVICES"})


def fake_matrix(tmp_path: Path, scenarios: list[str]) -> Path:
    return builders.fake_matrix(tmp_path / "fake.yaml", scenarios, env={"FAKE_VLLM_DELAY": "0.05"}, linger_s=1,
                                expect=[{"where": {"scenario": "boot"}, "outcome": "booted"}])

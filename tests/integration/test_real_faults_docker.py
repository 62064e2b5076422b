"""Real vLLM (the local vLLM CPU image) failing for real on the Docker engine, in ONE run whose axis is the fault: a
container whose /dev/shm is 1 MiB. vLLM 0.32 CPU really fails on it: its engine wants 160 MiB of shared memory and
says so ("Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 1 MiB free"), so the cell is
the machine's fault (error, shm_too_small), not the configuration's. One boot, ~40 s on 2 cores."""

from __future__ import annotations

import pytest

from tests.helpers.boots import run_matrix
from tests.integration.real_faults import Fault, check_readers, check_records, fault_matrix, keep_seconds

pytestmark = pytest.mark.docker

FAULTS = {
    "shm_1m": Fault([], "error", "shm_too_small", {"required_mib": 160, "free_mib": 1},
                    "1 MiB free of the 160 MiB the workers need"),
}


@pytest.fixture(scope="module")
def docker_fault_run(docker_image, tmp_path_factory):
    """The one run of the container's faults: (the harness process, the run dir, its cells)."""
    base = tmp_path_factory.mktemp("real-faults-docker")
    matrix = fault_matrix(base / "faults.yaml", "real-faults-docker", FAULTS, runtime="docker",
                          image=docker_image["VLLM_CPU_IMAGE"], model="/models/tiny-llama", shm_size="1m",
                          args=["--enforce-eager", "--dtype", "float32", "--max-num-seqs", "4", "--max-model-len",
                                "2048", "--kv-cache-memory-bytes", "3145728"],
                          timeout_s=240, linger_s=5)
    proc, run_dir, cells = run_matrix(matrix, base / "results", docker_image)
    keep_seconds("real faults (docker)", cells)
    return proc, run_dir, cells


def test_a_tiny_dev_shm_is_recorded_as_the_machines_fault_with_the_sizes_vllm_stated(docker_fault_run):
    proc, _, cells = docker_fault_run
    check_records(cells, FAULTS)
    assert cells["fault_shm_1m"]["cause"]["kind"] == "environment"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_check_report_history_and_facts_read_the_containers_cause(docker_fault_run, capsys, monkeypatch):
    _, run_dir, cells = docker_fault_run
    check_readers(capsys, monkeypatch, run_dir, cells)

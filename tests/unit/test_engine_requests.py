"""What the container runtime asks an engine for GPUs: docker device requests, podman CDI ids, and the same as
`docker run`/`podman run` flags for the repro command."""

from __future__ import annotations

import pytest

from harness.errors import RuntimeUnavailable
from harness.runtime.engine import (
    EngineInfo,
    GpuProbe,
    check_gpu_support,
    device_requests,
    engine_host,
    engine_info,
    gpu_cli_args,
    trouble,
    version_tuple,
)


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


def test_podman_before_5_4_cannot_take_gpus_through_its_compat_api_and_says_so_in_one_line():
    with pytest.raises(RuntimeUnavailable, match=r"^gpus: podman 4\.3\.1 ignores GPU requests .* from 5\.4") as err:
        check_gpu_support(EngineInfo("podman", "4.3.1"))
    assert "\n" not in str(err.value)
    for ok in (EngineInfo("podman", "5.4.0"), EngineInfo("podman", "5.6.2"), EngineInfo("docker", "20.10.24+dfsg1")):
        check_gpu_support(ok)  # the probe container decides the rest


def test_the_version_of_an_engine_reads_as_numbers():
    assert version_tuple("20.10.24+dfsg1") == (20, 10, 24) and version_tuple("5.4.0-rc1") == (5, 4, 0)
    assert version_tuple(None) == () and version_tuple("dev") == ()


class FakeClient:
    def __init__(self, version: dict):
        self._version = version

    def version(self):
        return self._version

    def info(self):
        return {"Runtimes": {"runc": {}}}


def test_the_engine_is_what_answers_not_what_the_matrix_calls_it():
    podman = {"Version": "4.3.1", "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}]}
    docker = {"Version": "20.10.24", "Components": [{"Name": "Engine", "Version": "20.10.24"}]}
    assert engine_info(FakeClient(podman), "docker") == EngineInfo("podman", "4.3.1", ("runc",), ())
    assert engine_info(FakeClient(docker), "podman").name == "docker"
    assert engine_info(FakeClient(docker), "docker").name == "docker"


@pytest.mark.parametrize(("probe", "granted"), [
    (GpuProbe((), "all", False), True),                   # docker's nvidia driver set the variable
    (GpuProbe(("/dev/nvidia0",), "void", False), True),   # a real CDI spec: devices, NVIDIA_VISIBLE_DEVICES=void
    (GpuProbe((), "<unset>", False), False),              # podman < 5.4: request ignored
    (GpuProbe((), "all", True), False),                   # a CUDA base image sets it itself: proves nothing
    (GpuProbe(("/dev/nvidia0",), "all", True), True),
])
def test_a_probe_container_shows_whether_the_gpu_request_was_honoured(probe, granted):
    assert probe.granted is granted


def test_engine_sockets_default_per_engine_and_follow_the_environment():
    assert engine_host("docker", {}) == "unix:///var/run/docker.sock"
    assert engine_host("podman", {}) == "unix:///run/podman/podman.sock"
    assert engine_host("podman", {"CONTAINER_HOST": "unix:///x.sock"}) == "unix:///x.sock"
    assert engine_host("docker", {"DOCKER_HOST": "tcp://h:2375"}) == "tcp://h:2375"


def test_an_engine_that_went_away_is_told_through_docker_pys_wrapping():
    """docker-py wraps a refused or cut connection (the socket gone while dockerd restarts) in a DockerException
    raised `from` it; an answer, even an error one, is no trouble of the engine's."""
    import docker.errors
    import requests

    def wrapped(cause: BaseException) -> BaseException:
        try:
            try:
                raise cause
            except Exception as exc:
                raise docker.errors.DockerException("Error while fetching server API version") from exc
        except docker.errors.DockerException as outer:
            return outer

    gone = wrapped(requests.exceptions.ConnectionError(FileNotFoundError(2, "No such file or directory")))
    assert trouble("docker", "start", gone, 5) == ("docker: the engine went away during `start` (ConnectionError: "
                                                    "restarted or killed)")
    hung = wrapped(requests.exceptions.ReadTimeout())
    assert trouble("podman", "inspect", hung, 2) == "podman: `inspect` did not answer within 2 s (the engine hung)"
    assert trouble("docker", "start", docker.errors.APIError("409 Conflict"), 5) is None

"""Talking to a container engine (dockerd, or podman's Docker-compatible API) through docker-py.

Engine facts that change what the harness must do: no registry is reachable here (so Ryuk is off and images are
pinned by digest), testcontainers thinks it runs inside a container on machines with /.dockerenv (so the connection
mode is pinned to the docker host), and podman takes GPUs through CDI device ids, not docker's device requests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from harness.errors import RuntimeUnavailable

# Set before testcontainers is imported anywhere: it reads them at import time.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

import docker  # noqa: E402
from docker.types import DeviceRequest  # noqa: E402

DEFAULT_HOSTS = {"docker": "unix:///var/run/docker.sock", "podman": "unix:///run/podman/podman.sock"}
LABEL_PREFIX = "boot-harness"


def engine_host(engine: str, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if engine == "podman":
        return env.get("CONTAINER_HOST") or env.get("DOCKER_HOST") or DEFAULT_HOSTS["podman"]
    return env.get("DOCKER_HOST") or DEFAULT_HOSTS["docker"]


def client_kwargs(engine: str) -> dict[str, Any]:
    return {"environment": {**os.environ, "DOCKER_HOST": engine_host(engine)}}


def connect(engine: str) -> docker.DockerClient:
    host = engine_host(engine)
    try:
        client = docker.from_env(**client_kwargs(engine))
        client.ping()
        return client
    except Exception as exc:  # docker-py raises several unrelated types for "nothing there"
        raise RuntimeUnavailable(f"runtime: the {engine} engine does not answer at {host} ({type(exc).__name__})") from None


@dataclass(frozen=True)
class EngineInfo:
    name: str
    version: str | None
    runtimes: tuple[str, ...]
    cdi_spec_dirs: tuple[str, ...]


def engine_info(client: docker.DockerClient, engine: str) -> EngineInfo:
    version = client.version()
    info = client.info()
    name = engine
    for comp in version.get("Components") or []:
        if "podman" in str(comp.get("Name", "")).lower():
            name = "podman"
    return EngineInfo(name=name, version=version.get("Version"), runtimes=tuple((info.get("Runtimes") or {}).keys()),
                      cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()))


def gpu_device_ids(gpus: str | int | list[str] | None, assigned: list[str] | None = None) -> list[str] | None:
    """The GPUs a cell gets: an assignment from the scheduler wins; `all` is None (every GPU)."""
    if assigned is not None:
        return list(assigned)
    if gpus is None or gpus == "all":
        return None
    if isinstance(gpus, int):
        return [str(i) for i in range(gpus)]
    return [str(g) for g in gpus]


def device_requests(engine: str, gpus: str | int | list[str] | None, assigned: list[str] | None = None) -> list[DeviceRequest]:
    """docker: an nvidia DeviceRequest; podman: CDI ids (`nvidia.com/gpu=…`), since its compat API ignores the former."""
    if gpus is None and assigned is None:
        return []
    ids = gpu_device_ids(gpus, assigned)
    if engine == "podman":
        cdi = ["nvidia.com/gpu=all"] if ids is None else [f"nvidia.com/gpu={i}" for i in ids]
        return [DeviceRequest(driver="cdi", device_ids=cdi)]
    if ids is None:
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def gpu_cli_args(engine: str, gpus: str | int | list[str] | None, assigned: list[str] | None = None) -> list[str]:
    """The same request as `docker run`/`podman run` flags, for the repro command."""
    if gpus is None and assigned is None:
        return []
    ids = gpu_device_ids(gpus, assigned)
    if engine == "podman":
        return [a for i in (["all"] if ids is None else ids) for a in ("--device", f"nvidia.com/gpu={i}")]
    if ids is None:
        return ["--gpus", "all"]
    return ["--gpus", f'"device={",".join(ids)}"']


def check_gpu_support(info: EngineInfo, engine: str) -> None:
    """A GPU request the engine cannot honour would start the container without GPUs and say nothing."""
    if engine == "podman":
        return  # CDI failures surface at create; podman has no runtime list to ask
    if "nvidia" not in info.runtimes and not info.cdi_spec_dirs:
        raise RuntimeUnavailable(
            f"gpus: the docker engine ({info.version}) has no nvidia runtime and no CDI specs, so it cannot grant GPUs "
            "(install nvidia-container-toolkit, or drop `gpus:` for a CPU image)"
        )


def image_digest(client: docker.DockerClient, ref: str) -> tuple[str, str | None]:
    """(image id, repo digest or None). A locally built image has no repo digest; its id pins it just as well."""
    image = client.images.get(ref)
    digests = image.attrs.get("RepoDigests") or []
    return image.id, (digests[0] if digests else None)

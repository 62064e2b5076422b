"""Talking to a container engine (dockerd, or podman's Docker-compatible API) through docker-py.

Engine facts that change what the harness must do: no registry is reachable here (so Ryuk is off and images are
pinned by digest), testcontainers thinks it runs inside a container on machines with /.dockerenv (so the connection
mode is pinned to the docker host), and podman takes GPUs through CDI device ids, not docker's device requests.
"""

from __future__ import annotations

import io
import os
import re
import socket
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import docker
from docker.types import DeviceRequest

from harness.errors import PatchError, RuntimeUnavailable

#: What testcontainers must be told here; it reads its configuration when it is first imported.
TESTCONTAINERS_ENV = {"TESTCONTAINERS_RYUK_DISABLED": "true", "TESTCONTAINERS_CONNECTION_MODE": "docker_host"}


def container_class():
    """testcontainers' DockerContainer, imported only once its configuration is in the environment (set where a
    container runtime is made, never as a side effect of importing the harness)."""
    for key, value in TESTCONTAINERS_ENV.items():
        os.environ.setdefault(key, value)
    from testcontainers.core.container import DockerContainer

    return DockerContainer

DEFAULT_HOSTS = {"docker": "unix:///var/run/docker.sock", "podman": "unix:///run/podman/podman.sock"}
LABEL_PREFIX = "boot-harness"
#: The labels that say who started a container (the harness's pid, on which host): what gc and the sweep read.
OWNER_PID_LABEL = f"{LABEL_PREFIX}.owner-pid"
OWNER_HOST_LABEL = f"{LABEL_PREFIX}.host"


def owner_labels() -> dict[str, str]:
    """Who started a container: gc removes only those whose harness process is gone."""
    return {OWNER_PID_LABEL: str(os.getpid()), OWNER_HOST_LABEL: socket.gethostname()}


def engine_host(engine: str, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if engine == "podman":
        return env.get("CONTAINER_HOST") or env.get("DOCKER_HOST") or DEFAULT_HOSTS["podman"]
    return env.get("DOCKER_HOST") or DEFAULT_HOSTS["docker"]


#: How long one engine call may take before the harness says the engine hung (a matrix's `engine_timeout_s`). Streams
#: (the log) and the exit wait are not bounded by it: docker-py lifts the timeout on streams, and the exit wait asks
#: in bounded slices.
DEFAULT_CALL_TIMEOUT_S = 30.0


def client_kwargs(engine: str, timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> dict[str, Any]:
    return {"environment": {**os.environ, "DOCKER_HOST": engine_host(engine)}, "timeout": timeout_s}


def trouble(engine: str, call: str, exc: BaseException, timeout_s: float) -> str | None:
    """What an engine call's failure says about the engine: it hung (no answer within the call's timeout) or went
    away (the connection refused or cut: restarted, killed). None for an answer, even an error one (a container
    removed under us is not the engine's trouble)."""
    import requests

    seen: BaseException | None = exc
    for _ in range(8):  # down the chain: docker-py wraps a refused connection in a DockerException (`from`)
        if seen is None:
            break
        if isinstance(seen, requests.exceptions.Timeout):
            return f"{engine}: `{call}` did not answer within {timeout_s:g} s (the engine hung)"
        if isinstance(seen, requests.exceptions.ConnectionError):
            return f"{engine}: the engine went away during `{call}` ({type(seen).__name__}: restarted or killed)"
        seen = seen.__cause__ or seen.__context__
    return None


def connect(engine: str, timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> docker.DockerClient:
    host = engine_host(engine)
    try:
        client = docker.from_env(**client_kwargs(engine, timeout_s))
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - docker-py raises several unrelated types for "nothing there"
        raise RuntimeUnavailable(f"runtime: the {engine} engine does not answer at {host} "
                                 f"({type(exc).__name__})") from None


@dataclass(frozen=True)
class EngineInfo:
    """What answers on the socket. `name` is the engine as detected (a `runtime: docker` whose DOCKER_HOST is podman's
    socket is podman), which is what decides how GPUs are asked for."""

    name: str
    version: str | None
    runtimes: tuple[str, ...] = ()
    cdi_spec_dirs: tuple[str, ...] = ()

    def version_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.version)


def version_tuple(text: str | None) -> tuple[int, ...]:
    """`4.3.1` → (4, 3, 1); `20.10.24+dfsg1` → (20, 10, 24); unknown → ()."""
    parts = []
    for piece in re.split(r"[.+~-]", text or ""):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def engine_info(client: docker.DockerClient, engine: str) -> EngineInfo:
    version = client.version()
    info = client.info()
    name, number = engine, version.get("Version")
    for comp in version.get("Components") or []:
        if "podman" in str(comp.get("Name", "")).lower():
            name, number = "podman", comp.get("Version") or number
        elif str(comp.get("Name", "")) == "Engine" and engine == "podman":
            name = "docker"  # `runtime: podman` pointed at a dockerd
    return EngineInfo(name=name, version=number, runtimes=tuple((info.get("Runtimes") or {}).keys()),
                      cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()))


def gpu_device_ids(gpus: str | int | Sequence[str] | None, assigned: Sequence[str] | None = None) -> list[str] | None:
    """The GPUs a cell gets: an assignment from the scheduler wins; `all` is None (every GPU)."""
    if assigned is not None:
        return list(assigned)
    if gpus is None or gpus == "all":
        return None
    if isinstance(gpus, int):
        return [str(i) for i in range(gpus)]
    return [str(g) for g in gpus]


def device_requests(engine: str, gpus: str | int | Sequence[str] | None,
                    assigned: Sequence[str] | None = None) -> list[DeviceRequest]:
    """docker: a DeviceRequest for its nvidia device driver (registered when dockerd finds
    nvidia-container-runtime-hook on its PATH); podman: CDI ids (`nvidia.com/gpu=…`), since its compat API ignores the
    former. `engine` is the detected engine (EngineInfo.name), not the matrix's `runtime:`."""
    if gpus is None and assigned is None:
        return []
    ids = gpu_device_ids(gpus, assigned)
    if engine == "podman":
        cdi = ["nvidia.com/gpu=all"] if ids is None else [f"nvidia.com/gpu={i}" for i in ids]
        return [DeviceRequest(driver="cdi", device_ids=cdi)]
    if ids is None:
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def gpu_cli_args(engine: str, gpus: str | int | Sequence[str] | None,
                 assigned: Sequence[str] | None = None) -> list[str]:
    """The same request as `docker run`/`podman run` flags, for the repro command."""
    if gpus is None and assigned is None:
        return []
    ids = gpu_device_ids(gpus, assigned)
    if engine == "podman":
        return [a for i in (["all"] if ids is None else ids) for a in ("--device", f"nvidia.com/gpu={i}")]
    if ids is None:
        return ["--gpus", "all"]
    return ["--gpus", f'"device={",".join(ids)}"']


#: podman's Docker-compatible API honours `DeviceRequest(driver="cdi")` from this version; before it, the container
#: starts without a GPU and nothing says so (podman#22645).
PODMAN_CDI_API = (5, 4)


def check_gpu_support(info: EngineInfo) -> None:
    """What the engine's version alone rules out. Whether the request is really honoured is `probe_gpus`'s to find."""
    if info.name == "podman" and info.version_tuple() and info.version_tuple() < PODMAN_CDI_API:
        raise RuntimeUnavailable(
            f"gpus: podman {info.version} ignores GPU requests through its Docker-compatible API (CDI device requests "
            f"are honoured from {'.'.join(map(str, PODMAN_CDI_API))}), so every container would start without a GPU; "
            "upgrade podman, or use docker with nvidia-container-toolkit (`podman run --device nvidia.com/gpu=all` "
            "from the shell is not affected: see `boot-harness repro`)")


#: Run in a probe container: the GPU device nodes it sees, and what NVIDIA_VISIBLE_DEVICES says.
PROBE_SCRIPT = 'ls -d /dev/nvidia[0-9]* 2>/dev/null; echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"'
_NO_DEVICES = {"", "<unset>", "void", "none"}


@dataclass(frozen=True)
class GpuProbe:
    devices: tuple[str, ...]
    visible: str
    image_sets_visible: bool

    @property
    def granted(self) -> bool:
        """Device nodes appeared, or the engine set NVIDIA_VISIBLE_DEVICES (docker's nvidia driver does; CDI specs may).
        An image that sets the variable itself (CUDA base images do) proves nothing by it: then only devices count."""
        return bool(self.devices) or (self.visible not in _NO_DEVICES and not self.image_sets_visible)

    def describe(self) -> str:
        devs = ", ".join(self.devices) or "no /dev/nvidia* device"
        return f"{devs}, NVIDIA_VISIBLE_DEVICES={self.visible}"


def probe_gpus(client: docker.DockerClient, image: str, requests: list[DeviceRequest], engine: str,
               labels: dict[str, str] | None = None) -> GpuProbe:
    """Start a short container from `image` with the cells' GPU request and look inside: the engine's own answer, not
    a guess from its runtime list. A refused request (docker without the nvidia hook: `could not select device
    driver`) or a silently ignored one (podman before 5.4) is a RuntimeUnavailable naming what happened."""
    import docker.errors

    try:
        image_env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
        c = client.containers.create(image, entrypoint=["/bin/sh", "-c", PROBE_SCRIPT], command=[],
                                     device_requests=requests, labels=labels or {})
    except docker.errors.APIError as exc:
        raise RuntimeUnavailable(f"gpus: the {engine} engine refused a container with the GPU request: "
                                 f"{exc.explanation or exc}") from None
    try:
        try:
            c.start()
            code = c.wait(timeout=120).get("StatusCode")
            out = c.logs(stdout=True, stderr=True).decode(errors="replace")
        except docker.errors.APIError as exc:
            hint = (" (dockerd registers its nvidia device driver only when nvidia-container-runtime-hook is on its "
                    "PATH at start-up: install nvidia-container-toolkit and restart dockerd)"
                    if "device driver" in str(exc.explanation or exc) else "")
            raise RuntimeUnavailable(f"gpus: the {engine} engine could not start a container with the GPU request: "
                                     f"{exc.explanation or exc}{hint}") from None
        except Exception as exc:  # noqa: BLE001 - a hung wait (requests' timeout) and friends
            raise RuntimeUnavailable(f"gpus: the GPU probe container did not finish ({type(exc).__name__})") from None
    finally:
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001 - the probe's answer stands; a leftover is swept as ours later
            pass
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    visible = next((ln.split("=", 1)[1] for ln in lines if ln.startswith("NVIDIA_VISIBLE_DEVICES=")), None)
    if code != 0 or visible is None:
        raise RuntimeUnavailable(f"gpus: the GPU probe (/bin/sh in {image}) exited {code}: {' / '.join(lines[-2:])}")
    return GpuProbe(devices=tuple(ln for ln in lines if ln.startswith("/dev/nvidia")), visible=visible,
                    image_sets_visible=any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in image_env))


def image_digest(client: docker.DockerClient, ref: str) -> tuple[str, str | None]:
    """(image id, repo digest or None). A locally built image has no repo digest; its id pins it just as well."""
    image = client.images.get(ref)
    digests = image.attrs.get("RepoDigests") or []
    assert image.id is not None  # an image the engine listed has its id
    return image.id, (digests[0] if digests else None)


def copy_out(client: docker.DockerClient, image: str, path: str) -> bytes:
    """The file as the image has it, without running the image (create, read the archive, remove)."""
    import docker.errors

    c = client.containers.create(image, entrypoint=["/bin/true"], command=[], labels=owner_labels())
    try:
        stream, _ = c.get_archive(path)
        data = b"".join(stream)
    except docker.errors.NotFound:
        raise PatchError(f"{path}: no such file in image {image}") from None
    finally:
        c.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise PatchError(f"{path}: not a regular file in image {image}")
        file = tar.extractfile(member)
        assert file is not None  # a regular file's member has one
        return file.read()

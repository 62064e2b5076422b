"""One cell's container, described once and rendered twice: as docker-py arguments for `ContainerRuntime.start`, and
as the `docker run` / `podman run` line `repro` and `run --dry-run` print. Built by `build_spec` alone, so what a run
starts and what a person pastes cannot drift apart (tests/integration/test_container_spec.py has both engines
inspect the two containers and compare them).

The renderers are pure; `to_cli_tokens` reads the environment only to name the variables that hold secrets."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.matrix.cells import Cell
from harness.matrix.model import Matrix, Mount
from harness.runtime import compile_cache
from harness.runtime import engine as eng
from harness.runtime.ports import HOST
from harness.runtime.server_env import build_env
from harness.shell import SecretRenderer

GpuRequest = str | int | tuple[str, ...] | None


@dataclass(frozen=True)
class Volume:
    """A bind mount: `source` absolute on the host, `mode` "ro" or "rw"."""

    source: str
    target: str
    mode: str


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the engine is told about one cell's container. Mappings are tuples of pairs, in order, so a spec
    is immutable and hashable; `env` holds secret values as they are (only the CLI rendering hides them)."""

    #: The engine as detected (podman behind `runtime: docker` is podman): it decides how GPUs are asked for.
    engine: str
    image: str
    name: str
    #: The matrix's entrypoint, empty for the image's own. Both engines' CLIs take one word for `--entrypoint`, so
    #: both renderings give the engine its first word and put the rest before `args`: the same container either way.
    entrypoint: tuple[str, ...]
    #: The server's arguments (`--model M` + the cell's args), after the entrypoint.
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    volumes: tuple[Volume, ...]
    container_port: int
    #: None: a free port on `host_ip`, chosen by the engine.
    host_port: int | None = None
    host_ip: str = HOST
    ipc: str | None = None
    shm_size: str | None = None
    #: The matrix's `memory`: the container's limit, so the kernel's OOM killer takes the server inside it.
    memory: str | None = None
    #: The matrix's `gpus`; `gpu_ids` (the scheduler's assignment) wins when set.
    gpus: GpuRequest = None
    gpu_ids: tuple[str, ...] | None = None
    labels: tuple[tuple[str, str], ...] = ()
    init: bool = True
    #: Removed by the engine on exit (the pasted command); the harness removes its own after reading the exit code.
    remove: bool = False

    @property
    def entrypoint_word(self) -> str | None:
        return self.entrypoint[0] if self.entrypoint else None

    @property
    def command(self) -> tuple[str, ...]:
        """What follows the image: the entrypoint's other words, then the server's arguments."""
        return (*self.entrypoint[1:], *self.args)

    @property
    def port_key(self) -> str:
        return f"{self.container_port}/tcp"


def host_path(path: Path | str) -> str:
    """A bind-mount source as the engine must get it: absolute. dockerd reads a relative source as a volume *name*
    (`results/x/gpu_worker.py` → "invalid volume name"), podman resolves it against its own working directory."""
    return os.path.abspath(os.fspath(path))


def mount_source(base_dir: Path, mount: Mount) -> Path:
    """A matrix mount's source: relative to the matrix file unless absolute."""
    p = Path(mount.source)
    return p if p.is_absolute() else (base_dir / p).resolve()


def container_env(cell: Cell, cache_dir: Path | None) -> dict[str, str]:
    """The server's environment in the container: the compile cache where it is mounted; GPUs come from the engine."""
    return build_env(cell.env, cache_root=compile_cache.CONTAINER_DIR if cache_dir else None)


def cache_volume(cache_dir: Path | None) -> dict[str, tuple[str, str]]:
    """The compile cache, read-write, at the same path in every cell's container."""
    return {host_path(cache_dir): (compile_cache.CONTAINER_DIR, "rw")} if cache_dir else {}


def build_spec(matrix: Matrix, cell: Cell, *, engine: str, image: str, name: str, base_dir: Path,
               patched: Sequence[tuple[str, str]] = (), cache_dir: Path | None = None,
               gpu_ids: Sequence[str] | None = None, labels: Mapping[str, str] | None = None,
               host_port: int | None = None, remove: bool = False) -> ContainerSpec:
    """The one place a cell (with the matrix's container settings) becomes a container. `patched`: (target in the
    image, patched file on the host) pairs, mounted read-only; `image`: the reference the engine is given."""
    volumes = [Volume(host_path(mount_source(base_dir, m)), m.target, "ro" if m.read_only else "rw")
               for m in cell.mounts]
    volumes += [Volume(path, target, "ro") for target, path in patched]
    volumes += [Volume(src, target, mode) for src, (target, mode) in cache_volume(cache_dir).items()]
    gpus = tuple(str(g) for g in matrix.gpus) if isinstance(matrix.gpus, list) else matrix.gpus
    return ContainerSpec(
        engine=engine, image=image, name=name, entrypoint=tuple(matrix.entrypoint or ()),
        args=tuple(cell.server_args), env=tuple(container_env(cell, cache_dir).items()), volumes=tuple(volumes),
        container_port=matrix.container_port, host_port=host_port, ipc=matrix.ipc or None,
        shm_size=matrix.shm_size or None, memory=matrix.memory or None, gpus=gpus,
        gpu_ids=None if gpu_ids is None else tuple(gpu_ids),
        labels=tuple((labels or {}).items()), remove=remove)


def _gpu_ids(spec: ContainerSpec) -> list[str] | None:
    return None if spec.gpu_ids is None else list(spec.gpu_ids)


def to_engine_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """docker-py's `containers.create`/`run` keywords (what testcontainers passes on). Volumes are keyed by host path,
    as docker-py takes them: two mounts of one source keep the last."""
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "environment": dict(spec.env),
        "ports": {spec.port_key: (spec.host_ip, spec.host_port)},
        "name": spec.name,
        "volumes": {v.source: {"bind": v.target, "mode": v.mode} for v in spec.volumes},
        "labels": dict(spec.labels),
        "init": spec.init,
    }
    requests = eng.device_requests(spec.engine, spec.gpus, _gpu_ids(spec))
    if requests:
        kwargs["device_requests"] = requests
    if spec.ipc:
        kwargs["ipc_mode"] = spec.ipc
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.memory:
        kwargs["mem_limit"] = spec.memory
    if spec.entrypoint_word is not None:
        kwargs["entrypoint"] = [spec.entrypoint_word]
    if spec.remove:
        kwargs["auto_remove"] = True
    return kwargs


def to_cli_tokens(spec: ContainerSpec, engine: str | None = None,
                  environ: Mapping[str, str] | None = None) -> list[str]:
    """`docker run` / `podman run` (`engine`, default the spec's) as tokens for harness.shell.format_shell: a secret
    env value is a `"$NAME"` reference, and a secret anywhere else (an argument, inside another env value or the
    entrypoint) a reference to the variable in `environ` (default os.environ) or the spec's env that holds it, else
    masked (harness.shell.SecretRenderer)."""
    engine = engine or spec.engine
    tokens: list[str] = [engine, "run"]
    if spec.remove:
        tokens.append("--rm")
    if spec.init:
        tokens.append("--init")
    tokens += ["--name", spec.name, *eng.gpu_cli_args(engine, spec.gpus, _gpu_ids(spec))]
    for k, v in spec.labels:
        tokens += ["--label", f"{k}={v}"]
    if spec.ipc:
        tokens += ["--ipc", spec.ipc]
    if spec.shm_size:
        tokens += ["--shm-size", spec.shm_size]
    if spec.memory:
        tokens += ["--memory", spec.memory]
    tokens += ["-p", f"{spec.host_ip}:{'' if spec.host_port is None else spec.host_port}:{spec.container_port}"]
    for vol in spec.volumes:
        tokens += ["-v", f"{vol.source}:{vol.target}:{vol.mode}"]
    environ = os.environ if environ is None else environ
    render = SecretRenderer(dict(spec.env), [*spec.entrypoint, *spec.args], environ)
    for k, v in spec.env:
        tokens += ["-e", render.env(k, v)]
    if spec.entrypoint_word is not None:
        tokens += ["--entrypoint", render.text(spec.entrypoint_word)]
    return [*tokens, spec.image, *render.argv(spec.entrypoint[1:]), *render.argv(spec.args)]

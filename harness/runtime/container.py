"""The container runtime (docker or podman): the cell's argv appended to the image's entrypoint, started through
testcontainers, its log streamed into the same watch loop as a local process.

testcontainers' own waiting and cleanup do not fit a boot harness: its HTTP wait never notices an exited container
(a refusal would cost the whole timeout), its context manager removes a container that failed to start together with
the refusal message, and Ryuk cannot start where images cannot be pulled. So the harness watches the log and the
container state itself, reads the exit code and OOMKilled before removing, and labels every container so `gc` can
remove leftovers of a harness that was killed.

ContainerRuntime composes the jobs, each in a module of its own: the engine and its trouble
(harness.runtime.connection), images and pulls (pull.Images), patches (patching.Patches), the started container
(container_server), the log (reader.log_stream) and what the engine could not remove while away (leftovers). What the
container is (image, command, env, mounts, ports, GPUs, ...) is one `ContainerSpec` (harness.runtime.container_spec),
rendered for the API here and for the shell in `repro`.
"""

from __future__ import annotations

import threading
from pathlib import Path

from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, PatchError, RuntimeUnavailable, UsageError
from harness.logfacts.timeline import Milestone
from harness.matrix.cells import Cell
from harness.matrix.load import LoadedMatrix
from harness.matrix.model import Mount
from harness.runtime import engine as eng
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.connection import EngineConnection
from harness.runtime.container_server import ContainerServer
from harness.runtime.container_spec import (
    ContainerSpec,
    build_spec,
    cache_volume,
    container_env,
    host_path,
    mount_source,
    to_cli_tokens,
    to_engine_kwargs,
)
from harness.runtime.leftovers import Leftovers
from harness.runtime.patching import Patches, PreparedPatch, image_of
from harness.runtime.pull import Images, PullObserver
from harness.runtime.reader import log_stream, pump_chunks
from harness.shell import Step

#: How many times a cell's container is made before an engine that keeps going away under it fails the cell.
START_TRIES = 3


def _mounted(kept: list[tuple[PreparedPatch, Path]]) -> list[tuple[str, str]]:
    """(target in the image, patched file on the host) for the spec."""
    return [(p.target, host_path(path)) for p, path in kept]


class ContainerRuntime:
    def __init__(self, loaded: LoadedMatrix, engine: str, clock: Clock = SYSTEM):
        self.name = engine
        self.clock = clock  # its servers' polls and waits
        self.loaded = loaded
        self.matrix = loaded.matrix
        #: One line per fact preflight established that a person should see (GPU probe, patch fuzz).
        self.notes: list[str] = []
        self.conn = EngineConnection(engine, self.matrix.engine_timeout_s, clock)
        self.images = Images(self.conn, self.matrix.pull)
        self.patches = Patches(loaded.path, loaded.base_dir, self.images, self.notes)
        self.leftovers = Leftovers(self.conn)
        self._container_class = eng.container_class()

    @classmethod
    def for_matrix(cls, loaded: LoadedMatrix, clock: Clock = SYSTEM) -> ContainerRuntime:
        return cls(loaded, loaded.matrix.runtime, clock)

    @property
    def pull_observer(self) -> PullObserver | None:
        """Told about image pulls (the CLI's live display); the default shows nothing."""
        return self.images.observer

    @pull_observer.setter
    def pull_observer(self, observer: PullObserver | None) -> None:
        self.images.observer = observer

    @property
    def engine(self) -> str:
        """The engine that answers (podman behind `runtime: docker` is podman); the configured one until connected."""
        return self.conn.engine

    # ---- checks before any cell runs
    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        """Everything a run needs, before any cell runs: the engine, images, mounts, patched files, and (with
        `gpu_checks`) that the engine really grants the matrix's GPU request. `repro` prints a command for the
        engine's CLI, which takes GPUs its own way, so it skips the GPU checks."""
        self.conn.client  # noqa: B018 - connect, and read what engine answers
        if gpu_checks and self.wants_gpus():
            assert self.conn.info is not None
            eng.check_gpu_support(self.conn.info)  # the engine's version alone: before any pull
        for cell in cells:
            image = image_of(cell)
            self.images.resolve(image)
            for mount in cell.mounts:
                src = self.mount_source(mount)
                if not src.exists():
                    raise RuntimeUnavailable(f"mounts: source {src} (for {mount.target}) does not exist")
            for spec in cell.patches:
                self.patches.prepare(image, spec)
        if gpu_checks and self.wants_gpus():
            self._probe_gpus(sorted({c.image for c in cells if c.image}))

    def wants_gpus(self) -> bool:
        return self.matrix.gpus is not None or self.matrix.gpus_per_cell > 0

    def _probe_gpus(self, images: list[str]) -> None:
        requests = eng.device_requests(self.engine, self.matrix.gpus or "all")
        for image in images:
            image_id, repo_digest = self.images.resolve(image)
            probe = eng.probe_gpus(self.conn.client, repo_digest or image_id, requests, self.engine,
                                   eng.owner_labels())
            if not probe.granted:
                raise RuntimeUnavailable(
                    f"gpus: the {self.engine} engine ({self.conn.version}) started a probe container from {image} "
                    f"without a GPU ({probe.describe()}): it ignored the request")
            self.notes.append(f"gpus: a probe container from {image} got the GPU request ({probe.describe()})")

    def resolve_image(self, ref: str) -> tuple[str, str | None]:
        return self.images.resolve(ref)

    def image_labels(self, ref: str) -> dict[str, str]:
        """The image's labels (pulled first as `pull:` says): a bisect's candidate names its build by them."""
        return self.images.labels(ref)

    def image_digest(self, ref: str) -> str | None:
        """As the started container's record has it (container_server: the repo digest, else the image id)."""
        image_id, repo_digest = self.images.resolve(ref)
        return repo_digest or image_id

    def mount_source(self, mount: Mount) -> Path:
        return mount_source(self.loaded.base_dir, mount)

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        """Through the cell's bind mounts (the longest target that holds `path`), else the image's own file, copied
        out without running it (once per image and path)."""
        for m in sorted(cell.mounts, key=lambda m: len(m.target), reverse=True):
            target = m.target.rstrip("/")
            if path == target or path.startswith(target + "/"):
                return read_host_file(self.mount_source(m) / path[len(target):].lstrip("/"))
        return self.images.file(cell.image, path) if cell.image else None

    # ---- one cell
    def container_env(self, cell: Cell, ctx: CellContext) -> dict[str, str]:
        return container_env(cell, ctx.compile_cache)

    @staticmethod
    def cache_volume(ctx: CellContext) -> dict[str, tuple[str, str]]:
        return cache_volume(ctx.compile_cache)

    def spec(self, cell: Cell, ctx: CellContext, *, image: str, patched: list[tuple[str, str]], name: str,
             host_port: int | None = None, remove: bool = False, labels: dict[str, str] | None = None) -> ContainerSpec:
        """The cell's container as `start` starts it and `repro` prints it; only what the caller says differs."""
        return build_spec(self.matrix, cell, engine=self.engine, image=image, name=name, base_dir=self.loaded.base_dir,
                          patched=patched, cache_dir=ctx.compile_cache, gpu_ids=ctx.gpu_ids,
                          labels=ctx.labels if labels is None else labels, host_port=host_port, remove=remove)

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> ContainerServer:
        """An engine that goes away while the container is being made (a restart in that second) is waited for and
        the start made again, START_TRIES times at most: a restart is not a verdict on the cell."""
        name = f"bh-{ctx.labels.get('boot-harness.run', 'run')}-{cell.id}"[:200]
        for left in reversed(range(START_TRIES)):
            self.leftovers.engine_ready()
            try:
                return self._start(cell, ctx, on_line, name)
            except Exception as exc:  # told apart by what it says about the engine
                away = self.conn.trouble("start", exc)
                if away is None:
                    raise
                self.leftovers.discard(name)
                if not left:
                    raise CellStartError(f"the {self.engine} engine could not start the container: {away}") from None
        raise AssertionError("unreachable: the last try returns or raises")

    def _start(self, cell: Cell, ctx: CellContext, on_line: LineSink, name: str) -> ContainerServer:
        image = image_of(cell)
        image_id, repo_digest = self.images.resolve(image)
        ctx.mark(Milestone.pulled)
        try:
            kept = self.patches.keep(cell, ctx.run_dir)
        except (PatchError, UsageError) as exc:
            raise CellStartError(str(exc)) from None
        spec = self.spec(cell, ctx, image=repo_digest or image_id, patched=_mounted(kept), name=name,
                         labels={**ctx.labels, **eng.owner_labels()})
        tc = None
        try:
            tc = self._testcontainer(spec)
            tc.start()
        except Exception as exc:  # docker-py's errors, image or device trouble
            if tc is not None:
                try:
                    tc.stop(force=True)
                except Exception:  # noqa: BLE001 - a half-made container: the start's own error is the one to tell
                    pass
            if self.conn.trouble("start", exc):
                raise  # the engine's trouble, not the cell's: `start` waits for it and tries again
            raise CellStartError(f"the {self.engine} engine could not start the container: {exc}") from None
        ctx.mark(Milestone.started)
        threading.Thread(target=pump_chunks, args=(log_stream(tc.get_wrapped_container()), on_line), daemon=True,
                         name=f"log-{cell.id}").start()
        entry = list(spec.entrypoint) or self.images.entrypoint(image_id)
        return ContainerServer(self.conn, self.leftovers, tc, self.matrix.container_port, [*entry, *spec.args],
                               image, image_id, repo_digest, [p.applied(path, ctx.run_dir) for p, path in kept],
                               self.clock)

    def _testcontainer(self, spec: ContainerSpec):
        """testcontainers' container for `spec`: its own setters for what it passes to docker-py itself, the rest
        through `with_kwargs` (one call: it replaces)."""
        kw = to_engine_kwargs(spec)
        tc = self._container_class(kw.pop("image"), docker_client_kw=self.conn.client_kwargs())
        tc.with_command(kw.pop("command"))
        tc.with_envs(**kw.pop("environment"))
        for source, bind in kw.pop("volumes").items():
            tc.with_volume_mapping(source, bind["bind"], bind["mode"])
        tc.ports.update(kw.pop("ports"))
        tc.with_name(kw.pop("name"))
        tc.with_kwargs(**kw)
        return tc

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        """`docker run` (or `podman run`) doing what `start` does, with the patched files prepared under ctx.run_dir."""
        image_id, repo_digest = self.images.resolve(image_of(cell))
        kept = _mounted(self.patches.keep(cell, ctx.run_dir))
        return to_cli_tokens(self._repro_spec(cell, ctx, host_port, repo_digest or image_id, kept))

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[Step]]:
        """What `command_line` would give, and the steps before it (pull, each patched file made), without touching
        anything: no engine is asked, nothing is pulled, copied or written (`run --dry-run`, and `repro`, which
        prints the steps' commands). The image is named as the matrix names it, the engine's CLI as the matrix's
        runtime; the patched files by the paths they would get under ctx.run_dir."""
        image = image_of(cell)
        kept, steps = self.patches.planned(cell, Path(host_path(ctx.run_dir)), self.engine)
        pull_step = self.images.planned(image, before_run=bool(cell.patches))
        if self.wants_gpus():  # `repro` has no command for it: the engine's CLI takes GPUs its own way
            steps.append(Step(f"would probe the {self.engine} engine's GPU request in a short container first"))
        mounted = [(target, str(path)) for target, path in kept]
        return (to_cli_tokens(self._repro_spec(cell, ctx, host_port, image, mounted)),
                [step for step in (pull_step, *steps) if step])

    def _repro_spec(self, cell: Cell, ctx: CellContext, host_port: int, image: str,
                    kept: list[tuple[str, str]]) -> ContainerSpec:
        """The pasted container: removed on exit, and without the owner labels, so `gc` never takes it for a leftover
        of a dead harness."""
        return self.spec(cell, ctx, image=image, patched=kept, name=f"bh-repro-{cell.id}", host_port=host_port,
                         remove=True)

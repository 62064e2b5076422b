"""The container runtime (docker or podman): the cell's argv appended to the image's entrypoint, started through
testcontainers, its log streamed into the same watch loop as a local process.

testcontainers' own waiting and cleanup do not fit a boot harness: its HTTP wait never notices an exited container
(a refusal would cost the whole timeout), its context manager removes a container that failed to start together with
the refusal message, and Ryuk cannot start where images cannot be pulled. So the harness watches the log and the
container state itself, reads the exit code and OOMKilled before removing, and labels every container so `gc` can
remove leftovers of a harness that was killed.

What the container is (image, command, env, mounts, ports, GPUs, ...) is one `ContainerSpec`
(harness.runtime.container_spec), rendered for the API here and for the shell in `repro`.
"""

from __future__ import annotations

import io
import math
import os
import socket
import tarfile
import tempfile
import threading
from pathlib import Path

from harness.matrix.cells import Cell
from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, EngineGone, RuntimeUnavailable, UsageError
from harness.logfacts.timeline import Milestone
from harness.matrix.load import LoadedMatrix
from harness.matrix.model import Mount, PatchSpec
from harness.runtime.records import AppliedPatch, ContainerInfo
from harness.runtime import engine as eng
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.patching import PATCH_ARGS, PatchError, PreparedPatch, patch_file
from harness.runtime.pull import PullObserver, pull
from harness.runtime.container_spec import (HOST, ContainerSpec, build_spec, cache_volume, container_env,
                                            host_path, mount_source, to_cli_tokens, to_engine_kwargs)
from harness.runtime.reader import pump_chunks

#: How often the host port and the exit code are looked for again, and how many times the port.
PORT_POLL_S, PORT_POLLS = 0.05, 50
EXIT_POLL_S, WAIT_RETRY_S = 0.1, 0.2
#: The exit wait asks the engine in slices this long, so a hung engine never holds its thread for good.
WAIT_SLICE_S = 10
#: How long a cell waits for an engine that went away (a restart, an upgrade) to answer again, and how often it asks.
ENGINE_RETURN_S, ENGINE_PING_S = 60.0, 0.5
#: How many times a cell's container is made before an engine that keeps going away under it fails the cell.
START_TRIES = 3


def owner_labels() -> dict[str, str]:
    """Who started a container: gc removes only those whose harness process is gone."""
    return {f"{eng.LABEL_PREFIX}.owner-pid": str(os.getpid()), f"{eng.LABEL_PREFIX}.host": socket.gethostname()}


def log_stream(container):
    """The container's log as it comes, and then its last line if the engine held it back: docker's follow stream
    ends without a final line that has no newline (a server that died mid-line), though the stored log has it."""
    last = b""
    for chunk in container.logs(stream=True, follow=True):
        if chunk:
            last = chunk
        yield chunk
    try:
        tail = container.logs(stream=False, tail=1)
    except Exception:  # noqa: BLE001 - removed already: nobody reads this log any more
        return
    if tail and not tail.endswith(b"\n") and (not last or last.endswith(b"\n")):
        yield tail


class ContainerServer:
    def __init__(self, runtime: ContainerRuntime, tc, argv: list[str], image: str,
                 image_id: str, repo_digest: str | None, patches: list[AppliedPatch], clock: Clock = SYSTEM):
        self.runtime, self.tc = runtime, tc
        self.clock = clock
        self.container = tc.get_wrapped_container()
        self.argv = argv
        self.image, self.image_id, self.repo_digest = image, image_id, repo_digest
        self._patches = patches
        self._state: dict | None = None
        self._stopped = False
        self._lock = threading.Lock()
        #: The first sign that the engine hung or went away while the cell ran (harness.runtime.engine.trouble).
        self.engine_trouble: str | None = None
        self.port = self._host_port()
        self.base_url = f"http://{HOST}:{self.port}" if self.port else f"http://{HOST}:0"

    def _host_port(self) -> int | None:
        key = f"{self.runtime.matrix.container_port}/tcp"
        for _ in range(PORT_POLLS):
            self.container.reload()
            bindings = (self.container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(key)
            if bindings:
                return int(bindings[0]["HostPort"])
            if self.container.status in ("exited", "dead"):
                return None
            self.clock.sleep(PORT_POLL_S)
        return None

    def _noted(self, call: str, exc: BaseException) -> None:
        if self.engine_trouble is None:
            self.engine_trouble = eng.trouble(self.runtime.engine, call, exc, self.runtime.matrix.engine_timeout_s)

    def wait(self, timeout: float | None = None) -> int | None:
        if timeout is None:
            while True:
                try:
                    return int(self.container.wait(timeout=WAIT_SLICE_S)["StatusCode"])
                except Exception:  # noqa: BLE001 - a slice ran out, it was removed under us, or the engine hung up
                    code = self._exit_code()
                    if code is not None or self._stopped:
                        return code
                    self.clock.sleep(WAIT_RETRY_S)
        deadline = self.clock.now() + timeout
        while True:
            code = self._exit_code()
            if code is not None or self.clock.now() >= deadline:
                return code
            self.clock.sleep(min(EXIT_POLL_S, max(0.0, deadline - self.clock.now())))

    def _exit_code(self) -> int | None:
        if self._state is not None:
            return self._state.get("ExitCode")
        try:
            self.container.reload()
        except Exception as exc:  # noqa: BLE001
            self._noted("inspect", exc)
            return None
        state = self.container.attrs.get("State", {})
        if state.get("Status") in ("exited", "dead"):
            return state.get("ExitCode")
        return None

    def owns_listener(self) -> bool:
        """The host port was assigned to this container by the engine; it is ours while the container runs."""
        try:
            self.container.reload()
        except Exception as exc:  # noqa: BLE001
            self._noted("inspect", exc)
            return False
        return self.container.status == "running" and self._host_port() == self.port

    def stop(self, grace_s: float = 2.0) -> int | None:
        """SIGTERM (through the container's init), SIGKILL after `grace_s`, then remove. vLLM ignores SIGTERM
        mid-start-up, and the whole teardown must fit in the 5 s an interrupted run promises: the engine's stop and
        removal add 1-1.5 s on a loaded machine, so a second less grace than the process runtime's 3 s."""
        with self._lock:
            if self._stopped:
                return (self._state or {}).get("ExitCode")
            self._stopped = True
            try:
                if self.container.status == "running" or self._exit_code() is None:
                    self.container.stop(timeout=max(1, math.ceil(grace_s)))
            except Exception as exc:  # noqa: BLE001 - gone already, or the engine is in trouble (noted)
                self._noted("stop", exc)
            try:
                self.container.reload()
                self._state = dict(self.container.attrs.get("State", {}))
            except Exception:  # noqa: BLE001
                self._state = {}
            try:
                self.tc.stop(force=True, delete_volume=True)
            except Exception as exc:  # noqa: BLE001 - gone already; or the engine is away: removed once it is back
                if eng.trouble(self.runtime.engine, "remove", exc, self.runtime.matrix.engine_timeout_s):
                    self.runtime.leave_for_later(self.container.id)
            return self._state.get("ExitCode")

    def container_info(self) -> ContainerInfo:
        return ContainerInfo(
            engine=self.runtime.engine,
            engine_version=self.runtime.info.version if self.runtime.info else None,
            image=self.image, image_digest=self.repo_digest or self.image_id,
            container_id=self.container.id, container_name=self.container.name,
            oom_killed=(self._state or {}).get("OOMKilled"), engine_trouble=self.engine_trouble,
        )

    def applied_patches(self) -> list[AppliedPatch]:
        return list(self._patches)


class ContainerRuntime:
    def __init__(self, loaded: LoadedMatrix, engine: str, clock: Clock = SYSTEM):
        self.name = engine
        self.clock = clock  # its servers' polls and waits
        self.loaded = loaded
        self.matrix = loaded.matrix
        self._client = None
        self.info: eng.EngineInfo | None = None
        self._images: dict[str, tuple[str, str | None]] = {}
        self._prepared: dict[tuple[str, str, str], PreparedPatch] = {}
        self._patch_dir: Path | None = None
        self._image_files: dict[tuple[str, str], bytes | None] = {}
        #: Told about image pulls (the CLI's live display); the default shows nothing.
        self.pull_observer: PullObserver | None = None
        #: One line per fact preflight established that a person should see (GPU probe, patch fuzz).
        self.notes: list[str] = []
        self._container_class = eng.container_class()
        #: Containers of ours the engine could not remove because it was away (a restart): removed when it is back.
        self._leftovers: set[str] = set()
        self._leftovers_lock = threading.Lock()

    @classmethod
    def for_matrix(cls, loaded: LoadedMatrix, clock: Clock = SYSTEM) -> ContainerRuntime:
        return cls(loaded, loaded.matrix.runtime, clock)

    @property
    def client(self):
        if self._client is None:
            self._client = eng.connect(self.name, self.matrix.engine_timeout_s)
            self.info = eng.engine_info(self._client, self.name)
        return self._client

    @property
    def engine(self) -> str:
        """The engine that answers (podman behind `runtime: docker` is podman); the configured one until connected."""
        return self.info.name if self.info else self.name

    # ---- checks before any cell runs
    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        """Everything a run needs, before any cell runs: the engine, images, mounts, patched files, and (with
        `gpu_checks`) that the engine really grants the matrix's GPU request. `repro` prints a command for the
        engine's CLI, which takes GPUs its own way, so it skips the GPU checks."""
        self.client  # noqa: B018 - connect, and read what engine answers
        if gpu_checks and self.wants_gpus():
            assert self.info is not None
            eng.check_gpu_support(self.info)  # the engine's version alone: before any pull
        for cell in cells:
            if not cell.image:
                raise RuntimeUnavailable(f"image: cell {cell.id} has no image (set `image:` or give an axis value one)")
            self.resolve_image(cell.image)
            for mount in cell.mounts:
                src = self.mount_source(mount)
                if not src.exists():
                    raise RuntimeUnavailable(f"mounts: source {src} (for {mount.target}) does not exist")
            for spec in cell.patches:
                self.prepare_patch(cell.image, spec)
        if gpu_checks and self.wants_gpus():
            self._probe_gpus(sorted({c.image for c in cells if c.image}))

    def wants_gpus(self) -> bool:
        return self.matrix.gpus is not None or self.matrix.gpus_per_cell > 0

    def _probe_gpus(self, images: list[str]) -> None:
        assert self.info is not None
        requests = eng.device_requests(self.engine, self.matrix.gpus or "all")
        for image in images:
            image_id, repo_digest = self.resolve_image(image)
            probe = eng.probe_gpus(self.client, repo_digest or image_id, requests, self.engine, owner_labels())
            if not probe.granted:
                raise RuntimeUnavailable(
                    f"gpus: the {self.engine} engine ({self.info.version}) started a probe container from {image} "
                    f"without a GPU ({probe.describe()}): it ignored the request")
            self.notes.append(f"gpus: a probe container from {image} got the GPU request ({probe.describe()})")

    def resolve_image(self, ref: str) -> tuple[str, str | None]:
        if ref in self._images:
            return self._images[ref]
        import docker.errors

        policy = self.matrix.pull
        try:
            if policy == "always":
                pull(self.client, ref, self.pull_observer)
            try:
                found = eng.image_digest(self.client, ref)
            except docker.errors.ImageNotFound:
                if policy == "never":
                    raise RuntimeUnavailable(f"image: {ref} is not present on the {self.engine} engine and `pull: never`"
                                             " (build or load it, or set `pull: missing`)") from None
                pull(self.client, ref, self.pull_observer)
                found = eng.image_digest(self.client, ref)
        except docker.errors.APIError as exc:
            raise RuntimeUnavailable(f"image: cannot get {ref}: {exc.explanation or exc}") from None
        self._images[ref] = found
        return found

    def mount_source(self, mount: Mount) -> Path:
        return mount_source(self.loaded.base_dir, mount)

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        """Through the cell's bind mounts (the longest target that holds `path`), else the image's own file, copied
        out without running it (once per image and path)."""
        for m in sorted(cell.mounts, key=lambda m: len(m.target), reverse=True):
            target = m.target.rstrip("/")
            if path == target or path.startswith(target + "/"):
                return read_host_file(self.mount_source(m) / path[len(target):].lstrip("/"))
        if not cell.image:
            return None
        key = (cell.image, path)
        if key not in self._image_files:
            try:
                self._image_files[key] = self.copy_out(self.resolve_image(cell.image)[0], path)
            except Exception:  # noqa: BLE001 - no such file, an engine error: nothing to predict from, never a failure
                self._image_files[key] = None
        return self._image_files[key]

    def copy_out(self, image: str, path: str) -> bytes:
        """The file as the image has it, without running the image (create, read the archive, remove)."""
        import docker.errors

        c = self.client.containers.create(image, entrypoint=["/bin/true"], command=[], labels=owner_labels())
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
            return tar.extractfile(member).read()

    def patch_source(self, spec: PatchSpec) -> Path:
        return (self.loaded.base_dir / spec.patch).resolve()

    def prepare_patch(self, image: str, spec: PatchSpec) -> PreparedPatch:
        key = (self.resolve_image(image)[0], spec.target, spec.patch)
        if key not in self._prepared:
            pristine = self.copy_out(image, spec.target)
            if self._patch_dir is None:
                self._patch_dir = Path(tempfile.mkdtemp(prefix="boot-harness-patches-"))
            out = self._patch_dir / f"{key[0].split(':')[-1][:12]}-{len(self._prepared)}"
            try:
                prepared = patch_file(pristine, self.patch_source(spec), spec.target, spec.base_sha256,
                                      spec.patched_sha256, out)
            except PatchError as exc:
                raise UsageError(f"{self.loaded.path}: patches: {exc}") from None
            self._prepared[key] = prepared
            for warning in prepared.warnings:
                self.notes.append(f"patches: {Path(spec.patch).name} on {spec.target}: GNU patch: {warning}")
        return self._prepared[key]

    def _kept_patches(self, cell: Cell, dest: Path) -> list[tuple[PreparedPatch, Path]]:
        """Copies of the patched files in the run directory: what was mounted is kept with the results."""
        kept = []
        for i, spec in enumerate(cell.patches):
            prepared = self.prepare_patch(cell.image, spec)
            d = dest / f"{i}-{Path(spec.target).name}"
            d.mkdir(parents=True, exist_ok=True)
            for f in prepared.patched_file.parent.iterdir():
                (d / f.name).unlink(missing_ok=True)  # a copy kept before is read-only (repro twice, as non-root)
                (d / f.name).write_bytes(f.read_bytes())
            patched = d / prepared.patched_file.name
            patched.chmod(0o444)
            kept.append((prepared, patched))
        return kept

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

    def _await_engine(self) -> None:
        """Before each cell: an engine that went away (restarted, upgraded) gets a bounded time to answer again; one
        that does not stops the run (EngineGone: an interrupt, so `--resume` finishes it)."""
        deadline = self.clock.now() + ENGINE_RETURN_S
        while True:
            try:  # on a connection of its own: a pooled one may still reach an engine that is shutting down
                eng.connect(self.name, self.matrix.engine_timeout_s).close()
                self._remove_leftovers()
                return
            except Exception as exc:  # noqa: BLE001 - docker-py raises several unrelated types for "nothing there"
                if self.clock.now() >= deadline:
                    raise EngineGone(f"runtime: the {self.engine} engine has not answered for {ENGINE_RETURN_S:g} s "
                                     f"({type(exc).__name__}): the run stops here") from None
                self.clock.sleep(ENGINE_PING_S)

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> ContainerServer:
        """An engine that goes away while the container is being made (a restart in that second) is waited for and
        the start made again, START_TRIES times at most: a restart is not a verdict on the cell."""
        name = f"bh-{ctx.labels.get('boot-harness.run', 'run')}-{cell.id}"[:200]
        for left in reversed(range(START_TRIES)):
            self._await_engine()
            try:
                return self._start(cell, ctx, on_line, name)
            except Exception as exc:  # noqa: BLE001 - told apart by what it says about the engine
                away = eng.trouble(self.engine, "start", exc, self.matrix.engine_timeout_s)
                if away is None:
                    raise
                self._discard(name)
                if not left:
                    raise CellStartError(f"the {self.engine} engine could not start the container: {away}") from None

    def leave_for_later(self, container_id: str) -> None:
        with self._leftovers_lock:
            self._leftovers.add(container_id)

    def _remove_leftovers(self) -> None:
        """What a cell's teardown could not remove while the engine was away; what still fails stays for the next
        cell, and for `gc` (or the next run's sweep, by the owner labels) when this run has none."""
        with self._leftovers_lock:
            todo = sorted(self._leftovers)
        for cid in todo:
            try:
                self.client.containers.get(cid).remove(force=True)
            except Exception as exc:  # noqa: BLE001
                if eng.trouble(self.engine, "remove", exc, self.matrix.engine_timeout_s):
                    continue  # away again: the next call tries
            with self._leftovers_lock:
                self._leftovers.discard(cid)

    def _discard(self, name: str) -> None:
        """A container the engine created before it went away, so that the next try can take its name."""
        try:
            self._await_engine()
            self.client.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - never created, or gone with the engine
            pass

    def _start(self, cell: Cell, ctx: CellContext, on_line: LineSink, name: str) -> ContainerServer:
        image_id, repo_digest = self.resolve_image(cell.image)
        ctx.mark(Milestone.pulled)
        try:
            kept = self._kept_patches(cell, ctx.run_dir / "patches" / cell.id)
        except (PatchError, UsageError) as exc:
            raise CellStartError(str(exc)) from None
        spec = self.spec(cell, ctx, image=repo_digest or image_id,
                         patched=[(p.target, host_path(path)) for p, path in kept],
                         name=name, labels={**ctx.labels, **owner_labels()})
        tc = None
        try:
            tc = self._testcontainer(spec)
            tc.start()
        except Exception as exc:  # noqa: BLE001 - docker-py's errors, image or device trouble
            if tc is not None:
                try:
                    tc.stop(force=True)
                except Exception:  # noqa: BLE001
                    pass
            if eng.trouble(self.engine, "start", exc, self.matrix.engine_timeout_s):
                raise  # the engine's trouble, not the cell's: `start` waits for it and tries again
            raise CellStartError(f"the {self.engine} engine could not start the container: {exc}") from None
        ctx.mark(Milestone.started)
        wrapped = tc.get_wrapped_container()
        threading.Thread(target=pump_chunks, args=(log_stream(wrapped), on_line), daemon=True,
                         name=f"log-{cell.id}").start()
        entry = list(spec.entrypoint) or (
            self.client.images.get(image_id).attrs.get("Config", {}).get("Entrypoint") or [])
        patches = [AppliedPatch(target=p.target, patch=p.patch, base_sha256=p.base_sha256,
                                patched_sha256=p.patched_sha256, patched_file=str(path.relative_to(ctx.run_dir)),
                                patch_output=p.patch_output, warnings=list(p.warnings))
                   for p, path in kept]
        return ContainerServer(self, tc, [*entry, *spec.args], cell.image, image_id, repo_digest, patches, self.clock)

    def _testcontainer(self, spec: ContainerSpec):
        """testcontainers' container for `spec`: its own setters for what it passes to docker-py itself, the rest
        through `with_kwargs` (one call: it replaces)."""
        kw = to_engine_kwargs(spec)
        tc = self._container_class(kw.pop("image"), docker_client_kw=eng.client_kwargs(self.name, self.matrix.engine_timeout_s))
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
        image_id, repo_digest = self.resolve_image(cell.image)
        kept = [(p.target, host_path(path)) for p, path in self._kept_patches(cell, ctx.run_dir / "patches" / cell.id)]
        return to_cli_tokens(self._repro_spec(cell, ctx, host_port, repo_digest or image_id, kept))

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[str]]:
        """What `command_line` would give, and how each patched file would be made, without touching anything: no
        engine is asked, nothing is pulled, copied or written (`run --dry-run`). The image is named as the matrix
        names it; the patched files by the paths they would get under ctx.run_dir."""
        kept, steps = [], []
        for i, spec in enumerate(cell.patches):
            name = Path(spec.target).name
            path = host_path(ctx.run_dir / "patches" / cell.id / f"{i}-{name}" / name)
            kept.append((spec.target, path))
            steps.append(f"would copy {spec.target} out of {cell.image}, check sha256 {spec.base_sha256[:12]}…, "
                         f"apply {self.patch_source(spec)} with GNU patch {' '.join(PATCH_ARGS)}, check sha256 "
                         f"{spec.patched_sha256[:12]}…, keep it as {path}")
        if self.matrix.pull != "never":
            steps.insert(0, f"would pull {cell.image} {'first' if self.matrix.pull == 'always' else 'if absent'} "
                            f"(pull: {self.matrix.pull})")
        if self.wants_gpus():
            steps.append(f"would probe the {self.engine} engine's GPU request in a short container first")
        return to_cli_tokens(self._repro_spec(cell, ctx, host_port, cell.image, kept)), steps

    def _repro_spec(self, cell: Cell, ctx: CellContext, host_port: int, image: str,
                    kept: list[tuple[str, str]]) -> ContainerSpec:
        """The pasted container: removed on exit, and without the owner labels, so `gc` never takes it for a leftover
        of a dead harness."""
        return self.spec(cell, ctx, image=image, patched=kept, name=f"bh-repro-{cell.id}", host_port=host_port,
                         remove=True)

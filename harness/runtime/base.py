"""What a runtime is: something that starts one cell's server and hands back a handle the watch loop can observe.

Runtimes are Protocols, so a fake runtime for a unit test is a small class, and the process and container runtimes are
watched by exactly the same loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from harness.logfacts.timeline import Milestone
from harness.masking import Masker
from harness.matrix.cells import Cell
from harness.memory.probe import MemoryProbe
from harness.runtime.pull import PullObserver
from harness.runtime.records import AppliedPatch, ContainerInfo, ServerStop
from harness.shell import Step

#: Called by the runtime's reader thread with each physical log line (no trailing newline), then once with None at EOF.
LineSink = Callable[[str | None], None]
#: Told when a milestone the runtime sees happened (the image present, the server started), at the moment it happens.
MilestoneSink = Callable[[Milestone], None]


def _unmarked(milestone: Milestone) -> None:
    pass


@dataclass
class CellContext:
    """Where one cell's files go and how to mask what it writes."""

    run_dir: Path
    work_dir: Path
    masker: Masker
    matrix_dir: Path
    labels: dict[str, str] = field(default_factory=dict)
    #: GPUs the scheduler gave this cell (device indices or ids); None means the matrix's own `gpus` request.
    gpu_ids: list[str] | None = None
    #: Where the runtime reports `pulled` and `started` (the cell's timeline).
    mark: MilestoneSink = _unmarked
    #: The compile cache directory this cell's server uses (harness.runtime.compile_cache); None: its own, cold.
    compile_cache: Path | None = None


@runtime_checkable
class Server(Protocol):
    """A started server. Every method is safe to call from the watch loop; `stop` is idempotent and final."""

    base_url: str
    argv: list[str]

    @property
    def port(self) -> int | None:
        """The host port the server listens on (None when the engine has not said yet)."""

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the server has exited, None if still running after `timeout`."""

    def owns_listener(self) -> bool:
        """Whether what answers on `base_url` is this server (not a stale one left on the port)."""

    def stop(self, grace_s: float = 5.0) -> ServerStop:
        """Terminate, then kill after `grace_s`; returns how that ended the server (its exit code inside), told from
        what the stop did, with its seconds on the runtime's clock. A second stop returns the first one's value."""

    def container_info(self) -> ContainerInfo | None:
        """Engine, image and digest for container runtimes; None for a local process."""

    def applied_patches(self) -> list[AppliedPatch]:
        """Patches applied for this cell (container runtimes)."""

    def pids(self) -> set[int]:
        """The host PIDs of the server's processes now (a container's through its init's PID from the engine); empty
        when this host cannot see them. NVML's per-process figures are matched against these."""

    def memory_probe(self) -> MemoryProbe:
        """Where the server's memory is read on this host while it boots (harness.memory): its process tree, or the
        container engine's stats. A GPU cell's curve reads NVML instead, with `pids`."""


class Runtime(Protocol):
    """Every member a caller uses is here, so callers trust it and a fake is a small class (harness.runtime.fake)."""

    name: str
    #: Lines to say once preflight is done (what the GPU probe found, patch warnings); empty when nothing to say.
    notes: list[str]
    #: Told about image pulls as they go (the live progress); None: pulls are silent. Runtimes that pull nothing
    #: keep it and never call it.
    pull_observer: PullObserver | None

    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        """Raise RuntimeUnavailable (exit 2, before any cell runs) when this runtime cannot run these cells here.
        Without `gpu_checks`, what only the harness's own GPU request needs is skipped (`repro` prints a command for the
        engine's CLI)."""

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> Server:
        """Start the cell's server; raise CellStartError when it cannot be started."""

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        """Shell tokens a person would run by hand for this cell (secrets as `$NAME` references; see harness.shell)."""

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[Step]]:
        """What `command_line` would print, and each step it would take first (pull, copy, patch: in words and as shell
        commands), touching nothing: no engine asked, no file written (`run --dry-run`, `repro`)."""

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        """A file as the cell's server sees it at `path` (a model's config.json, for the KV prediction): the host's
        file for a process, a bind mount's source or the image's own file for a container; None when unreadable."""

    def image_labels(self, ref: str) -> dict[str, str]:
        """An image's labels as its engine has them (OCI revision, version, created: what `bisect` says changed
        between two builds); empty for a runtime that runs no images. Raises on an engine error."""

    def image_digest(self, ref: str) -> str | None:
        """What a cell record run on `ref` now would hold as its image digest (ContainerInfo.image_digest: the repo
        digest, else the image id), pulled first as `pull:` says: how `bisect --from` knows a night booted this very
        build. None for a runtime that runs no images. Raises RuntimeUnavailable when the image cannot be had."""


def read_host_file(path: Path) -> bytes | None:
    """`path` on this host (a directory means its config.json), or None: what a process server would read."""
    from harness.errors import FileRefused
    from harness.files import read_bytes

    try:  # a regular file only, bounded: a FIFO or /dev/zero named as the model neither blocks nor fills memory
        return read_bytes(path)
    except FileRefused:
        return None

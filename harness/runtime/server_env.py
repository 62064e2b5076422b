"""A cell's server environment, built in one place for both runtimes, so a local process, its printed command line and
a container cannot drift apart.

Every compile cache a server writes (vLLM's, inductor's, Triton's) lands in one place chosen by one rule: under the
run's shared compile cache when there is one, else in the cell's own scratch. A cache left to its default (Triton's
is ~/.triton) would be shared by every cell, at once under `--parallel`, and outlive the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.runtime import scratch

#: What every server gets: plain logs (the parser still strips ANSI), and output that is not held back in a buffer.
SERVER_ENV = {"NO_COLOR": "1", "VLLM_DISABLE_LOG_LOGO": "1", "PYTHONUNBUFFERED": "1"}
#: Marks every process of a local server (children inherit it) with the id its active/ record holds: gc kills a
#: recorded process group only while a process in it still carries the id, never a group that merely reuses the number.
SERVER_ID_VAR = "BOOT_HARNESS_SERVER_ID"
#: The compile caches a server writes: the variable that places each, and the name of its folder.
CACHE_DIRS = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def cache_env(root: str) -> dict[str, str]:
    """The variables that put every compile cache under `root` (as the server sees it: a container's mount point)."""
    return {var: f"{root}/{name}" for var, name in CACHE_DIRS.items()}


def cell_dirs(work_dir: Path) -> dict[str, str]:
    """A private TMPDIR and caches per cell, made now. TMPDIR is short and outside the run directory: vLLM puts its
    zmq IPC sockets there, and a unix socket path longer than 107 bytes makes the engine fail to start."""
    work_dir.mkdir(parents=True, exist_ok=True)
    short_tmp = work_dir / "tmp"
    if not short_tmp.is_symlink() and not short_tmp.exists():
        short_tmp.symlink_to(scratch.make_tmp(work_dir))
    dirs = {"TMPDIR": short_tmp.resolve(), **{var: work_dir / f"{name}-cache" for var, name in CACHE_DIRS.items()}}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


def gpu_env(gpu_ids: list[str] | None) -> dict[str, str]:
    """A local server sees only the GPUs the scheduler gave its cell (a container is given them by the engine)."""
    return {} if gpu_ids is None else {"CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)}


def build_env(cell_env: Mapping[str, str], *, cache_root: str | None, work_dir: Path | None = None,
              gpu_ids: list[str] | None = None, server_id: str | None = None,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment, each layer over the one before: what it inherits (`base`: a local process gets the
    harness's), the plain-log defaults, the cell's scratch (`work_dir`, made now; only a server that really starts has
    one), the shared compile cache at `cache_root` (over the scratch's caches), the matrix's and cell's `env` (the
    user's word over defaults), the GPUs the scheduler gave the cell, and the server id gc proves a process group by."""
    return {**(base or {}), **SERVER_ENV, **(cell_dirs(work_dir) if work_dir is not None else {}),
            **(cache_env(cache_root) if cache_root is not None else {}), **cell_env, **gpu_env(gpu_ids),
            **({SERVER_ID_VAR: server_id} if server_id is not None else {})}

"""A torch.compile cache the cells of a run share, so the first cell of a configuration compiles and the rest load.

vLLM keys its cache by a hash of the configuration (`VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_i_j/…`) but
guarantees nothing to two processes writing one directory at once: its index (`vllm_compile_cache.py`) is rewritten
with a plain `open(…, "w")` (compilation/backends.py, 0.8–0.34), so a reader can meet half a file. So:

- one cell at a time: each cell's server uses the shared directory itself (the same path every time, which older
  releases' caches need: they record absolute paths);
- several cells at once (`--parallel`): each gets a private copy of the shared directory, and after it ends the files
  it added are moved in, each one complete before it appears (a copy under a temporary name, then `os.replace`), the
  artifacts before the indexes that name them, never over a file already there. A cell whose compile did not finish
  adds nothing.

Modes (`compile_cache:` in the matrix): `run` (default; a directory per run, removed with its scratch), `none` (every
cell cold, in its own scratch), or a path (the user's, kept across runs).

A container's server may run as another user than the harness, so the folders the harness creates for the cache are
opened to all (0777); a folder it did not create keeps its mode, and a path that is `/`, a home, the current folder,
the matrix's folder or its repository (or a folder holding one of them, or a symlink to it) is refused
(harness/matrix/cache_path.py `refusal`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness import nofollow
from harness.errors import FileRefused
from harness.runtime import scratch
from harness.runtime.records import CompileCacheUse
from harness.runtime.server_env import cache_env
from harness.walk import walk

#: Where a container sees the cache (the same path in every cell, whatever the host directory).
CONTAINER_DIR = "/var/cache/boot-harness-compile"
#: The run's shared directory, beside its cells' scratch.
RUN_DIR_NAME = "compile-cache"
#: Files that name other files of the cache: moved in last, so they never point at what is not there yet.
_INDEXES = ("vllm_compile_cache.py", "cache_key_factors.json")


def planned_dir(setting: str, matrix_dir: Path, run_dir: Path | None) -> Path | None:
    """The shared directory a run would use, touching nothing (`run --dry-run`, `repro`): None for `none`, and for
    `run` without a run directory."""
    if setting == "none":
        return None
    if setting == "run":
        return None if run_dir is None else run_dir / RUN_DIR_NAME
    root = Path(os.path.expanduser(setting))
    return root if root.is_absolute() else (matrix_dir / root).resolve()


def _files(root: Path) -> list[Path]:
    """The regular files under `root`, links never followed; no recursion (the server writes this tree)."""
    return [p for folder, _, names in walk(root) for p in (Path(folder, n) for n in names)
            if p.is_file() and not p.is_symlink()]


def _count(root: Path) -> int:
    return len(_files(root)) if root.is_dir() else 0


def make_dirs(path: Path, open_below: Path) -> list[Path]:
    """`mkdir -p path`; the folders it created at or below `open_below` are opened to all (0777): only what the
    harness created changes mode. Returns the folders created."""
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours
        created.append(d)
        if d == open_below or open_below in d.parents:
            _open(d)
    return created


def _open(d: Path) -> None:
    """A folder the harness created: a container's server running as another user must be able to write it. Changed
    on its own descriptor, never through a link swapped in for it."""
    try:
        nofollow.fchmod_dir(d.parent, d, 0o777)
    except (OSError, FileRefused):
        pass


def _open_copy(root: Path) -> None:
    """Open every folder of a tree the harness copied itself (a cell's private copy); a symlink is not followed."""
    for top, _, _ in walk(root):  # a link is never entered
        _open(Path(top))


def merge(source: Path, into: Path) -> int:
    """Move the files `source` has and `into` lacks into `into`, each atomically; returns how many."""
    new = [p for p in _files(source) if not (into / p.relative_to(source)).exists()]
    new.sort(key=lambda p: p.name in _INDEXES)  # artifacts first, indexes last
    added = 0
    for path in new:
        dest = into / path.relative_to(source)
        tmp = dest.with_name(f".{dest.name}.bh-{os.getpid()}.tmp")
        try:
            make_dirs(dest.parent, into)
            shutil.copy2(path, tmp)
            if dest.exists():  # another cell got there first: its file is as good
                tmp.unlink()
                continue
            os.replace(tmp, dest)
            added += 1
        except OSError:
            tmp.unlink(missing_ok=True)
    return added


@dataclass
class Checkout:
    """The directory one cell's server uses, and where it came from."""

    path: Path
    private: bool
    files_before: int


class CompileCache:
    """The run's shared compile cache (None root: every cell keeps its own, cold)."""

    def __init__(self, mode: str, root: Path | None, private: bool, owned: bool):
        self.mode, self.root, self.private, self.owned = mode, root, private, owned

    @classmethod
    def for_run(cls, setting: str, matrix_dir: Path, run_dir: Path, parallel: int) -> CompileCache:
        root = planned_dir(setting, matrix_dir, run_dir)
        if root is None:
            return cls("none", None, False, False)
        owned = setting == "run"
        if owned:  # made anew in the run folder, never through a link; one already there is someone's (refused)
            scratch.claim(root, run_dir)
            nofollow.fchmod_dir(run_dir, root, 0o777)
            for sub in cache_env(str(root)).values():
                with nofollow.folder(run_dir, Path(sub), create=True) as fd:
                    os.fchmod(fd, 0o777)
        else:
            make_dirs(root, root)
            for sub in cache_env(str(root)).values():
                make_dirs(Path(sub), root)
        return cls("run" if owned else "path", root, parallel > 1, owned)

    def checkout(self, work_dir: Path) -> Checkout | None:
        """The directory for a cell whose scratch is `work_dir`."""
        if self.root is None:
            return None
        if not self.private:
            return Checkout(self.root, False, _count(self.root))
        mine = work_dir / "compile-cache"
        shutil.copytree(self.root, mine, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(scratch.OWNER_FILE, ".*.tmp"))
        _open_copy(mine)
        return Checkout(mine, True, _count(mine))

    def checkin(self, used: Checkout | None, compiled: bool, hit: bool | None) -> CompileCacheUse | None:
        """After the cell's server is gone: a private copy's new files go to the shared directory when its compile
        finished (`compiled`); what the cell did with the cache, for its record."""
        if used is None or self.root is None:
            return None
        if used.private:
            added = merge(used.path, self.root) if compiled else 0
        else:
            added = max(0, _count(self.root) - used.files_before)
        return CompileCacheUse(mode=self.mode, dir=str(self.root), private_copy=used.private,
                               files_before=used.files_before, files_added=added, hit=hit)

    def close(self, keep: bool = False) -> None:
        """The run is over: a run's own cache goes with it (kept, with --keep-work, for a person to look at)."""
        if self.owned and self.root is not None:
            scratch.remove(self.root, keep)

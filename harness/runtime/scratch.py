"""A cell's scratch directory, `work/<cell>` in the run directory (caches, and a `tmp` link to its short TMPDIR under
the system's temp folder): made when the cell starts, removed when it ends. It carries the owner's pid so that after a
SIGKILL, which runs no teardown, `gc` and the next run can tell a dead run's scratch from a live one's.

What is removed must be proven the harness's: a work dir by its `.owner.json`, reached without a symlink; its TMPDIR by
a mark naming that work dir. A symlink inside is removed as a link, never followed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

from harness.errors import FileRefused
from harness.files import read_bytes

OWNER_FILE = ".owner.json"
#: Prefix of the short TMPDIR a process-runtime cell gets (harness.runtime.server_env.cell_dirs).
TMP_PREFIX = "bh-"
#: In a cell's TMPDIR: the work dir it belongs to, so a `tmp` link pointed elsewhere is never followed.
TMP_MARK = ".boot-harness-work"
#: Linux's largest pid: a pid above it names no process.
PID_MAX_LIMIT = 2**22
#: The most of a mark file read: ours are one short line.
MARK_MAX_BYTES = 64 * 1024


def read_mark(path: Path) -> str | None:
    """A small mark file's text, or None (harness.files: never through a symlink, never blocking on a FIFO)."""
    try:
        return read_bytes(path, MARK_MAX_BYTES, follow=False).decode("utf-8", "replace")
    except FileRefused:
        return None


def through_symlink(path: Path, base: Path) -> bool:
    """Whether `path`, or a folder between `base` and it, is a symlink (what is under `base` is reached only directly)."""
    path, base = Path(path), Path(base)
    for p in (path, *path.parents):
        if p == base:
            return False
        if p.is_symlink():
            return True
    return False


def claim(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    return work


def make_tmp(work: Path) -> Path:
    """A short TMPDIR for the cell whose scratch is `work`, marked with it."""
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
    (tmp / TMP_MARK).write_text(str(work.resolve()))
    return tmp


def _own_tmp(work: Path) -> Path | None:
    """The TMPDIR `work/tmp` links to, if it is the one made for `work` (make_tmp); None for a link pointed elsewhere."""
    link = work / "tmp"
    if not link.is_symlink():
        return None
    target = Path(os.path.realpath(link))
    if not target.name.startswith(TMP_PREFIX) or target.is_symlink() or not target.is_dir():
        return None
    return target if read_mark(target / TMP_MARK) == str(work.resolve()) else None


def remove(work: Path, keep: bool = False) -> None:
    """Gone, with the TMPDIR its `tmp` link points to; or, with keep, left for a person and no longer ours to sweep.
    rmtree removes a symlink inside as a link: what it points to is left."""
    if keep:
        (work / OWNER_FILE).unlink(missing_ok=True)
        return
    if work.is_symlink():
        return  # not a folder the harness made
    tmp = _own_tmp(work)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)


def owner_dead(work: Path, alive) -> bool:
    """Whether `work` was claimed by a harness process of this host that is gone (never: unclaimed, kept, ours)."""
    try:
        owner = json.loads(read_mark(work / OWNER_FILE) or "")
        pid, host = int(owner["pid"]), owner["host"]
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return False
    return host == socket.gethostname() and 0 < pid != os.getpid() and not alive(pid)


def sweep(results_dir: Path, alive) -> list[Path]:
    """Remove the scratch of cells whose harness died; returns what was removed. A work dir reached through a
    symlink (the run dir, `work`, or the cell's folder itself a link) is not the harness's to remove."""
    removed = []
    owned = [*Path(results_dir).glob(f"*/work/*/{OWNER_FILE}"), *Path(results_dir).glob(f"*/compile-cache/{OWNER_FILE}")]
    for work in sorted(owned):
        cell = work.parent
        if not through_symlink(cell, results_dir) and owner_dead(cell, alive):
            remove(cell)
            removed.append(cell)
    return removed

"""A cell's scratch directory, `work/<cell>` in the run directory (caches, and a `tmp` link to its short TMPDIR under
the system's temp folder): made when the cell starts, removed when it ends. It carries the owner's pid so that after a
SIGKILL, which runs no teardown, `gc` and the next run can tell a dead run's scratch from a live one's.

What is removed must be proven the harness's: a work dir by this process having made it (claim: made anew, known by
its identity) or, after a SIGKILL, by its `.owner.json` naming a dead harness, reached without a symlink; its TMPDIR
by a mark naming that work dir. A symlink inside is removed as a link, never followed; a folder already at a work
dir's path when a cell starts is someone's, refused and left (harness.nofollow)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from harness import nofollow
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
    """Whether `path`, or a folder between `base` and it, is a symlink (what is under `base` is reached only
    directly)."""
    path, base = Path(path), Path(base)
    for p in (path, *path.parents):
        if p == base:
            return False
        if p.is_symlink():
            return True
    return False


#: The work dirs this process made (claim), by path: only these does `remove` remove, and only while the path still
#: holds the very folder made (harness.nofollow.Made).
_made: dict[Path, nofollow.Made] = {}
_guard = threading.Lock()


def claim(work: Path, anchor: Path | None = None) -> Path:
    """`work` made now, never through a link below `anchor` (the run folder; default the folder that holds it), and
    marked with this process's pid. Something already there is refused (FileRefused) and left alone: what this run
    did not make is not its to fill or remove — but a folder this process made before (a retried cell's kept scratch)
    is taken again."""
    work = Path(work)
    anchor = work.parent if anchor is None else Path(anchor)
    with _guard:
        made = _made.get(work)
    if made is None or not made.still():
        made = nofollow.make_dir(anchor, work)
        with _guard:
            _made[work] = made
    nofollow.write_atomic(made.anchor, work / OWNER_FILE,
                          json.dumps({"pid": os.getpid(), "host": socket.gethostname()}), mode=0o644)
    return work


def made_here(path: Path) -> bool:
    """Whether this process made the folder at `path` (claim) and it is still that folder."""
    with _guard:
        made = _made.get(Path(path))
    return made is not None and made.still()


def make_tmp(work: Path) -> Path:
    """A short TMPDIR for the cell whose scratch is `work`, marked with it."""
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
    (tmp / TMP_MARK).write_text(str(work.resolve()))
    return tmp


def _own_tmp(made: nofollow.Made) -> Path | None:
    """The TMPDIR `work/tmp` links to, if it is the one made for `work` (make_tmp); None for a link pointed elsewhere.
    The link is read from the work dir's own descriptor (never through a link to the work dir)."""
    try:
        with nofollow.folder(made.anchor, made.path) as fd:
            target = Path(os.readlink("tmp", dir_fd=fd))
    except (OSError, FileRefused):
        return None
    if not target.is_absolute() or not target.name.startswith(TMP_PREFIX) or target.is_symlink() \
            or not target.is_dir():
        return None
    return target if read_mark(target / TMP_MARK) == str(made.path.resolve()) else None


def remove(work: Path, keep: bool = False) -> None:
    """Gone, with the TMPDIR its `tmp` link points to; or, with keep, left for a person and no longer ours to sweep.
    Only a work dir this process made (claim), still that folder: anything else at the path is left. A link inside
    is removed as a link: what it points to is left."""
    work = Path(work)
    with _guard:
        made = _made.get(work)
    if made is None:
        return  # not a folder this process made
    if keep:
        nofollow.unlink(made.anchor, work / OWNER_FILE)
        return
    _remove_tree(made)
    with _guard:
        _made.pop(work, None)


def _remove_tree(made: nofollow.Made) -> bool:
    tmp = _own_tmp(made)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return nofollow.remove_made(made)


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
    owned = [*Path(results_dir).glob(f"*/work/*/{OWNER_FILE}"),
             *Path(results_dir).glob(f"*/compile-cache/{OWNER_FILE}")]
    for work in sorted(owned):
        cell = work.parent
        if through_symlink(cell, results_dir):
            continue
        found = nofollow.identify(Path(results_dir), cell)  # the folder as it is now, reached without a link
        if found is not None and owner_dead(cell, alive) and _remove_tree(found):
            removed.append(cell)
    return removed

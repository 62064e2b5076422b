"""A cell's scratch directory, `work/<cell>` in the run directory (caches, and a `tmp` link to its short TMPDIR under
the system's temp folder): made when the cell starts, removed when it ends. It carries the owner's pid so that after a
SIGKILL, which runs no teardown, `gc` and the next run can tell a dead run's scratch from a live one's."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

OWNER_FILE = ".owner.json"
#: Prefix of the short TMPDIR a process-runtime cell gets (harness.runtime.process.cell_dirs).
TMP_PREFIX = "bh-"


def claim(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    return work


def remove(work: Path, keep: bool = False) -> None:
    """Gone, with the TMPDIR its `tmp` link points to; or, with keep, left for a person and no longer ours to sweep."""
    if keep:
        (work / OWNER_FILE).unlink(missing_ok=True)
        return
    tmp = work / "tmp"
    if tmp.is_symlink():
        target = tmp.resolve()
        if target.name.startswith(TMP_PREFIX):  # ours by name: a link that was edited to point elsewhere is not followed
            shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)


def owner_dead(work: Path, alive) -> bool:
    """Whether `work` was claimed by a harness process of this host that is gone (never: unclaimed, kept, ours)."""
    try:
        owner = json.loads((work / OWNER_FILE).read_text())
        pid, host = int(owner["pid"]), owner["host"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return host == socket.gethostname() and pid != os.getpid() and not alive(pid)


def sweep(results_dir: Path, alive) -> list[Path]:
    """Remove the scratch of cells whose harness died; returns what was removed."""
    removed = []
    owned = [*Path(results_dir).glob(f"*/work/*/{OWNER_FILE}"), *Path(results_dir).glob(f"*/compile-cache/{OWNER_FILE}")]
    for work in sorted(owned):
        cell = work.parent
        if owner_dead(cell, alive):
            remove(cell)
            removed.append(cell)
    return removed

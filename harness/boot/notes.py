"""The harness's own lines in a cell's log (`[boot-harness] ...`): which GPUs the cell had and how the idle wait
before it went, the retry's account. Appended after the server's log is closed, so a person reading the log sees
them in one place; a log that cannot be written to loses the note, never the cell."""

from __future__ import annotations

import os
from pathlib import Path

from harness import nofollow
from harness.errors import FileRefused
from harness.gpu.idle import IdleWait
from harness.gpu.records import GpuInfo


def note(log: Path, *lines: str) -> None:
    """Harness lines appended to a cell's log, `RUN/logs/<id>.log`: reached from the run folder never through a link,
    into a file boot-harness wrote (harness.nofollow); a log that is not is left as it is, unwritten."""
    try:
        with os.fdopen(nofollow.open_file(log.parents[1], log, append=True), "a", encoding="utf-8") as f:
            for line in lines:
                f.write(f"[boot-harness] {line}\n")
    except (OSError, FileRefused):
        pass


def gpu_line(gpus: list[GpuInfo]) -> str:
    return "gpus: " + "; ".join(
        f"{g.index} (id {g.id}, {g.name}, driver {g.driver}, {g.free_gib} of {g.total_gib} GiB free at start)"
        for g in gpus)


def gpu_notes(log: Path, gpus: list[GpuInfo] | None, wait: IdleWait | None) -> None:
    """The cell's GPUs and how the wait for them went; nothing on a CPU slot."""
    if gpus:
        note(log, gpu_line(gpus), *([f"before start: {wait.describe()}"] if wait else []))

"""`bisect --from RUN...`: an end's verdict that a night already recorded, read instead of booted again.

The nightly user comes to bisect because `history` said since which night the cell refuses: last good night and the
first bad one are records already, of this very cell on the ends' images. Booting them again costs two boots of
⌈log2⌉ + 2 and proves nothing new — when the record is provably of the same boot. A record stands for an end's boot
only when all of these hold, else the end is booted and the reason said:

- it is the cell's own record (the cell id), in a run that completed (an interrupted run's cells are never a verdict,
  as in `history`);
- its run booted the same matrix file (its sha256: the same flags, env, patches and mounts) with the same boot-harness
  (the verdict's words are the catalogue's of that version);
- its image digest is the digest the end's reference resolves to now (pulled first as `pull:` says): the same build;
- its outcome is a verdict, not an `error` (an environment fault).

A process build has no digest that proves it is the command a record ran: `--from` is for container cells. The
verdict alone is read (`--on time|memory` compare boots of one bisect run, on one host, under one load). With
`--repeat K` up to K such records, newest first, stand for the end's K boots; fewer are made up by boots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.history_runs import run_dirs
from harness.errors import UsageError
from harness.results.model import CellResult, RunResult, RunStatus
from harness.results.store import load_run
from harness.verdict import Outcome


@dataclass(frozen=True)
class Recorded:
    """One record of the cell, in the run that holds it."""

    run_dir: Path
    run: RunResult
    cell: CellResult


@dataclass(frozen=True)
class Wanted:
    """What a record must have been booted with to stand for an end's boot."""

    cell_id: str
    matrix_sha256: str
    harness_version: str
    digest: str | None


def unfit(r: Recorded, want: Wanted) -> str | None:
    """Why this record is not of the boot wanted (a short phrase), None when it is."""
    if r.run.status != RunStatus.complete:
        return f"its run is {r.run.status}"
    if r.run.matrix.sha256 != want.matrix_sha256:
        return "another matrix file (its sha256 differs)"
    if r.run.harness_version != want.harness_version:
        return f"another boot-harness ({r.run.harness_version})"
    digest = r.cell.container.image_digest if r.cell.container is not None else None
    if digest is None:
        return "no image digest"
    if want.digest is None or digest != want.digest:
        return "another image digest"
    if r.cell.outcome == Outcome.error:
        return "an error (an environment fault, not a verdict)"
    return None


class FromRuns:
    """The cell's records in the runs given (run directories or folders of runs, as `history` takes them)."""

    def __init__(self, paths: Sequence[Path], cell_id: str):
        dirs = run_dirs(paths)
        if not dirs:
            raise UsageError(f"--from {' '.join(map(str, paths))}: holds no run (no results.json at or under it)")
        self.runs = len(dirs)
        self.cell_id = cell_id
        found: list[Recorded] = []
        for d in dirs:
            run, _ = load_run(d)
            found += [Recorded(d, run, c) for c in run.cells if c.cell_id == cell_id]
        self.records = sorted(found, key=lambda r: r.run.started_at, reverse=True)

    def find(self, want: Wanted, k: int) -> tuple[list[Recorded], str | None]:
        """The newest `k` records of the boot wanted; when there are none, why (one phrase for the step's line)."""
        fit = [r for r in self.records if unfit(r, want) is None][:k]
        if fit:
            return fit, None
        if not self.records:
            return [], f"no record of {self.cell_id} in {self.runs} run(s)"
        why = Counter(unfit(r, want) for r in self.records)
        return [], (f"{len(self.records)} record(s) of {self.cell_id}, none of this build: "
                    + ", ".join(f"{n} of {w}" if n > 1 else str(w) for w, n in why.most_common()))

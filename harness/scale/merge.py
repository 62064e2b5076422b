"""`boot-harness merge RUN_DIR... --out DIR`: the runs of a matrix's shards as one run directory.

Refused (UsageError, exit 2): runs of different matrices (matrix sha256, or one sha256 under two names), of different
harness versions or selections, shards of different splits (1/2 with 1/3), of two schedulers (Buildkite beside Slurm)
or the same shard twice, a shard holding a cell of another shard, a cell the matrix does not have (when its file is at
hand), any cell id recorded by two runs, and an input whose records cannot all be read (harness.results.store's one
loader). Cell records are written fresh from what was loaded; every input's
`logs/` (retried attempts' logs included) and `patches/` are copied — regular files only: a symbolic link (to
anything, inside the run or out) or a FIFO/device is never followed nor copied, and each one skipped is a warning
line, so a merged run (an uploaded artifact) holds nothing from outside its inputs. `results.json` is written fresh,
in the matrix's cell order when the matrix file is at hand, else by cell id. The result is an ordinary run directory:
`report`, `compare` and even `run --resume` take it.

Its status is `complete` only if every input was complete and, for shards, every shard 1..N is there; otherwise
`interrupted` (resumable: `run --resume` boots the cells the missing shard would have). Where each cell came from —
each input's run id, shard, scheduler job, host, status and cell ids — is `merged_from` in results.json and, for
readers of older schemas, `merge.json` beside it. A missing shard is named by the job that should have run it when the
shards ran under a scheduler (`--shard auto`): "missing shard(s) 3/4 (Slurm job 4242_2)".
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.files import copy_regular, kind_of
from harness.matrix.shard import parse_shard, shard_of
from harness.results.model import CellResult, RunResult, RunStatus
from harness.results.store import atomic_write_text, load_run, summarize
from harness.walk import walk

MERGE_FILE = "merge.json"


@dataclass
class MergeOutcome:
    run: RunResult
    run_dir: Path
    sources: list[dict]
    #: Lines for stderr: missing shards, incomplete inputs, how the cells were ordered.
    warnings: list[str] = field(default_factory=list)


def _load(run_dir: Path) -> RunResult:
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    return load_run(run_dir)[0]  # the cells on disk are the truth


def _source(run_dir: Path, run: RunResult) -> dict:
    return {"run_id": run.run_id, "shard": run.shard,
            "scheduler": run.scheduler.model_dump(mode="json") if run.scheduler else None,
            "status": run.status, "host": run.host.model_dump(),
            "started_at": run.started_at.isoformat(), "finished_at": run.finished_at.isoformat()
            if run.finished_at else None, "harness_version": run.harness_version,
            "cells": [c.cell_id for c in run.cells], "path": str(run_dir)}


def check_compatible(runs: list[tuple[Path, RunResult]]) -> tuple[bool, list[str]]:
    """Raise UsageError for inputs that are not pieces of one run; return whether together they are complete, and a
    warning for each reason they are not."""
    warnings: list[str] = []
    first_dir, first = runs[0]
    seen_paths: dict[Path, Path] = {}
    for d, _ in runs:
        real = d.resolve()
        if real in seen_paths:
            raise UsageError(f"{d}: given twice")
        seen_paths[real] = d
    for d, r in runs[1:]:
        if r.matrix.sha256 != first.matrix.sha256:
            raise UsageError(f"{d} and {first_dir} are runs of different matrices (sha256 {r.matrix.sha256[:12]}… vs "
                             f"{first.matrix.sha256[:12]}…)")
        if r.matrix.name != first.matrix.name:  # one file's bytes hold one name: a record was edited
            raise UsageError(f"{d} is a run of matrix {r.matrix.name!r}, {first_dir} of {first.matrix.name!r}, with "
                             "one sha256: a record was edited, not one matrix run")
        if r.harness_version != first.harness_version:
            raise UsageError(f"{d} was run by boot-harness {r.harness_version}, {first_dir} by "
                             f"{first.harness_version}: shards of one run are run by one harness version")
        if r.runtime != first.runtime:
            raise UsageError(f"{d} ran on {r.runtime}, {first_dir} on {first.runtime}: not one matrix run")
        if sorted(r.selection) != sorted(first.selection):
            raise UsageError(f"{d} and {first_dir} selected different cells ({r.selection or 'all'} vs "
                             f"{first.selection or 'all'}): not shards of one run")
    shards = [(d, r.shard) for d, r in runs if r.shard]
    if shards:
        if len(shards) != len(runs):
            plain = next(d for d, r in runs if not r.shard)
            raise UsageError(f"{plain} is not a shard, {shards[0][0]} is shard {shards[0][1]}: not shards of one run")
        parsed: dict[int, dict[int, Path]] = {}
        for d, s in shards:
            i, n = parse_shard(s)
            parsed.setdefault(n, {})
            if i in parsed[n]:
                raise UsageError(f"shard {s} twice: {parsed[n][i]} and {d}")
            parsed[n][i] = d
        if len(parsed) > 1:
            raise UsageError(f"shards of different splits ({', '.join(sorted({s for _, s in shards}))}): "
                             "every shard must be I/N with the same N")
        (n, have), = parsed.items()
        kinds = {r.scheduler.kind: d for d, r in runs if r.scheduler is not None}
        if len(kinds) > 1:  # a shard run by hand (no scheduler) beside them is a rerun of one of them, and fine
            (a, da), (b, db) = list(kinds.items())[:2]
            raise UsageError(f"{da} is a {a.label} shard, {db} a {b.label} one: shards of one run come from one "
                             "scheduler")
        for d, r in runs:
            i, _ = parse_shard(r.shard or "")
            stray = next((c.cell_id for c in r.cells if shard_of(c.cell_id, n) != i), None)
            if stray is not None:
                raise UsageError(f"{d} is shard {r.shard} but holds cell {stray}, which is shard "
                                 f"{shard_of(stray, n)}/{n}'s: a record was moved or edited")
        missing = [_missing(i, n, runs) for i in range(1, n + 1) if i not in have]
        if missing:
            warnings.append(f"missing shard(s) {', '.join(missing)}: the merged run is marked interrupted")
    owner: dict[str, Path] = {}
    for d, r in runs:
        for c in r.cells:
            if c.cell_id in owner:
                raise UsageError(f"cell {c.cell_id} is in both {owner[c.cell_id]} and {d}: shards must not overlap")
            owner[c.cell_id] = d
    for d, r in runs:
        if r.status != RunStatus.complete:
            warnings.append(f"{d} is {r.status}: the merged run is marked interrupted")
    return not warnings, warnings


def _missing(i: int, n: int, runs: list[tuple[Path, RunResult]]) -> str:
    """Shard `i/n`, and the scheduler job that should have run it when the shards that came agree on their split
    (one build, Job or array)."""
    splits = {(r.scheduler.kind, r.scheduler.group_id, r.scheduler.first, r.scheduler.count)
              for _, r in runs if r.scheduler is not None}
    ref = next((r.scheduler for _, r in runs if r.scheduler is not None), None)
    if ref is None or len(splits) != 1 or ref.count != n:
        return f"{i}/{n}"
    return f"{i}/{n} ({ref.job_of(i)})"


def _matrix_order(runs: list[tuple[Path, RunResult]], matrix_path: Path | None) -> tuple[list[str] | None, str]:
    from harness.matrix.load import load_matrix

    sha = runs[0][1].matrix.sha256
    if matrix_path is not None and not matrix_path.is_file():
        raise UsageError(f"--matrix {matrix_path}: " + ("is a directory, not a file" if matrix_path.is_dir()
                                                       else "no such file"))
    path = matrix_path or Path(runs[0][1].matrix.path)
    if not path.is_file():
        return None, f"matrix file {path} not here: cells ordered by id"
    loaded = load_matrix(path)
    if loaded.sha256 != sha:
        if matrix_path is not None:
            raise UsageError(f"{matrix_path}: not the matrix these runs ran "
                             f"(sha256 {loaded.sha256[:12]}… vs {sha[:12]}…)")
        return None, f"matrix file {path} changed since the runs: cells ordered by id"
    return [c.id for c in loaded.cells], ""


def _copy_tree(src: Path, dst: Path, what: str, skipped: list[str]) -> None:
    """The regular files under `src` into `dst`, walked without following a link; each link, FIFO, device or socket
    met is a line in `skipped`, never copied."""
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        skipped.append(f"{src}: {kind_of(st.st_mode).value}, not copied")
        return
    for folder, dirs, files in walk(src):  # a link to a folder is among `files`, never entered; no recursion
        here = Path(folder)
        for name in sorted(dirs + files):
            f = here / name
            rel = f.relative_to(src)
            target = dst / rel
            mode = os.lstat(f).st_mode
            if stat.S_ISDIR(mode):
                target.mkdir(parents=True, exist_ok=True)
            elif not stat.S_ISREG(mode):
                skipped.append(f"{f}: {kind_of(mode).value}, not copied (a merged run holds its inputs' own files)")
            elif os.path.lexists(target):
                raise UsageError(f"{what}/{rel} is in two of the runs: shards must not overlap")
            else:
                copy_regular(f, target)


def merge_runs(run_dirs: list[Path], out: Path, matrix_path: Path | None = None) -> MergeOutcome:
    if not run_dirs:
        raise UsageError("merge: name at least one run directory")
    out = Path(out)
    runs = [(Path(d), _load(Path(d))) for d in run_dirs]
    complete, warnings = check_compatible(runs)
    for d, _ in runs:
        if out.resolve() == d.resolve() or d.resolve() in out.resolve().parents:
            raise UsageError(f"--out {out}: inside the input {d}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory")
    order, how = _matrix_order(runs, matrix_path)
    if how:
        warnings.append(how)
    if order is not None:
        known = set(order)
        for d, r in runs:
            stray = next((c.cell_id for c in r.cells if c.cell_id not in known), None)
            if stray is not None:
                raise UsageError(f"{d} holds cell {stray}, which the matrix {matrix_path or runs[0][1].matrix.path} "
                                 f"does not have ({len(order):,} cells): not a run of it")

    cells: list[CellResult] = [c for _, r in runs for c in r.cells]
    rank = {cid: i for i, cid in enumerate(order or [])}
    cells.sort(key=lambda c: (rank.get(c.cell_id, len(rank)), c.cell_id))
    sources = [_source(d, r) for d, r in runs]
    first = runs[0][1]
    finished = [r.finished_at for _, r in runs if r.finished_at is not None]
    fields = dict(
        run_id=out.name, matrix=first.matrix, runtime=first.runtime,
        started_at=min(r.started_at for _, r in runs),
        finished_at=max(finished) if finished else None,
        status=RunStatus.complete if complete else RunStatus.interrupted,
        host=first.host,  # the first shard's; every shard's host is in merged_from / merge.json
        harness_version=first.harness_version, selection=list(first.selection), shard=None,
        cells=cells, summary=summarize(cells),
    )
    if "merged_from" in RunResult.model_fields:
        fields["merged_from"] = [{k: v for k, v in s.items() if k != "path"} for s in sources]
    run = RunResult(**fields)

    out.mkdir(parents=True, exist_ok=True)
    try:
        (out / "cells").mkdir(exist_ok=True)
        for c in cells:  # the records as loaded and checked: a cell file is never copied blind
            atomic_write_text(out / "cells" / f"{c.cell_id}.json", c.model_dump_json(indent=2))
        skipped: list[str] = []
        for sub in ("logs", "patches"):
            (out / sub).mkdir(exist_ok=True)
            for d, _ in runs:
                _copy_tree(d / sub, out / sub, sub, skipped)
        warnings += skipped
        atomic_write_text(out / MERGE_FILE, json.dumps({"merged_from": sources, "warnings": warnings}, indent=2))
        atomic_write_text(out / "results.json", run.model_dump_json(indent=2))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return MergeOutcome(run=run, run_dir=out, sources=sources, warnings=warnings)

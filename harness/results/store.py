"""The run directory: `cells/<id>.json` written atomically the moment a cell ends, `logs/<id>.log`, and `results.json`
rewritten after every cell, so a run killed at any point keeps everything it finished and `--resume` can go on."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import secrets
import socket
import stat
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness import files, nofollow
from harness.errors import FileRefused, InputError, RecordWriteError, RunDamaged, UsageError
from harness.files import kind_of, parse_json, read_bytes, write_atomic
from harness.matrix.load import LoadedMatrix
from harness.matrix.scheduler import SchedulerRef
from harness.results.model import CellResult, HostInfo, MatrixRef, RunResult, RunStatus
from harness.verdict import Outcome
from harness.version import __version__

_R = TypeVar("_R", bound=BaseModel)
#: The folders a run writes in (harness.runtime: `work`, `active`, `compile-cache`, `patches`): each one a folder of
#: the run or absent, never a link out of it.
RUN_FOLDERS = ("cells", "logs", "work", "active", "compile-cache", "patches")


def now() -> datetime:
    return datetime.now(UTC)


def atomic_write_text(path: Path, text: str, anchor: Path | None = None) -> None:
    """A record, written whole: readers see the old file or the new one, never half; a failure to write is a
    RecordWriteError (the run stops, `--resume` finishes it). With `anchor` (the run folder that holds it), never
    through a link below it (harness.nofollow); without, the way a file a person named is (harness.files)."""
    try:
        if anchor is not None:
            nofollow.write_atomic(anchor, path, text)
        else:
            write_atomic(path, text)
    except OSError as exc:
        raise RecordWriteError(path, exc) from None


def new_run_id(name: str) -> str:
    return f"{now().strftime('%Y%m%d-%H%M%S')}-{name}-{secrets.token_hex(2)}"


def host_info() -> HostInfo:
    return HostInfo(hostname=socket.gethostname(), platform=platform.platform(), python=platform.python_version(),
                    cpu_count=os.cpu_count())


def summarize(cells: list[CellResult]) -> dict[str, int]:
    counts = Counter(c.outcome for c in cells)
    summary = {o.value: counts.get(o, 0) for o in Outcome}
    summary["cells"] = len(cells)
    summary["matched"] = sum(1 for c in cells if c.matched is True)
    summary["mismatched"] = sum(1 for c in cells if c.matched is False)
    summary["unexpected"] = sum(1 for c in cells if c.matched is None)
    return summary


class RunStore:
    """A run directory. Created and resumed by the run owner (harness.boot.session); read by `load_run`."""

    def __init__(self, run_dir: Path, run: RunResult, order: list[str] | None = None):
        #: Absolute: paths under it are handed to container engines as bind-mount sources, which must be absolute.
        self.run_dir = Path(run_dir).absolute()
        self.run = run
        self._cells: dict[str, CellResult] = {c.cell_id: c for c in run.cells}
        #: The matrix's cell order; results.json lists cells in it whatever order they finished in.
        self.order: list[str] = list(order if order is not None else [c.cell_id for c in run.cells])
        self._lock = threading.RLock()

    def add_to_order(self, cell_id: str) -> None:
        """A cell the matrix did not list (a frontier probe) goes after those it did, in the order they came."""
        with self._lock:
            if cell_id not in self.order:
                self.order.append(cell_id)

    # ---- paths
    @property
    def cells_dir(self) -> Path:
        return self.run_dir / "cells"

    def log_path(self, cell_id: str) -> Path:
        return self.run_dir / "logs" / f"{cell_id}.log"

    def work_dir(self, cell_id: str) -> Path:
        return self.run_dir / "work" / cell_id

    # ---- lifecycle
    @classmethod
    def create(cls, results_dir: Path, loaded: LoadedMatrix, runtime: str, order: list[str],
               selection: list[str] | None = None, shard: str | None = None, run_id: str | None = None,
               scheduler: SchedulerRef | None = None) -> RunStore:
        run_id = run_id or new_run_id(loaded.matrix.name)
        run_dir = Path(results_dir) / run_id
        if (run_dir / "results.json").exists():
            raise UsageError(f"{run_dir}: a run already exists there (use --resume to finish it)")
        run_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("cells", "logs"):
            os.close(nofollow.open_dir(run_dir, run_dir / sub, create=True))
        run = RunResult(
            run_id=run_id, matrix=MatrixRef(path=str(loaded.path), sha256=loaded.sha256, name=loaded.matrix.name),
            runtime=runtime, started_at=now(), host=host_info(), harness_version=__version__,
            selection=list(selection or []), shard=shard, scheduler=scheduler,
        )
        store = cls(run_dir, run, order)
        store._write_run()
        return store

    @classmethod
    def open(cls, run_dir: Path, loaded: LoadedMatrix | None = None, order: list[str] | None = None,
             limit: int | None = None) -> RunStore:
        """Reopen a run: the cells on disk are the truth, in the order results.json listed them (or `order`, the
        matrix's, when resuming); results.json is rebuilt from them. A damaged run (a cell file cut short, holding
        NaN or another cell's id, not a regular file, or listed but gone) is a RunDamaged naming each file: every
        reader (`check`, `report`, `compare`, `analyze`, `merge`, `run --resume`) refuses it alike. Its record files
        together are at most `limit` bytes (default harness.files.RUN_LIMIT), else it is refused before one is read."""
        run_dir = Path(run_dir)
        budget = _Budget(run_dir, files.RUN_LIMIT if limit is None else limit)
        run, listed = _read_run(run_dir / "results.json", f"{run_dir}: not a run directory (no results.json)", budget)
        if loaded is not None and run.matrix.sha256 != loaded.sha256:
            raise UsageError(
                f"{run_dir}: the matrix changed since this run (sha256 {run.matrix.sha256[:12]}… then, "
                f"{loaded.sha256[:12]}… now); start a new run instead of resuming"
            )
        store = cls(run_dir, run, order if order is not None else listed)
        store._cells = _read_cells(run_dir, listed, budget)
        store.run.cells = store._ordered()
        store.run.summary = summarize(store.run.cells)  # of the cells on disk, never results.json's last word
        return store

    def vet(self, todo: list[str], fresh: list[Path]) -> None:
        """Before a run writes or boots anything: every folder it writes in is a folder of the run or absent (never a
        link out of it); each cell still to boot has no log or record there but one boot-harness wrote; nothing is at
        the `fresh` paths the run makes anew (a cell's scratch, the run's compile cache). Else FileRefused naming the
        first (one line, exit 2), and everything is left as it was: what the harness did not make is not its own to
        write through, truncate or remove."""
        run_dir = self.run_dir
        for sub in RUN_FOLDERS:
            nofollow.check_folder(run_dir, run_dir / sub)
        for cid in todo:
            for f in (self.cells_dir / f"{cid}.json", self.log_path(cid), self.log_path(cid).with_name(
                    f"{cid}.attempt1.log"), run_dir / "active" / f"{cid}.json"):
                nofollow.check_file(run_dir, f)
        for path in fresh:
            if path.parent == run_dir or path.parent.parent == run_dir:
                nofollow.check_absent(run_dir, path, "; move it away to resume")

    def done(self) -> set[str]:
        return set(self._cells)

    def record(self, cell: CellResult) -> None:
        with self._lock:  # cells may finish in parallel threads
            atomic_write_text(self.cells_dir / f"{cell.cell_id}.json", cell.model_dump_json(indent=2), self.run_dir)
            self._cells[cell.cell_id] = cell
            self._write_run()

    def finish(self, status: RunStatus) -> RunResult:
        with self._lock:
            self.run.status = status
            self.run.finished_at = now()
            self._write_run()
            return self.run

    def _ordered(self) -> list[CellResult]:
        rank = {cid: i for i, cid in enumerate(self.order)}
        return sorted(self._cells.values(), key=lambda c: (rank.get(c.cell_id, len(rank)), c.cell_id))

    def _write_run(self) -> None:
        self.run.cells = self._ordered()
        self.run.summary = summarize(self.run.cells)
        atomic_write_text(self.run_dir / "results.json", self.run.model_dump_json(indent=2), self.run_dir)


class _Budget:
    """The bytes one run's record files may take together: the sizes on disk are summed before the first is read, so
    a run too large is one line and no memory spent; each read is then bounded by what is left (a file that grew)."""

    def __init__(self, run_dir: Path, limit: int):
        self.run_dir, self.limit, self.left = run_dir, limit, limit

    def check(self) -> None:
        names = ["results.json"]
        with contextlib.suppress(OSError):
            names += [f"cells/{n}" for n in os.listdir(self.run_dir / "cells")
                      if n.endswith(".json") and not n.startswith(".")]  # what _read_cells reads
        total = 0
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(self.run_dir / name)
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        if total > self.limit:
            raise FileRefused(str(self.run_dir), "", f"its records are {total:,} bytes together ({len(names):,} "
                                                     f"files), more than the {self.limit:,} a run may be: not read "
                                                     "(no run the harness writes is this large)")

    def read(self, path: Path) -> bytes:
        data = read_bytes(path, min(files.JSON_LIMIT, self.left), follow=False)
        self.left -= len(data)
        return data


def _parsed(path: Path, what: str, budget: _Budget | None = None) -> Any:
    """One record file, strictly: a regular file (never through a link: a run directory is never a way out of
    itself), bounded (by what is left of the run's `budget` too), JSON without NaN or overflow; else FileRefused
    naming it."""
    try:
        data = budget.read(path) if budget is not None else read_bytes(path, follow=False)
        return parse_json(data, str(path))
    except FileRefused as exc:
        raise FileRefused(exc.file, exc.key, f"{what}: {exc.message}") from None


def _validated(model: type[_R], value: Any, path: Path, what: str) -> _R:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RunDamaged.of([FileRefused(str(path), ".".join(map(str, e["loc"])), f"{what}: {e['msg']}")
                             for e in exc.errors()]) from None


def _read_cell(path: Path, budget: _Budget | None = None) -> CellResult:
    return _validated(CellResult, _parsed(path, "not a valid cell record", budget), path, "not a valid cell record")


def _read_run(path: Path, missing: str, budget: _Budget) -> tuple[RunResult, list[str]]:
    """results.json, and the ids of the cells it lists. Its copy of each cell is rebuilt from cells/ (the truth) on
    every open, so only the ids are read from it: a run's cells are validated once, not twice."""
    if not os.path.lexists(path):
        raise UsageError(missing)
    budget.check()
    what = "not a valid run record"
    value = _parsed(path, what, budget)
    listed: list[str] = []
    if isinstance(value, dict) and isinstance(value.get("cells"), list):
        for i, cell in enumerate(value["cells"]):
            if not isinstance(cell, dict) or not isinstance(cell.get("cell_id"), str):
                raise FileRefused(str(path), f"cells.{i}.cell_id", f"{what}: a listed cell without its id")
            listed.append(cell["cell_id"])
        value = {**value, "cells": []}
    return _validated(RunResult, value, path, what), listed


def _read_cells(run_dir: Path, listed: list[str], budget: _Budget) -> dict[str, CellResult]:
    """Every `cells/<id>.json` of a run. A cell file that cannot be read, is not a cell record, holds another cell's
    id, or that results.json lists but is not there, makes the run damaged: each is named, and nothing is skipped."""
    cells_dir = run_dir / "cells"
    problems: list[InputError] = []
    cells: dict[str, CellResult] = {}
    try:
        st = os.lstat(cells_dir)
    except FileNotFoundError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode):
        if listed or st is not None:
            what = "missing" if st is None else f"{kind_of(st.st_mode).value}, not a directory"
            raise FileRefused(str(cells_dir), "", f"{what}; results.json lists {len(listed)} cell(s)")
        return cells
    for name in sorted(os.listdir(cells_dir)):
        if not name.endswith(".json") or name.startswith("."):  # .<id>.json.*.tmp: a write a kill cut short
            continue
        f = cells_dir / name
        try:
            cell = _read_cell(f, budget)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        if cell.cell_id != name[:-len(".json")]:
            problems.append(FileRefused(str(f), "cell_id", f"is {cell.cell_id!r}: the record of a cell is "
                                                           "cells/<its id>.json (a copied or renamed file)"))
            continue
        cells[cell.cell_id] = cell
    problems += [FileRefused(str(cells_dir / f"{cid}.json"), "", "missing, though results.json lists the cell")
                 for cid in listed if cid not in cells and not any(p.file == str(cells_dir / f"{cid}.json")
                                                                   for p in problems)]
    if problems:
        raise RunDamaged.of(problems)
    return cells


def load_run(path: Path, limit: int | None = None) -> tuple[RunResult, Path]:
    """The one run loader: a run directory (or its results.json) as recorded — the cells on disk, in the run's order.
    Strict (`RunStore.open`): every cell file that cannot be read or is missing is named, never skipped; a run whose
    records together pass `limit` (harness.files.RUN_LIMIT) is refused in one line."""
    run_dir = Path(path)
    if run_dir.is_file() and run_dir.name == "results.json":
        run_dir = run_dir.parent
    if not run_dir.exists():
        raise UsageError(f"{path}: no such run directory")
    if not run_dir.is_dir():
        raise UsageError(f"{path}: not a run directory (give the folder that holds results.json)")
    return RunStore.open(run_dir, limit=limit).run, run_dir


def dump_json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)


class RunLock:
    """One writer per run directory: a `--resume` of a run that is still going (a second CI job, a person beside the
    nightly, the same run under another TMPDIR) would boot its cells again and interleave its records with the
    first's. The lock lives with what it locks, `RUN/.lock`, so every process that writes the run meets it whatever its
    environment: an flock on a descriptor opened without following a link, on a regular file of this user's with one
    name (anything else there is refused, left alone). The kernel lets go of an flock with its process, so a killed
    run never stays locked. Within one process the lock is shared (a session reopened in-process, the frontier's
    probes)."""

    NAME = ".lock"
    _held: dict[tuple[int, int], list[Any]] = {}  # the run folder's (dev, ino) -> [fd, path, holders]: this process's
    _guard = threading.Lock()

    def __init__(self, run_dir: Path):
        self._key: tuple[int, int] | None = None
        run_dir = Path(run_dir).absolute()
        try:
            st = os.stat(run_dir)
        except OSError:
            raise UsageError(f"{run_dir}: not a run directory (no results.json)") from None
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{run_dir}: not a run directory (give the folder that holds results.json)")
        key = (st.st_dev, st.st_ino)
        with RunLock._guard:
            if key not in RunLock._held:
                RunLock._held[key] = [self._take(run_dir), run_dir / self.NAME, 0]
            RunLock._held[key][2] += 1
            self._key = key

    @property
    def _path(self) -> Path | None:
        entry = RunLock._held.get(self._key) if self._key is not None else None
        return entry[1] if entry else None

    @classmethod
    def _take(cls, run_dir: Path) -> int:
        """The locked fd of `RUN/.lock`. Its holder unlinks it on release, so a lock taken on a file that was unlinked
        meanwhile is no lock: take the one now there instead."""
        path = run_dir / cls.NAME
        while True:
            fd = _open_lock(run_dir, path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                holder = holder if holder.isdigit() else "?"
                raise UsageError(f"{run_dir}: another boot-harness (pid {holder}) is writing this run now; let "
                                 "it finish, then --resume it (or start a new run)") from None
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                return fd
            os.close(fd)

    def release(self) -> None:
        with RunLock._guard:
            key, self._key = self._key, None
            entry = RunLock._held.get(key) if key is not None else None
            if key is None or entry is None:
                return
            entry[2] -= 1
            if entry[2] == 0:
                fd, path = entry[0], entry[1]
                with contextlib.suppress(OSError):
                    st, mine = os.stat(path, follow_symlinks=False), os.fstat(fd)
                    if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):  # ours still: gone before the unlock,
                        nofollow.unlink(path.parent, path)  # so whoever takes it next makes a new one
                os.close(fd)
                del RunLock._held[key]

    def __del__(self) -> None:  # a session that failed half-way in this process (a test, the pytest plugin)
        self.release()


def _open_lock(run_dir: Path, path: Path) -> int:
    """`RUN/.lock` opened for the flock: made by this process, or a regular file of this user's with one name; never
    through a link, never blocking on a FIFO. Anything else is a one-line refusal, left as it is."""
    try:
        return nofollow.open_file(run_dir, path, keep=True, mode=0o600)
    except FileRefused as exc:
        raise UsageError(f"{exc.file}: {exc.message} (the run's lock is a file boot-harness makes)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot take the run's lock: {exc.strerror or exc}") from None

"""The run directory: `cells/<id>.json` written atomically the moment a cell ends, `logs/<id>.log`, and `results.json`
rewritten after every cell, so a run killed at any point keeps everything it finished and `--resume` can go on."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import secrets
import socket
import tempfile
import threading
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from harness import __version__
from harness.errors import RecordWriteError, UsageError
from harness.matrix.load import LoadedMatrix
from harness.results.model import CellResult, HostInfo, MatrixRef, RunResult, RunStatus
from harness.verdict import Outcome


def now() -> datetime:
    return datetime.now(timezone.utc)


def atomic_write_text(path: Path, text: str) -> None:
    """Write-then-rename in the same folder, fsynced, so readers see the old file or the new one, never half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise RecordWriteError(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise RecordWriteError(path, exc) from None
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


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
               selection: list[str] | None = None, shard: str | None = None, run_id: str | None = None) -> RunStore:
        run_id = run_id or new_run_id(loaded.matrix.name)
        run_dir = Path(results_dir) / run_id
        if (run_dir / "results.json").exists():
            raise UsageError(f"{run_dir}: a run already exists there (use --resume to finish it)")
        for sub in ("cells", "logs"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        run = RunResult(
            run_id=run_id, matrix=MatrixRef(path=str(loaded.path), sha256=loaded.sha256, name=loaded.matrix.name),
            runtime=runtime, started_at=now(), host=host_info(), harness_version=__version__,
            selection=list(selection or []), shard=shard,
        )
        store = cls(run_dir, run, order)
        store._write_run()
        return store

    @classmethod
    def open(cls, run_dir: Path, loaded: LoadedMatrix | None = None, order: list[str] | None = None) -> RunStore:
        """Reopen a run: the cells on disk are the truth, in the order results.json listed them (or `order`, the
        matrix's, when resuming); results.json is rebuilt from them."""
        run_dir = Path(run_dir)
        try:
            run = RunResult.model_validate_json((run_dir / "results.json").read_text())
        except FileNotFoundError:
            raise UsageError(f"{run_dir}: not a run directory (no results.json)") from None
        except (ValidationError, ValueError) as exc:
            raise UsageError(f"{run_dir}/results.json: not a valid run record ({str(exc).splitlines()[0]})") from None
        if loaded is not None and run.matrix.sha256 != loaded.sha256:
            raise UsageError(
                f"{run_dir}: the matrix changed since this run (sha256 {run.matrix.sha256[:12]}… then, "
                f"{loaded.sha256[:12]}… now); start a new run instead of resuming"
            )
        listed = [c.cell_id for c in run.cells]
        cells = []
        for f in sorted((run_dir / "cells").glob("*.json")):
            try:
                cells.append(CellResult.model_validate_json(f.read_text()))
            except (ValidationError, ValueError):
                continue  # cannot happen with atomic writes; a foreign file is not a finished cell
        store = cls(run_dir, run, order if order is not None else listed)
        store._cells = {c.cell_id: c for c in cells}
        store.run.cells = store._ordered()
        return store

    def done(self) -> set[str]:
        return set(self._cells)

    def record(self, cell: CellResult) -> None:
        with self._lock:  # cells may finish in parallel threads
            atomic_write_text(self.cells_dir / f"{cell.cell_id}.json", cell.model_dump_json(indent=2))
            self._cells[cell.cell_id] = cell
            self._write_run()

    def finish(self, status: RunStatus) -> RunResult:
        with self._lock:
            self.run.status = status  # type: ignore[assignment]
            self.run.finished_at = now()
            self._write_run()
            return self.run

    def _ordered(self) -> list[CellResult]:
        rank = {cid: i for i, cid in enumerate(self.order)}
        return sorted(self._cells.values(), key=lambda c: (rank.get(c.cell_id, len(rank)), c.cell_id))

    def _write_run(self) -> None:
        self.run.cells = self._ordered()
        self.run.summary = summarize(self.run.cells)
        atomic_write_text(self.run_dir / "results.json", self.run.model_dump_json(indent=2))


def load_run(path: Path) -> tuple[RunResult, Path]:
    """The one run loader: a run directory (or its results.json) as recorded — the cells on disk, in the run's order."""
    run_dir = Path(path)
    if run_dir.is_file() and run_dir.name == "results.json":
        run_dir = run_dir.parent
    if not run_dir.exists():
        raise UsageError(f"{path}: no such run directory")
    if not run_dir.is_dir():
        raise UsageError(f"{path}: not a run directory (give the folder that holds results.json)")
    return RunStore.open(run_dir).run, run_dir


def dump_json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)


def write_run(run: RunResult, results_dir: Path) -> Path:
    """Write `run` as a run directory (results.json and cells/*.json), as `boot-harness run` would."""
    run_dir = Path(results_dir) / run.run_id
    for c in run.cells:
        atomic_write_text(run_dir / "cells" / f"{c.cell_id}.json", c.model_dump_json(indent=2))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "results.json", run.model_dump_json(indent=2))
    return run_dir


class RunLock:
    """One writer per run directory: a `--resume` of a run that is still going (a second CI job, a person beside the
    nightly) would boot its cells again and interleave its records with the first's. An flock, so the kernel lets go
    of it with the process: a killed run never stays locked. Kept outside the run directory, which stays exactly the
    run's records. Within one process the lock is shared (a session reopened in-process, the frontier's probes)."""

    _held: dict[Path, list[int]] = {}  # lock file -> [fd, holders]: this process's
    _guard = threading.Lock()

    def __init__(self, run_dir: Path):
        self._path: Path | None = None
        digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:20]
        where = Path(tempfile.gettempdir()) / "boot-harness-runs"
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{digest}.lock"
        with RunLock._guard:
            if path not in RunLock._held:
                RunLock._held[path] = [self._take(path, run_dir), 0]
            RunLock._held[path][1] += 1
            self._path = path

    @staticmethod
    def _take(path: Path, run_dir: Path) -> int:
        """The locked fd of `path`. Its holder unlinks it on release (one file per run would pile up in /tmp), so a
        lock taken on a file that was unlinked meanwhile is no lock: take the one now at `path` instead."""
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise UsageError(f"{run_dir}: another boot-harness (pid {holder}) is writing this run now; let "
                                 "it finish, then --resume it (or start a new run)") from None
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                return fd
            os.close(fd)

    def release(self) -> None:
        with RunLock._guard:
            path, self._path = self._path, None
            entry = RunLock._held.get(path) if path is not None else None
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # before the unlock: whoever takes the file next finds it gone and makes a new one
                os.close(entry[0])
                del RunLock._held[path]

    def __del__(self) -> None:  # a session that failed half-way in this process (a test, the pytest plugin)
        self.release()

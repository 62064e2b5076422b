"""The runs a history is made of: run directories found under the paths given (artifacts download as folders of
folders), each read as the one run loader (`load_run`) reads it — by harness.results.fast_read's faster road
where it can take the run, else by `load_run` itself, which names what is wrong — ordered by when it started, and
kept only as the few facts a history needs per cell, so a year of nights fits in memory.

Bad input is decided per case (docs/history.md, "Bad input"): a run that cannot be read (a results.json cut short,
a newer schema, a damaged cell file, a negative boot time), a second run with an id already read, or a run whose
recorded start is in the future (past this host's clock by more than FUTURE_SKEW: it would pass for the latest
night) is *skipped with a warning* naming its path — one broken night neither hides the others nor goes unsaid; a
shard run that a merged run in the history already holds is skipped with a note; a run still `running` or
`interrupted` is *kept and marked* (shown, never read as a verdict). A path that does not exist, paths holding no run at
all, or runs of different matrices are *refused* (exit 2): no history can be told from them. One leniency, deliberate: a
memory curve is not read (harness.results.fast_read), so what is wrong inside one is `check`'s to say.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness.errors import FileRefused, InputError, UsageError
from harness.logfacts.timeline import ORDER, Milestone, span_name
from harness.results.fast_read import read_records
from harness.results.model import SCHEMA_VERSION, CellResult, Expected, RunResult, RunStatus
from harness.results.store import now as wall_now
from harness.verdict import Reason
from harness.walk import walk

TOTAL = "total"
"""The phase name of a whole boot (the verdict time), beside the timeline's phases."""

Warn = Callable[[str], None]

#: How far past this host's clock a run's recorded start may be and still take its place among the nights: two
#: hosts' clocks differ by seconds to minutes, never by hours.
FUTURE_SKEW = timedelta(minutes=10)


@dataclass(frozen=True)
class Entry:
    """One cell in one run: what its history compares, and nothing of its log."""

    outcome: str
    reason: str | None
    axes: dict[str, str]
    matched: bool | None
    expected: str | None
    fingerprint: dict[str, str]
    """The configuration as recorded, by change name (`vllm_version`, `image_digest`, `argv`, ...)."""
    kv: dict[str, float]
    """available KV GiB, KV tokens, estimated max length: the ones logged."""
    times: dict[str, float]
    """Seconds by phase (`total` for the verdict time)."""
    exception: str | None = None
    """A crash's exception type where its cause is named only in general (CellResult.exception)."""

    @property
    def verdict(self) -> str:
        """`refused (kv_insufficient)`; a boot is `booted` (its reason, `ready`, says nothing more); a crash on an
        exception the catalogue names only in general says which: another exception is another verdict."""
        if not self.reason or self.reason == Reason.ready:
            return self.outcome
        return f"{self.outcome} ({self.reason}{': ' + self.exception if self.exception else ''})"


@dataclass(frozen=True)
class Night:
    """One run of the history."""

    run_id: str
    started_at: datetime
    status: str
    path: Path
    matrix: str
    cells: dict[str, Entry] = field(repr=False)
    merged_from: tuple[str, ...] = ()
    """The ids of the runs `merge` made this one of."""

    @property
    def counts(self) -> bool:
        """A run still `running` or `interrupted` is shown but never read as a verdict (its cells may have been
        cut short by whatever stopped it)."""
        return self.status == RunStatus.complete


def _gpus(c: CellResult) -> dict[str, str]:
    if not c.gpus:
        return {}
    names = sorted({g.name or "?" for g in c.gpus})
    drivers = sorted({g.driver or "?" for g in c.gpus})
    return {"gpu_name": ", ".join(names), "gpu_driver": ", ".join(drivers), "gpu_count": str(len(c.gpus))}


@functools.lru_cache(maxsize=4096)
def _argv_text(argv: tuple[str, ...], port: int | None) -> str:
    """The argv as recorded, its port (a free one, picked per boot) written `PORT`: no night differs by it; as one
    text. Kept per argv: a cell's argv is the same night after night, so a year of them is made (and held) once."""
    if port is None:
        return "\0".join(argv)
    p, out = str(port), list(argv)
    for i, tok in enumerate(out):
        if tok == p and i > 0 and out[i - 1] == "--port":
            out[i] = "PORT"
        elif tok == f"--port={p}":
            out[i] = "--port=PORT"
    return "\0".join(out)


@functools.lru_cache(maxsize=4096)
def _env_text(env: tuple[tuple[str, str], ...]) -> str:
    """The env as recorded (masked), sorted, as one text; kept per env as `_argv_text` is."""
    return "\0".join(f"{k}={v}" for k, v in sorted(env))


def fingerprint(run: RunResult, c: CellResult) -> dict[str, str]:
    """What a change across a cell's boundary is looked for in, as text (argv and env as recorded: masked)."""
    out = {"harness_version": run.harness_version, "matrix_hash": run.matrix.sha256,
           "argv": _argv_text(tuple(c.argv), c.port), "env": _env_text(tuple(c.env.items()))}
    if c.vllm_version:
        out["vllm_version"] = c.vllm_version
    if c.container is not None:
        out["image_ref"] = c.container.image
        if c.container.image_digest:
            out["image_digest"] = c.container.image_digest
    if c.patches:
        out["patch_hash"] = ", ".join(f"{p.patch}:{p.patched_sha256}" for p in c.patches)
    if c.gpus:
        out.update(_gpus(c))
    return out


def kv_figures(c: CellResult) -> dict[str, float]:
    out: dict[str, float] = {}
    kv = c.kv
    if kv.available_gib is not None:
        out["available KV GiB"] = float(kv.available_gib)
    if kv.kv_tokens is not None:
        out["KV tokens"] = float(kv.kv_tokens)
    if c.refusal is not None and c.refusal.estimated_max_model_len is not None:
        out["estimated max length"] = float(c.refusal.estimated_max_model_len)
    return out


#: Each span of a boot, in the order a boot passes its milestones — `decided` (the harness's) and after are no
#: server's — as (the milestone's key, the span's name by the key of the milestone before it, None: the start):
#: span_name's names, looked up, not worked out, 12 times a record in a year's 23,000.
_SPANS = [(m.value, {None if b is None else b.value: span_name(b, m) for b in (None, *ORDER)})
          for m in ORDER[:ORDER.index(Milestone.decided)]]


def phase_times(c: CellResult) -> dict[str, float]:
    """Seconds by phase, `total` for the verdict time: harness.analysis.timing's times of a cell (the timeline's
    spans), without a model per span — 23,000 records × 12 spans."""
    out: dict[str, float] = {}
    if c.timings.verdict_s is not None:
        out[TOTAL] = c.timings.verdict_s
    ms, last, before = c.timeline.milestones.__dict__, 0.0, None
    for key, names in _SPANS:
        t = ms[key]
        if t is not None:
            d = t - last
            out[names[before]] = round(d, 3) if d > 0.0 else 0.0  # round(max(0.0, d), 3)
            if t > last:
                last = t
            before = key
    return out


@functools.lru_cache(maxsize=1024)
def _expected(outcome: str, reason: str | None, within_s: float | None) -> str:
    """An expectation said (Expected.describe), once per distinct one: a matrix has few, a year of nights 23,000."""
    return Expected(outcome=outcome, reason=reason, within_s=within_s).describe()


def entry(run_dir: Path, run: RunResult, c: CellResult) -> Entry:
    times = phase_times(c)
    total = times.get(TOTAL)
    if total is not None and total < 0:  # a verdict time the harness never writes: the record was edited, and no
        # step is read from it (a span is never below 0: phase_times makes one that ends before it began 0)
        raise FileRefused(str(run_dir / "cells" / f"{c.cell_id}.json"), "timings.verdict_s",
                          f"{TOTAL} is {total} s: not a duration")
    x = c.expected
    return Entry(outcome=str(c.outcome), reason=None if c.reason is None else str(c.reason), axes=c.axes,
                 matched=c.matched, expected=None if x is None else _expected(x.outcome, x.reason, x.within_s),
                 fingerprint=fingerprint(run, c), kv=kv_figures(c), times=times, exception=c.exception())


def run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every run directory (one holding results.json) at or under `paths`, links never followed. A run directory is
    not searched further: it holds cells and logs, never another run."""
    found: list[Path] = []
    for given in paths:
        if not str(given).strip():
            raise UsageError("history: an empty path (give a run directory or a folder of runs)")
        p = Path(given)
        if p.name == "results.json" and p.is_file():
            p = p.parent
        if not p.exists():
            raise UsageError(f"{given}: no such run directory or folder")
        if not p.is_dir():
            raise UsageError(f"{given}: not a run directory or a folder of runs")
        if (p / "results.json").exists():
            found.append(p)
            continue
        for root, dirs, files in walk(p):  # no recursion: a folder 1,200 deep is a folder
            if "results.json" in files:
                found.append(Path(root))
                dirs[:] = []
            else:
                dirs.sort()
    return found


def _why(exc: InputError) -> str:
    """One line for a run that could not be read; a newer schema said as such."""
    problems = exc.problems
    for p in problems:
        if p.key == "schema_version":
            return f"a newer results schema than this harness reads ({SCHEMA_VERSION}): upgrade boot-harness"
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{first}{more}"


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Records make no reference cycles (refcounting frees them), but the collector's passes over the thousands of
    entries already kept cost about a fifth of a year's read: paused while reading, as it was before afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_nights(paths: Iterable[Path], warn: Warn, now: Callable[[], datetime] = wall_now) -> list[Night]:
    """The runs under `paths` in the order they started as recorded (never argument order, a folder's name or its
    time); see the module's doc for what is skipped, kept or refused. `now`: this host's clock (aware UTC)."""
    given = list(paths)
    dirs = run_dirs(given)
    if not dirs:
        raise UsageError(f"{' '.join(map(str, given))}: no run directory (a folder holding results.json) found")
    with _no_cycle_collection():
        nights = _read(dirs, warn, now())
    if not nights:
        raise UsageError(f"{' '.join(map(str, given))}: no run could be read (each is named above)")
    matrices: dict[str, Night] = {}
    for n in nights.values():
        matrices.setdefault(n.matrix, n)
    if len(matrices) > 1:
        a, b = list(matrices.values())[:2]
        raise UsageError(f"{b.path}: a run of matrix {b.matrix!r}, but {a.path} is of {a.matrix!r}: a history is of "
                         "one matrix (give the runs of one)")
    return sorted(nights.values(), key=lambda n: (_utc(n.started_at), n.run_id))


def night_of(d: Path) -> Night | str:
    """The run in `d`, or the line that says why it cannot be read."""
    try:
        run, records = read_records(d)
        cells = {c.cell_id: entry(d, run, c) for c in records}
    except InputError as exc:
        return f"{d}: skipped, cannot be read: {_why(exc)}"
    return Night(run.run_id, run.started_at, str(run.status), d, run.matrix.name, cells,
                 tuple(src.run_id for src in run.merged_from))


#: Below this many runs a history is read in this process: forking costs more than it saves.
PARALLEL_FROM = 64


def _readers(runs: int) -> int:
    """How many processes read the runs: one per usable core (at most 4), and 1 where forking is unsafe or does not
    pay — a process with other threads (a child forked there could wait forever on a lock one of them held), a
    platform without fork, or a short history."""
    if runs < PARALLEL_FROM or threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return min(len(os.sched_getaffinity(0)), 4)


def nights_of(dirs: list[Path]) -> list[Night | str]:
    """`night_of` of each directory, in order: a year of nights with memory curves is ~1.6 GB of records to read and
    check, so the cores share them (forked readers, gone when this returns, also on Ctrl-C: the pool's exit
    terminates them)."""
    procs = _readers(len(dirs))
    if procs == 1:
        return [night_of(d) for d in dirs]
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        return pool.map(night_of, dirs, chunksize=max(1, len(dirs) // (procs * 8)))


def _read(dirs: list[Path], warn: Warn, now: datetime) -> dict[str, Night]:
    """Each run directory read, by run id: those that cannot be, repeated ids, runs from the future and merged
    shards left out, said."""
    nights: dict[str, Night] = {}
    merged_into: dict[str, str] = {}
    for d, n in zip(dirs, nights_of(dirs), strict=True):
        if isinstance(n, str):
            warn(n)
            continue
        if n.run_id in nights:
            warn(f"{d}: skipped: run id {n.run_id} was already read from {nights[n.run_id].path}")
            continue
        if (ahead := future(n.started_at, now)) is not None:
            warn(f"{d}: skipped: run {n.run_id} started {_utc(n.started_at):%Y-%m-%d %H:%M:%S} UTC, {ahead} after "
                 "this host's clock: a start in the future would pass for the latest night (a wrong clock or an "
                 "edited record)")
            continue
        for src in n.merged_from:
            merged_into[src] = n.run_id
        if not n.counts:
            warn(f"{d}: run {n.run_id} is {n.status}: shown, not read as a verdict")
        nights[n.run_id] = n
    for rid in [r for r in nights if r in merged_into and merged_into[r] in nights]:
        warn(f"{nights[rid].path}: skipped: shard run {rid} is part of merged run {merged_into[rid]}")
        del nights[rid]
    return nights


def future(started_at: datetime, now: datetime) -> str | None:
    """How far `started_at` lies past `now` beyond the clocks' allowed skew, said (`3 days`); None when it does not."""
    ahead = _utc(started_at) - _utc(now)
    if ahead <= FUTURE_SKEW:
        return None
    days, minutes = ahead.days, int(ahead.total_seconds() // 60)
    return f"{days:,} days" if days >= 2 else f"{minutes // 60} h" if minutes >= 120 else f"{minutes} min"


def _utc(t: datetime) -> datetime:
    """A start time without a zone (a hand-made record) is read as UTC, so it orders among the others."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)

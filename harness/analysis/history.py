"""`boot-harness history`: many nights at once — since when each cell has its verdict, what changed across that
boundary, and where its boot time stepped.

Verdicts and configuration changes are exact: a cell's current streak is its latest verdict (outcome and reason)
back to the first run of it (`since`), gaps where the cell did not run skipped; the run just before is where the
configuration it ran with (image, vLLM, harness, argv, env, matrix file, patch, GPUs) and its KV figures are compared
with. Boot times are noisy, so their steps are found statistically (harness.analysis.changepoints) over the runs that
ended as the cell's latest outcome did — a refusal's time is no boot time — in total and per timeline phase, each
with a minimum magnitude so noise is not news. Only complete runs count (harness.analysis.history_runs).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from harness.analysis.changepoints import MIN_POINTS, TooFew, find_change_points
from harness.analysis.history_runs import TOTAL, Entry, Night
from harness.errors import UsageError
from harness.jsonout import JsonOutput
from harness.matrix.cells import select_cells
from harness.results.model import RunStatus
from harness.units import fmt_seconds
from harness.verdict import Outcome

#: A boot-time step is news only beyond both (the method's defaults, said here so the shortcut below agrees with them):
#: 0.02 s → 0.05 s is noise, and so is 600 s → 610 s; 41 s → 118 s is news.
MIN_RELATIVE, MIN_ABSOLUTE_S = 0.25, 2.0


class ChangeName(StrEnum):
    """What can differ across a cell's boundary; the names `--json` lists under `changes`."""

    image_ref = "image_ref"
    image_digest = "image_digest"
    vllm_version = "vllm_version"
    harness_version = "harness_version"
    argv = "argv"
    env = "env"
    matrix_hash = "matrix_hash"
    patch_hash = "patch_hash"
    gpu_name = "gpu_name"
    gpu_driver = "gpu_driver"
    gpu_count = "gpu_count"
    kv = "kv"


LABELS: dict[ChangeName, str] = {
    ChangeName.image_ref: "image", ChangeName.image_digest: "image digest", ChangeName.vllm_version: "vLLM",
    ChangeName.harness_version: "harness", ChangeName.argv: "argv", ChangeName.env: "env",
    ChangeName.matrix_hash: "matrix sha256", ChangeName.patch_hash: "patch", ChangeName.gpu_name: "GPU",
    ChangeName.gpu_driver: "driver", ChangeName.gpu_count: "GPUs", ChangeName.kv: "KV"}

#: Long values shown by their start: a digest or hash is told apart by its first characters.
_SHORT = {ChangeName.image_digest: 19, ChangeName.matrix_hash: 12, ChangeName.patch_hash: 40}


@dataclass(frozen=True)
class Change:
    name: ChangeName
    before: str
    after: str

    def describe(self) -> str:
        if self.name in (ChangeName.kv, ChangeName.argv, ChangeName.env):
            return f"{LABELS[self.name]} {self.after}"  # already a list of what moved
        n = _SHORT.get(self.name)
        cut = (lambda v: v if n is None else v[:n])  # noqa: E731 - a digest's or hash's prefix, as git shortens one
        return f"{LABELS[self.name]} {cut(self.before or '—')} → {cut(self.after or '—')}"

    def output(self) -> ChangeJson:
        return ChangeJson(name=self.name, before=self.before, after=self.after)


@dataclass(frozen=True)
class TimeChange:
    run: str
    phase: str
    before_s: float
    after_s: float

    def describe(self) -> str:
        return f"{self.phase} {fmt_seconds(self.before_s)} → {fmt_seconds(self.after_s)} since {self.run}"

    def output(self) -> TimeStepJson:
        return TimeStepJson(run=self.run, phase=self.phase, before_s=self.before_s, after_s=self.after_s)


@dataclass(frozen=True)
class CellHistory:
    cell_id: str
    entries: tuple[Entry | None, ...]
    """One per run of the history, None where the cell did not run."""
    since: int | None
    """The run (index) its current streak began in; None when no complete run has it."""
    before: int | None
    """The run just before the streak (its verdict differed); None when the streak is all it ever had."""
    changes: tuple[Change, ...]
    time_changes: tuple[TimeChange, ...]
    too_few: TooFew | None
    """The total boot time's series was too short for the method (said, never guessed)."""
    series: tuple[tuple[int, float], ...]
    """(run index, total seconds) of the runs the boot times were read from: the sparkline."""

    @property
    def latest(self) -> Entry | None:
        return None if self.since is None else next(e for e in reversed(self.entries) if e is not None)


@dataclass(frozen=True)
class History:
    runs: tuple[Night, ...]
    cells: tuple[CellHistory, ...]
    warnings: tuple[str, ...] = ()

    def latest_complete(self) -> int | None:
        return next((i for i in range(len(self.runs) - 1, -1, -1) if self.runs[i].counts), None)

    def missed(self) -> list[tuple[str, str]]:
        """(cell id, verdict vs expectation) of the cells the latest complete run has that missed: exit 1."""
        i = self.latest_complete()
        if i is None:
            return []
        return [(c.cell_id, f"{e.verdict}, expected {e.expected}") for c in self.cells
                if (e := c.entries[i]) is not None and e.matched is False]

    def line(self, c: CellHistory) -> str:
        """`ID: refused since RUN (DATE); booted until RUN (DATE); changed: vLLM 0.33.0 → 0.33.1; …`."""
        latest = c.latest
        if c.since is None or latest is None:  # the latest entry is there whenever `since` is
            return f"{c.cell_id}: no complete run"

        def at(i: int) -> str:
            return f"{self.runs[i].run_id} ({self.runs[i].started_at:%Y-%m-%d})"

        text = f"{c.cell_id}: {latest.verdict} since {at(c.since)}"
        before = None if c.before is None else c.entries[c.before]
        if c.before is None or before is None:
            text += " (every run of it)"
        else:
            text += f"; {before.verdict} until {at(c.before)}"
            text += "; changed: " + (", ".join(ch.describe() for ch in c.changes) if c.changes else "nothing recorded")
        if c.time_changes:
            text += "; " + ", ".join(t.describe() for t in c.time_changes)
        return text

    def output(self) -> HistoryJson:
        """What `history --json` prints."""
        def cell(c: CellHistory) -> HistoryCellJson:
            return HistoryCellJson(
                id=c.cell_id, outcomes=[None if e is None else e.outcome for e in c.entries],
                matched=[None if e is None else e.matched for e in c.entries],
                since=None if c.since is None else self.runs[c.since].run_id,
                before=None if c.before is None else self.runs[c.before].run_id,
                verdict=None if c.latest is None else c.latest.verdict,
                changes=[ch.name for ch in c.changes], change_details=[ch.output() for ch in c.changes],
                time_changes=[t.output() for t in c.time_changes],
                too_few=None if c.too_few is None else TooFewJson(needed=c.too_few.needed, got=c.too_few.got),
                line=self.line(c))

        return HistoryJson(
            runs=[HistoryRunJson(id=n.run_id, started_at=n.started_at.isoformat(), status=n.status, path=str(n.path))
                  for n in self.runs],
            cells=[cell(c) for c in self.cells], missed=[MissedJson(id=cid, why=why) for cid, why in self.missed()],
            warnings=list(self.warnings))


# ---------------------------------------------------------------- `history --json` (harness.jsonout)


class ChangeJson(JsonOutput):
    name: ChangeName
    before: str
    after: str


class TimeStepJson(JsonOutput):
    run: str = Field(description="the run the step was first seen in")
    phase: str
    before_s: float
    after_s: float


class TooFewJson(JsonOutput):
    needed: int
    got: int


class HistoryCellJson(JsonOutput):
    id: str
    outcomes: list[Outcome | None] = Field(description="one per run, oldest first; null where the cell did not run")
    matched: list[bool | None]
    since: str | None = Field(description="the run its current verdict began in")
    before: str | None = Field(description="the run just before, whose verdict differed")
    verdict: str | None
    changes: list[ChangeName]
    change_details: list[ChangeJson]
    time_changes: list[TimeStepJson]
    too_few: TooFewJson | None = Field(description="the boot times were too few for the step search")
    line: str


class HistoryRunJson(JsonOutput):
    id: str
    started_at: str
    status: RunStatus
    path: str


class MissedJson(JsonOutput):
    id: str
    why: str


class HistoryJson(JsonOutput):
    """`boot-harness history --json`: each cell's verdict since when, what changed across that boundary, its boot
    time's steps; `missed` (exit 1) are the cells the latest complete run has that missed their expectation."""

    runs: list[HistoryRunJson]
    cells: list[HistoryCellJson]
    missed: list[MissedJson]
    warnings: list[str]


# ---------------------------------------------------------------- building it


def _diff_argv(a: list[str], b: list[str]) -> str:
    parts = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            parts.append(f"{' '.join(a[i1:i2]) or '∅'} → {' '.join(b[j1:j2]) or '∅'}")
    return "; ".join(parts)


def _diff_env(a: list[str], b: list[str]) -> str:
    da = dict(kv.partition("=")[::2] for kv in a if kv)
    db = dict(kv.partition("=")[::2] for kv in b if kv)
    parts = [f"{k}={da[k]} → {db[k]}" for k in sorted(da.keys() & db.keys()) if da[k] != db[k]]
    parts += [f"+{k}={db[k]}" for k in sorted(db.keys() - da.keys())]
    parts += [f"-{k}" for k in sorted(da.keys() - db.keys())]
    return ", ".join(parts)


def _kv(a: dict[str, float], b: dict[str, float]) -> str:
    def fmt(k: str, v: float) -> str:
        return f"{v:.2f}" if "GiB" in k else f"{v:,.0f}"

    return ", ".join(f"{k} {fmt(k, a[k])} → {fmt(k, b[k])}" for k in a if k in b and a[k] != b[k])


def changes_between(a: Entry, b: Entry) -> tuple[Change, ...]:
    """Everything recorded that differs from `a` (the run before) to `b` (the first of the streak), exactly."""
    out = []
    for name in ChangeName:
        if name is ChangeName.kv:
            moved = _kv(a.kv, b.kv)
            if moved:
                out.append(Change(name, "", moved))
            continue
        va, vb = a.fingerprint.get(name.value, ""), b.fingerprint.get(name.value, "")
        if va == vb:
            continue
        if name in (ChangeName.argv, ChangeName.env):
            la, lb = va.split("\0") if va else [], vb.split("\0") if vb else []
            moved = (_diff_argv if name is ChangeName.argv else _diff_env)(la, lb)
            out.append(Change(name, " ".join(la), moved))
        else:
            out.append(Change(name, va, vb))
    return tuple(out)


def _time_changes(runs: Sequence[Night], points: list[tuple[int, Entry]]) -> tuple[tuple[TimeChange, ...],
                                                                                   TooFew | None,
                                                                                   tuple[tuple[int, float], ...]]:
    """The steps found per phase, TooFew when the total's series was too short, and that series (run index, s)."""
    # every phase's series in one pass over the runs: the total first, then the phases in the order first seen
    runs_of: dict[str, list[int]] = {TOTAL: []}
    values_of: dict[str, list[float]] = {TOTAL: []}
    layout = tuple(points[0][1].times) if points else None
    if layout is not None and all(tuple(e.times) == layout for _, e in points):
        # the usual case — every run timed the same phases, in the same order: columns, not lookups
        indices = [i for i, _ in points]
        for phase, column in zip(layout, zip(*(e.times.values() for _, e in points), strict=False), strict=False):
            runs_of[phase], values_of[phase] = indices, list(column)
    else:
        for i, e in points:
            for phase, v in e.times.items():
                values = values_of.get(phase)
                if values is None:
                    runs_of[phase], values_of[phase] = [], []
                    values = values_of[phase]
                runs_of[phase].append(i)
                values.append(v)
    found: list[TimeChange] = []
    too_few = None
    for phase, values in values_of.items():
        if phase != TOTAL and len(values) >= MIN_POINTS and max(values) - min(values) < MIN_ABSOLUTE_S:
            continue  # no two medians of it can be MIN_ABSOLUTE_S apart: a step is impossible, not just unseen
        result = find_change_points(values, min_relative=MIN_RELATIVE, min_absolute=MIN_ABSOLUTE_S)
        if isinstance(result, TooFew):
            if phase == TOTAL:
                too_few = result
            continue
        found += [TimeChange(runs[runs_of[phase][cp.index]].run_id, phase, cp.before, cp.after) for cp in result]
    return tuple(found), too_few, tuple(zip(runs_of[TOTAL], values_of[TOTAL], strict=False))


def cell_history(runs: Sequence[Night], cell_id: str) -> CellHistory:
    entries = tuple(n.cells.get(cell_id) for n in runs)
    counted = [(i, e) for i, e in enumerate(entries) if e is not None and runs[i].counts]
    if not counted:
        return CellHistory(cell_id, entries, None, None, (), (), None, ())
    latest = counted[-1][1]
    k = len(counted) - 1
    while k > 0 and counted[k - 1][1].verdict == latest.verdict:
        k -= 1
    since = counted[k][0]
    before = counted[k - 1][0] if k > 0 else None
    then, now_ = (entries[before], entries[since]) if before is not None else (None, None)
    changes = changes_between(then, now_) if then is not None and now_ is not None else ()
    same = [(i, e) for i, e in counted if e.outcome == latest.outcome]
    time_changes, too_few, series = _time_changes(runs, same)
    return CellHistory(cell_id, entries, since, before, changes, time_changes, too_few, series)


@dataclass(frozen=True)
class _Recorded:
    """A recorded cell as `--select` reads one (its id and axes)."""

    id: str
    axes: dict[str, str]


@dataclass(frozen=True)
class _RecordedAxes:
    """The axes and values the runs recorded, as `--select` checks its terms against a matrix's."""

    values: dict[str, list[str]]

    def axis_values(self) -> dict[str, list[str]]:
        return self.values

    def value_name(self, axis: str, value: str) -> str:
        """Records hold value names already (a secret's too)."""
        return value


def select_ids(runs: Sequence[Night], exprs: list[str] | None) -> list[str]:
    """Every cell id the runs hold (in the order first seen), narrowed by `--select` exactly as `run` reads it, over
    the axes and values the runs recorded."""
    recorded: dict[str, _Recorded] = {}
    values: dict[str, list[str]] = {}
    for n in runs:
        for cid, e in n.cells.items():
            first = recorded.get(cid)
            if first is None:
                recorded[cid] = _Recorded(cid, e.axes)
            elif e.axes == first.axes:
                continue  # its values are in already, in the order first seen
            for axis, v in e.axes.items():
                seen = values.setdefault(axis, [])
                if v not in seen:
                    seen.append(v)
    cells = list(recorded.values())
    return [c.id for c in select_cells(cells, exprs, _RecordedAxes(values))]


def build_history(nights: Sequence[Night], select: list[str] | None = None, last: int | None = None,
                  warnings: Sequence[str] = ()) -> History:
    if last is not None:
        if last < 1:
            raise UsageError(f"--last {last}: give 1 or more runs")
        nights = nights[-last:]
    runs = tuple(nights)
    ids = select_ids(runs, select)
    return History(runs, tuple(cell_history(runs, cid) for cid in ids), tuple(warnings))

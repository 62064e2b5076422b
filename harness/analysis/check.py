"""Did a run meet its matrix's expectations? The question a nightly gate asks of tonight's merged run by itself,
whether or not there is a previous night to compare with: a first night where every cell errored must fail, and a
failure that never changes must keep failing."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from harness.jsonout import JsonOutput
from harness.results.model import RunResult, RunStatus
from harness.verdict import Outcome


@dataclass(frozen=True)
class Miss:
    cell_id: str
    """Empty for a miss of the run as a whole (not complete, no cell)."""
    why: str
    """The line check prints after the id, the hint included."""
    hint: str | None = None
    """The cell's cause's hint alone (CellResult.cause_hint)."""


def misses(run: RunResult) -> list[Miss]:
    """Each reason the run does not pass: it did not finish (a lost or interrupted shard), or a cell errored (the
    harness could not boot it, so nothing was learnt, unless its expectation said it would error) or missed its
    expectation. Cells without one pass. A run that holds no cell does not pass either: a gate that checked nothing
    must not say ok. (`run` is what the one loader, harness.results.store.load_run, read from the cells on disk: a
    missing or unreadable cell file never gets here.)"""
    found = []
    if run.status != RunStatus.complete:
        found.append(Miss("", f"the run is {run.status}, not complete (a shard lost, or a run interrupted)"))
    if not run.cells:
        found.append(Miss("", "the run holds no cell record: nothing was checked"))
    for c in run.cells:
        h = c.cause_hint()
        hint = f" — hint: {h}" if h else ""
        if (why := c.miss()) is not None:
            found.append(Miss(c.cell_id, why + hint, h))
        elif c.errored_unexpected():
            found.append(Miss(c.cell_id, f"{c.verdict()}: the harness could not boot it{hint}", h))
    return found


class MissJson(JsonOutput):
    cell_id: str | None = Field(description="null: the run as a whole (not complete, or no cell)")
    why: str = Field(description="the line `check` prints after the id, the hint included")
    hint: str | None = Field(description="what the cell's cause says would boot it, alone")


class CheckJson(JsonOutput):
    """`boot-harness check --json`: the nightly gate's verdict on one run; `passed` false is exit 1."""

    run_id: str
    run_dir: str
    status: RunStatus
    passed: bool
    cells: int
    matched: int
    mismatched: int
    errors: int
    misses: list[MissJson]


def check_output(run: RunResult, run_dir: str, found: list[Miss]) -> CheckJson:
    """The figures `check` prints in its summary line, and each miss."""
    s = run.summary
    return CheckJson(run_id=run.run_id, run_dir=run_dir, status=run.status, passed=not found,
                     cells=s.get("cells", 0), matched=s.get("matched", 0), mismatched=s.get("mismatched", 0),
                     errors=s.get(Outcome.error, 0),
                     misses=[MissJson(cell_id=m.cell_id or None, why=m.why, hint=m.hint) for m in found])

"""Did a run meet its matrix's expectations? The question a nightly gate asks of tonight's merged run by itself,
whether or not there is a previous night to compare with: a first night where every cell errored must fail, and a
failure that never changes must keep failing."""

from __future__ import annotations

from dataclasses import dataclass

from harness.results.model import RunResult, RunStatus


@dataclass(frozen=True)
class Miss:
    cell_id: str
    why: str


def misses(run: RunResult) -> list[Miss]:
    """Each reason the run does not pass: it did not finish (a lost or interrupted shard), or a cell errored (the
    harness could not boot it, so nothing was learnt, unless its expectation said it would error) or missed its
    expectation. Cells without one pass. A run that holds no cell does not pass either: a gate that checked nothing must
    not say ok. (`run` is what the one loader, harness.results.store.load_run, read from the cells on disk: a missing or
    unreadable cell file never gets here.)"""
    found = []
    if run.status != RunStatus.complete:
        found.append(Miss("", f"the run is {run.status}, not complete (a shard lost, or a run interrupted)"))
    if not run.cells:
        found.append(Miss("", "the run holds no cell record: nothing was checked"))
    for c in run.cells:
        hint = f" — hint: {h}" if (h := c.cause_hint()) else ""
        if (why := c.miss()) is not None:
            found.append(Miss(c.cell_id, why + hint))
        elif c.errored_unexpected():
            found.append(Miss(c.cell_id, f"{c.verdict()}: the harness could not boot it{hint}"))
    return found

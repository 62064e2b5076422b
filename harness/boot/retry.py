"""Whether a cell's first attempt is its answer, or evidence that the attempt itself was spoiled and must be booted
again: a small strategy the executor is given, as the verdict policy is a chain of rules (harness.verdict.policy).

The executor owns the GPUs, the idle wait and the interrupt; a policy owns only the decision and the log's account of
it. It gets the first attempt's result and `again`, which waits for the cell's GPUs to go idle and boots attempt N
(None: the run was interrupted meanwhile, so the cell has no verdict).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness import nofollow
from harness.boot.notes import note
from harness.results.model import CellResult
from harness.verdict import Outcome, Reason

#: Boots the cell once more after the idle wait, as attempt `number`; None when interrupted.
Again = Callable[[int], "CellResult | None"]


class RetryPolicy(Protocol):
    def settle(self, first: CellResult, log: Path, again: Again) -> CellResult | None:
        """The cell's result: `first`, or what `again` boots (None: interrupted). `log` is the cell's log file."""


@dataclass(frozen=True)
class BusyRetry:
    """A `gpu_memory_busy` refusal on attempt 1 means memory was held when vLLM looked (a GPU's, or RAM on the CPU
    backend): that attempt is contaminated. Its log is kept as `<id>.attempt1.log`, and the cell is booted once more
    after the idle wait. What a second such refusal means is the verdict policy's to say (it knows it is a retry)."""

    def settle(self, first: CellResult, log: Path, again: Again) -> CellResult | None:
        if not (first.outcome == Outcome.refused and first.reason == Reason.gpu_memory_busy):
            return first
        busy = Reason.gpu_memory_busy.value
        kept = log.with_name(f"{first.cell_id}.attempt1.log")
        note(log, f"attempt 1 refused {busy} while memory was held: contaminated, not the configuration's verdict; "
                  "booting once more after the idle wait")
        nofollow.rename(log.parents[1], log, kept)  # RUN/logs: never through a link
        second = again(2)
        if second is None:
            return None
        note(log, f"attempt 2 of 2; attempt 1 refused {busy} (contaminated), its log: "
                  f"{Path(first.log_path or log).with_name(kept.name)}")
        return second

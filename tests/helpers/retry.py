"""A retry policy no library caller needs (the executor's default is BusyRetry): every first attempt is the answer,
for tests that want each refusal as it came."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.boot.retry import Again
from harness.results.model import CellResult


@dataclass(frozen=True)
class NoRetry:
    """Every first attempt is the answer."""

    def settle(self, first: CellResult, log: Path, again: Again) -> CellResult | None:
        return first

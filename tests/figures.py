"""The figures the reliability suite measures (a time to clean, an RSS, a count): kept where the test runs, relayed from
an xdist worker to the controller when it goes down, and printed once at the end of the session (and written as JSON
to $RELIABILITY_FIGURES when it is set; docs/reliability.md quotes them)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

FIGURES: dict[str, list] = defaultdict(list)
#: The key of a worker's figures in xdist's workeroutput (what a worker hands its controller at shutdown).
WORKER_KEY = "boot_harness_figures"


def figure(key: str, value) -> None:
    """Keep one measurement for the end-of-session table."""
    FIGURES[key].append(value)


def hand_over(config) -> None:
    """In an xdist worker: put this worker's figures where its controller reads them."""
    out = getattr(config, "workeroutput", None)
    if out is not None and FIGURES:
        out[WORKER_KEY] = json.dumps(FIGURES)


def take_over(workeroutput: dict) -> None:
    """In the controller: add a finished worker's figures."""
    for key, values in json.loads(workeroutput.get(WORKER_KEY, "{}")).items():
        FIGURES[key].extend(values)


def summary(terminalreporter) -> None:
    if not FIGURES or getattr(terminalreporter.config, "workeroutput", None) is not None:
        return
    terminalreporter.write_sep("-", "reliability figures")
    for key in sorted(FIGURES):
        values = FIGURES[key]
        nums = [v for v in values if isinstance(v, (int, float))]
        if nums and len(nums) == len(values):
            terminalreporter.write_line(f"{key}: n={len(nums)} min={min(nums):.3f} "
                                        f"median={sorted(nums)[len(nums) // 2]:.3f} max={max(nums):.3f}")
        else:
            terminalreporter.write_line(f"{key}: {values}")
    out = os.environ.get("RELIABILITY_FIGURES")
    if out:
        Path(out).write_text(json.dumps(FIGURES, indent=2, sort_keys=True))

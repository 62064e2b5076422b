"""The catalogue of causes: every way a vLLM boot is known to fail, one entry each, by kind (config.py, resource.py,
environment.py, crash.py). What the rest of the harness knows of a failed boot is derived from it: the reasons a cell
can be recorded with (harness.verdict.catalogue), the parser's keyword pre-check (match.py), the schema's names and
docs/results.md's table. Adding a cause is one entry (with its example lines) and a test.
"""

from __future__ import annotations

from . import config, crash, environment, resource
from .model import KIND_OUTCOME, Cause, CauseKind, Finding

#: In the order lines are tried: a line that reads as two causes is the earlier one's (config before resource before
#: environment before crash; within a kind, as each module orders it).
CAUSES: tuple[Cause, ...] = (*config.CAUSES, *resource.CAUSES, *environment.CAUSES, *crash.CAUSES)
BY_ID: dict[str, Cause] = {c.id: c for c in CAUSES}
#: The names recorded runs and matrices used before the catalogue, each to the cause it is now.
ALIASES: dict[str, str] = {alias: c.id for c in CAUSES for alias in c.aliases}

GENERIC_CAUSE = crash.ENGINE_CORE_FAILED_ROOT_CAUSE_NOT_SHOWN
UNCAUGHT = crash.UNCAUGHT_EXCEPTION

__all__ = ["ALIASES", "BY_ID", "CAUSES", "GENERIC_CAUSE", "KIND_OUTCOME", "UNCAUGHT", "Cause", "CauseKind", "Finding"]
